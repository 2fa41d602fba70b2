"""Streaming corpus readers for pre-training: raw text files -> documents -> sentences.

A *document* is a list of sentences (strings); next-sentence prediction draws its "actual next"
segment from within one document and its "random next" segment from another one, so document
boundaries matter. Five input formats are read, one file at a time (``.xz``, ``.gz`` and ``.bz2``
files decompressed on the fly), never holding more than one document in memory:

``bert``
    The original google-research/bert format: one sentence per line, a blank line between
    documents.
``wikiextractor``
    WikiExtractor output: ``<doc id=... title=...>`` ... ``</doc>``; the first non-blank line
    inside a doc is the title (dropped); every other non-blank line is a paragraph, split into
    sentences with :func:`split_sentences`.
``jsonl``
    One JSON object per line holding the document text in a string field (``text`` by default);
    the text is split into paragraphs on newlines, then into sentences.
``paragraphs``
    Plain prose: lines are joined until a blank line; each paragraph is one document, split into
    sentences.
``wikitext``
    WikiText-103/-2 raw files (Merity et al., 2016): `` = Title = `` lines start articles,
    section headings (`` = = Section = = ``) are dropped, each paragraph line is de-tokenized
    (``@-@``, ``@,@``, ``@.@`` joiners; ``<unk>`` removed) and split into sentences.

``parquet``
    Apache Parquet (how Hugging Face datasets and most public corpora ship): each row's string
    column (``text`` by default) is one document, split into paragraphs on newlines, then into
    sentences. Row groups are streamed in batches, so memory stays bounded by a batch. Needs
    ``pyarrow`` (``pip install 'bertkit[parquet]'``).

``auto`` (the default) picks a format per file from its first lines, or the Parquet magic bytes
(see :func:`detect_format`).

Sentence splitting is rule based (no model, no dependency), tuned for Wikipedia prose; the rules
are documented on :func:`split_sentences`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.corpus_format import check_format, marked_format
from bertkit.errors import InputError
from bertkit.input_files import require_file
from bertkit.io import ENCODING_ERRORS, read_text_lines

FORMATS = ("auto", "bert", "wikiextractor", "jsonl", "paragraphs", "wikitext", "parquet")
Span = tuple[int, int] | None
"""Bytes ``(start, end)`` of a file to read, or None for the whole file."""
PARQUET_BATCH_ROWS = 1024
WIKITEXT_TITLE = re.compile(r"^ ?= ([^=].*) = ?$")  # " = Title = "; sections are "= = Section = ="
_WIKITEXT_DETOK = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), ("<unk>", ""))

# Abbreviations after which a period does not end a sentence even before a capital or a digit
# (titles, reference words, months, Latin). Compared lower-cased, without the final period.
# Words like "Inc." or "etc." are left out on purpose: they end sentences often, and when they do
# not, the next word is usually lower-case, which already prevents a split.
ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof sr jr st mt ft gen col lt maj sgt capt cpt adm cmdr gov sen rep rev hon pres
    messrs mme mlle fr br sta
    vs v e.g i.e cf ca c fl approx est no nos vol vols fig figs pp p ch sec art op al ed eds trans
    jan feb mar apr jun jul aug sep sept oct nov dec
    """.split()  # noqa: SIM905 (a word list reads better than a list literal)
)

# A candidate boundary: terminal punctuation, optional closing quotes/brackets, then whitespace.
_BOUNDARY = re.compile(r"[.!?]+[\"'\u2019\u201d)\]]*\s+")
# Characters that may open the next sentence before its first letter.
_OPENERS = "\"'\u2018\u201c([\u00bf\u00a1"
# "U.S", "e.g", "U.S.A" (the final period already removed): dotted abbreviations and initials.
_DOTTED = re.compile(r"^(?:[^\W\d_]\.)+[^\W\d_]$")


