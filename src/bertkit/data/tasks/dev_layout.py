"""What a dev set for an embedding model holds: retrieval data or labelled sentence pairs.

``bertkit finetune embeddings --dev`` and ``bertkit evaluate --data`` take either, told apart by
:func:`dev_layout` from the path's layout alone (a folder's kind, a file's first record).
"""

from __future__ import annotations

from pathlib import Path

from bertkit.data.tasks import custom
from bertkit.data.tasks.retrieval import POSITIVE_FIELDS, QUERY_FIELDS
from bertkit.data.tasks.sentence_pairs import is_sentence_pairs
from bertkit.errors import InputError


def dev_layout(path: str | Path, file_format: str | None = None) -> str:
    """``"retrieval"`` or ``"pairs"`` (labelled sentence pairs): what a dev ``path`` holds.

    A folder is a GLUE pair task's (pairs) or else a BEIR one (retrieval; read_beir names what
    it lacks). A file's first record decides: a query field (query, anchor, question) with a
    positive one (positive, pos, passage, document) is retrieval; a text pair (sentence1 and
    sentence2, text and text_pair, ...) with a numeric ``label`` or ``score`` is pairs. Raises
    InputError naming the file when it has both layouts' fields or neither's."""
    p = Path(path)
    labelled = is_sentence_pairs(p)
    if p.is_dir() or not p.is_file():
        return "pairs" if labelled else "retrieval"
    have = custom.first_record_fields(p, file_format)
    retrieval = any(n in have for n in QUERY_FIELDS) and any(n in have for n in POSITIVE_FIELDS)
    if labelled and retrieval:
        raise InputError(
            p,
            1,
            f"ambiguous dev file: its fields ({', '.join(have)}) are both a (query, positive) "
            "retrieval pair and a labelled sentence pair (a text pair and a label or score); "
            "keep one layout's fields",
        )
    if labelled:
        return "pairs"
    if not retrieval and have:
        pairs = " or ".join("+".join(names) for names in custom.PAIR_FIELDS)
        raise InputError(
            p,
            1,
            f"expected a dev file of (query, positive) retrieval pairs ({'/'.join(QUERY_FIELDS)} "
            f"and {'/'.join(POSITIVE_FIELDS)}) or of labelled sentence pairs ({pairs}, and "
            f"{' or '.join(custom.LABEL_FIELDS)}); the file has {', '.join(have)}",
        )
    return "retrieval"