def _ends_with_abbreviation(before: str) -> bool:
    """True when the word ending ``before`` (text up to, not including, the period) is an
    abbreviation or initial, so the period is not a sentence end."""
    m = re.search(r"(\S+)$", before)
    if not m:
        return False
    word = m.group(1).lstrip(_OPENERS)
    if not word:
        return False
    if len(word) == 1 and word.isalpha():  # an initial: "J. R. R. Tolkien", "George W. Bush"
        return True
    if _DOTTED.match(word):  # "U.S.", "e.g.", "Ph.D" style
        return True
    return word.lower() in ABBREVIATIONS


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences with rules tuned for Wikipedia text.

    A sentence ends at ``.``, ``!`` or ``?`` (or a run of them, e.g. ``...`` or ``?!``), which may
    be followed by closing quotes or brackets, then whitespace, then a next sentence that starts
    (after optional opening quotes/brackets) with an upper-case letter or a digit. A period does
    not end a sentence when the word before it is:

    - an initial (one letter): ``J. R. R. Tolkien``, ``George W. Bush``;
    - a dotted abbreviation: ``U.S.``, ``e.g.``, ``i.e.``, ``Ph.D.``;
    - a listed abbreviation (:data:`ABBREVIATIONS`): ``Mr.``, ``Dr.``, ``St.``, ``No.``, ``Jan.``.

    Decimals (``3.14``), URLs and version numbers never split because no whitespace follows the
    period. Known limits: a sentence that really ends with ``U.S.`` or an initial is joined to the
    next one, and a sentence starting with a lower-case word is not split off.

    >>> split_sentences('Mr. Smith paid $3.50 in the U.S. He left. "Why?" she asked. (It rained.) Then')
    ['Mr. Smith paid $3.50 in the U.S. He left.', '"Why?" she asked.', '(It rained.)', 'Then']
    """
    text = text.strip()
    sentences: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        nxt = text[m.end() :].lstrip(_OPENERS)
        if not nxt or not (nxt[0].isupper() or nxt[0].isdigit()):
            continue
        punct = m.group(0)
        single_period = punct.rstrip().rstrip("\"'\u2019\u201d)]") == "."
        if single_period and _ends_with_abbreviation(text[start : m.start()]):
            continue
        sentence = text[start : m.end()].strip()
        if sentence:
            sentences.append(sentence)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


@dataclass(frozen=True)
class CorpusOptions:
    """How to read a corpus (``format``: one of :data:`FORMATS`)."""

    format: str = "auto"
    """Corpus format (auto: detected per file)."""
    text_field: str = "text"
    """JSONL field holding the text."""
    encoding_errors: str = "strict"
    """strict: invalid UTF-8 is an error naming file and line; replace: U+FFFD."""

    def __post_init__(self) -> None:
        """Every problem in one ValueError."""
        problems = []
        if self.format not in FORMATS:
            problems.append(f"format must be one of {FORMATS}, got {self.format!r}")
        if self.encoding_errors not in ENCODING_ERRORS:
            problems.append("encoding_errors must be 'strict' or 'replace'")
        if problems:
            raise ValueError("; ".join(problems))


def detect_format(path: str | Path, encoding_errors: str = "strict", probe_lines: int = 200) -> str:
    """Guess a file's format from its first ``probe_lines`` non-blank lines.

    Rules, in order: first non-blank line starts with ``<doc`` -> ``wikiextractor``; it is a
    WikiText title (`` = Title = ``) -> ``wikitext``; it parses as a JSON object -> ``jsonl``; at
    least 80% of the probed lines are one sentence each that ends with terminal punctuation (``.!?``
    possibly followed by a quote or bracket) -> ``bert``; otherwise ``paragraphs`` (wrapped or
    multi-sentence lines). An empty file reads as ``bert`` (no documents either way). A file
    starting with the Parquet magic ``PAR1`` is ``parquet``.
    """
    if marked := marked_format(path, encoding_errors):
        return marked
    lines: list[str] = []
    for _, line in _lines(path, encoding_errors):
        if line.strip():
            lines.append(line.strip())
            if len(lines) >= probe_lines:
                break
    if not lines:
        return "bert"
    if WIKITEXT_TITLE.match(lines[0]):
        return "wikitext"
    one_sentence = sum(
        1
        for line in lines
        if re.search(r"[.!?][\"'\u2019\u201d)\]]*$", line) and len(split_sentences(line)) == 1
    )
    return "bert" if one_sentence >= 0.8 * len(lines) else "paragraphs"


def _lines(path: str | Path, errors: str, span: Span = None) -> Iterator[tuple[int, str]]:
    """``read_text_lines`` without a leading byte-order mark (editors on Windows add one)."""
    return read_text_lines(path, errors, span, replace_hint=True, drop_bom=True)


def _split_paragraph_text(text: str) -> list[str]:
    """Sentences of a text whose lines are paragraphs."""
    out: list[str] = []
    for para in text.split("\n"):
        if para.strip():
            out.extend(split_sentences(para))
    return out


def _read_bert(path: Path, errors: str, span: Span = None) -> Iterator[list[str]]:
    doc: list[str] = []
    for _, line in _lines(path, errors, span):
        line = line.strip()
        if line:
            doc.append(line)
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def _read_paragraphs(path: Path, errors: str, span: Span = None) -> Iterator[list[str]]:
    para: list[str] = []
    for _, line in _lines(path, errors, span):
        line = line.strip()
        if line:
            para.append(line)
        elif para:
            if sentences := split_sentences(" ".join(para)):
                yield sentences
            para = []
    if para and (sentences := split_sentences(" ".join(para))):
        yield sentences


def _read_wikiextractor(path: Path, errors: str, span: Span = None) -> Iterator[list[str]]:
    doc: list[str] | None = None  # None: outside a <doc>
    doc_line = 0
    title_seen = False
    for n, line in _lines(path, errors, span):
        stripped = line.strip()
        if doc is None:
            if not stripped:
                continue
            if not stripped.startswith("<doc"):
                raise InputError(path, n, "expected '<doc ...>' (WikiExtractor format)")
            doc, doc_line, title_seen = [], n, False
        elif stripped.startswith("<doc"):
            raise InputError(path, n, f"expected '</doc>' closing the <doc> of line {doc_line}")
        elif stripped == "</doc>":
            if doc:
                yield doc
            doc = None
        elif stripped:
            if not title_seen:  # WikiExtractor repeats the title as the first line
                title_seen = True
            else:
                doc.extend(split_sentences(stripped))
    if doc is not None:
        raise InputError(path, doc_line, "expected '</doc>' before the end of the file")


def _read_wikitext(path: Path, errors: str, span: Span = None) -> Iterator[list[str]]:
    doc: list[str] = []
    for _, line in _lines(path, errors, span):
        if WIKITEXT_TITLE.match(line):
            if doc:
                yield doc
            doc = []
            continue
        text = line.strip()
        if not text or text.startswith("="):
            continue
        for a, b in _WIKITEXT_DETOK:
            text = text.replace(a, b)
        doc.extend(s for s in split_sentences(" ".join(text.split())) if s)
    if doc:
        yield doc


def _read_jsonl(path: Path, errors: str, field: str, span: Span = None) -> Iterator[list[str]]:
    expected = f"expected a JSON object with a string field {field!r}"
    for n, line in _lines(path, errors, span):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(path, n, f"{expected} (invalid JSON: {e.msg})") from e
        if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
            raise InputError(path, n, expected)
        if sentences := _split_paragraph_text(obj[field]):
            yield sentences


def _read_parquet(path: Path, field: str) -> Iterator[list[str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(
            path, None, "reading Parquet needs pyarrow (pip install 'bertkit[parquet]')"
        ) from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a bad file
        raise InputError(path, None, f"not a readable Parquet file ({e})") from None
    names = pf.schema_arrow.names
    if field not in names:
        raise InputError(
            path, None, f"expected a string column {field!r}; the file has columns {names}"
        )
    row = 0
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[field]):
        for value in batch.column(0).to_pylist():
            row += 1
            if value is None:
                continue
            if not isinstance(value, str):
                raise InputError(
                    path,
                    None,
                    f"row {row}: expected a string in column {field!r}, got {type(value).__name__}",
                )
            if sentences := _split_paragraph_text(value):
                yield sentences


def read_file_documents(
    path: str | Path, options: CorpusOptions | None = None, span: Span = None
) -> Iterator[list[str]]:
    """Yield the non-empty documents of one file, streaming (bounded by the largest document).

    ``span=(start, end)``: only the documents in those bytes of an uncompressed text file, whose
    ends are document starts (:func:`bertkit.data.corpus_spans.document_start`); its lines are
    numbered from 1 in errors.
    """
    options = options or CorpusOptions()
    path = Path(path)
    require_file(path, "file not found (expected a text corpus file)")
    fmt = options.format
    if fmt == "auto":
        fmt = detect_format(path, options.encoding_errors)
    else:  # every piece of a split file checks (one line read): the first may not start at 0
        check_format(path, fmt, options.encoding_errors)
    if span is not None and fmt == "parquet":
        raise ValueError(f"{path}: a Parquet file is read whole, not in byte spans")
    if fmt == "bert":
        yield from _read_bert(path, options.encoding_errors, span)
    elif fmt == "paragraphs":
        yield from _read_paragraphs(path, options.encoding_errors, span)
    elif fmt == "wikiextractor":
        yield from _read_wikiextractor(path, options.encoding_errors, span)
    elif fmt == "wikitext":
        yield from _read_wikitext(path, options.encoding_errors, span)
    elif fmt == "parquet":
        yield from _read_parquet(path, options.text_field)
    else:
        yield from _read_jsonl(path, options.encoding_errors, options.text_field, span)


def read_documents(
    paths: Iterable[str | Path],
    format: str = "auto",
    *,
    text_field: str = "text",
    encoding_errors: str = "strict",
) -> Iterator[list[str]]:
    """Yield documents (lists of sentences) from each file in turn; see the module docstring."""
    options = CorpusOptions(format, text_field, encoding_errors)
    for path in paths:
        yield from read_file_documents(path, options)
