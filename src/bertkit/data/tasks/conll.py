"""CoNLL-style column files and the tag schemes used for named-entity tagging.

File format: one token per line, columns separated by whitespace, the token in the first column
and the tag in the last (or a chosen) column; a blank line ends a sentence; ``-DOCSTART-`` lines
mark documents and are not tokens::

    -DOCSTART- -X- -X- O

    EU NNP B-NP B-ORG
    rejects VBZ B-VP O

Tag schemes. IOB2 (also called BIO) starts every chunk with ``B-``. IOB1 (the original CoNLL-2003
files) uses ``I-`` everywhere and ``B-`` only for a chunk that directly follows a chunk of the
same type. Both describe the same spans under the conlleval rules (:func:`bertkit.evaluation.chunks.tag_spans`), and
:func:`to_iob2` rewrites either one as IOB2, which is what training uses so that every entity
starts with the same ``B-`` label. IOBES (``E-``, ``S-``) is read and scored too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bertkit.errors import InputError
from bertkit.evaluation.chunks import split_tag, tag_spans
from bertkit.io import COMPRESSED_SUFFIXES, read_text_lines

SCHEMES = ("AUTO", "IOB1", "IOB2", "BIO", "IOBES")
W = TypeVar("W")


@dataclass(frozen=True)
class TaggedSentence:
    """Tokens and their tags (same length); ``line`` is the 1-based line of the first token."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    line: int = 0
    document: int = 0


def is_valid_tag(tag: str) -> bool:
    """True for ``O`` and ``B|I|E|S-TYPE`` tags."""
    prefix, kind = split_tag(tag)
    return tag == "O" or (prefix in ("B", "I", "E", "S") and kind != "")


def to_iob2(tags: Sequence[str]) -> list[str]:
    """Rewrite IOB1 (or IOB2, or IOBES) tags as IOB2 with the same conlleval spans.

    Example (IOB1 -> IOB2): ``I-PER I-PER B-PER O I-LOC`` -> ``B-PER I-PER B-PER O B-LOC``.
    Valid IOB2 input comes back unchanged.
    """
    out = list(tags)
    for kind, start, end in tag_spans(tags):
        out[start] = f"B-{kind}"
        for i in range(start + 1, end):
            out[i] = f"I-{kind}"
    return out


def to_iob1(tags: Sequence[str]) -> list[str]:
    """Rewrite tags as IOB1: ``B-`` only where a chunk directly follows one of the same type."""
    out = ["O"] * len(tags)
    prev_end, prev_kind = -1, ""
    for kind, start, end in tag_spans(tags):
        first = "B" if (start == prev_end and kind == prev_kind) else "I"
        out[start] = f"{first}-{kind}"
        for i in range(start + 1, end):
            out[i] = f"I-{kind}"
        prev_end, prev_kind = end, kind
    return out


def read_conll(
    path: str | Path,
    *,
    tag_column: int = -1,
    token_column: int = 0,
    scheme: str = "auto",
    convert_to_iob2: bool = True,
) -> list[TaggedSentence]:
    """Read a CoNLL column file into sentences: :func:`iter_conll`, whole."""
    return list(
        iter_conll(
            path,
            tag_column=tag_column,
            token_column=token_column,
            scheme=scheme,
            convert_to_iob2=convert_to_iob2,
        )
    )


def iter_conll(
    path: str | Path,
    *,
    tag_column: int = -1,
    token_column: int = 0,
    scheme: str = "auto",
    convert_to_iob2: bool = True,
) -> Iterator[TaggedSentence]:
    """The sentences of a CoNLL column file, each parsed as it is pulled (the file is read line
    by line, so a corpus-scale run holds one window of sentences, never the file).

    ``tag_column``/``token_column`` index the whitespace-separated columns (negative counts from
    the end). ``scheme`` names the file's scheme ("auto", IOB1, IOB2, BIO or IOBES); it is
    checked only for IOB2/BIO, where an ``I-`` tag that starts a chunk is reported ("auto" and
    IOB1 accept any mix, read with the conlleval rules). With ``convert_to_iob2``
    the tags are returned in IOB2 (:func:`to_iob2`), which keeps every span.

    Raises InputError(path, line, ...) for a line with a different column count than the file's
    first token line or a tag that is not ``O`` or ``B/I/E/S-TYPE`` (when that line is reached),
    or an unknown scheme (at once).
    """
    if scheme.upper() not in SCHEMES:
        raise InputError(
            path, None, f"unknown tag scheme {scheme!r}; expected one of {', '.join(SCHEMES)}"
        )
    return _iter_conll(path, tag_column, token_column, scheme.upper(), convert_to_iob2)


def _sentences(
    path: str | Path, word: Callable[[int, list[str]], W]
) -> Iterator[tuple[int, int, list[W]]]:
    """``(first line, document, words)`` per sentence of a CoNLL-style file, read line by line:
    the one home of the layout. A token line is any line whose first column is not
    ``-DOCSTART-``; a blank line ends a sentence (several in a row end one); a ``-DOCSTART-``
    line ends one too and starts the next document (``document`` counts those lines, 0 before
    the first). ``word(line, columns)`` turns each token line into a word as it is read (and
    raises InputError for a bad one), so errors come in file order. A leading UTF-8 byte-order
    mark is dropped (else a first ``-DOCSTART-`` line would read as a token)."""
    words: list[W] = []
    first = doc = 0
    for lineno, line in read_text_lines(path, drop_bom=True):
        cols = line.split()
        if _is_token_line(cols):
            if not words:
                first = lineno
            words.append(word(lineno, cols))
            continue
        if words:
            yield first, doc, words
            words = []
        if cols:  # -DOCSTART-
            doc += 1
    if words:  # no blank line after the last sentence
        yield first, doc, words


def count_sentences(path: str | Path) -> int | None:
    """About how many sentences :func:`iter_conll` / :func:`iter_tokens` will yield (token lines
    that follow a blank or ``-DOCSTART-`` line, or start the file), counted in one pass over the
    bytes without decoding: a progress bar's total. None for a compressed file."""
    path = Path(path)
    if path.suffix.lower() in COMPRESSED_SUFFIXES:
        return None
    n, inside = 0, False
    with open(path, "rb") as f:
        for i, raw in enumerate(f):
            token = _is_token_line(
                (raw.removeprefix(b"\xef\xbb\xbf") if i == 0 else raw).split(None, 1)
            )
            n += token and not inside
            inside = token
    return n


def _is_token_line(cols: list[str] | list[bytes]) -> bool:
    """A line's columns (decoded, or raw bytes) hold a token: not blank, not ``-DOCSTART-``."""
    return bool(cols) and cols[0] not in ("-DOCSTART-", b"-DOCSTART-")


def _iter_conll(
    path: str | Path, tag_column: int, token_column: int, scheme: str, convert: bool
) -> Iterator[TaggedSentence]:
    width: int | None = None

    def word(lineno: int, cols: list[str]) -> tuple[str, str]:
        nonlocal width
        if width is None:
            width = len(cols)
            for col in (tag_column, token_column):
                if not -width <= col < width:
                    raise InputError(
                        path,
                        lineno,
                        f"expected at least {abs(col) + (col >= 0)} columns, got {width}",
                    )
        if len(cols) != width:
            raise InputError(
                path, lineno, f"expected {width} whitespace-separated columns, got {len(cols)}"
            )
        tag = cols[tag_column]
        if not is_valid_tag(tag):
            raise InputError(
                path,
                lineno,
                # 1-based and counted, not the index: "column -1" read as a typo, and a line of
                # plain text ("John lives in London") needs the layout said
                f"expected a tag O, B-TYPE or I-TYPE in column {tag_column % width + 1} of "
                f"{width}, got {tag!r} (CoNLL columns: one token per line)",
            )
        return cols[token_column], tag

    for first, doc, words in _sentences(path, word):
        tags = [tag for _, tag in words]
        if scheme in ("IOB2", "BIO"):
            _check_iob2(path, first, tags)
        out = to_iob2(tags) if convert else tags
        yield TaggedSentence(tuple(token for token, _ in words), tuple(out), first, doc)


def _check_iob2(path: str | Path, first_line: int, tags: list[str]) -> None:
    prev_kind = ""
    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        if prefix == "I" and prev_kind != kind:
            raise InputError(
                path,
                first_line + i,
                f"expected B-{kind} to start an entity in an IOB2 file, got {tag!r} "
                "(is the file IOB1? pass scheme='IOB1')",
            )
        prev_kind = kind if prefix in ("B", "I") else ""


def write_conll(sentences: Sequence[TaggedSentence], f) -> None:
    """Write ``token tag`` lines with a blank line after each sentence to the text file ``f``."""
    for s in sentences:
        for token, tag in zip(s.tokens, s.tags):
            f.write(f"{token} {tag}\n")
        f.write("\n")


def is_token_only(path: str | Path) -> bool:
    """Whether the first token line of a CoNLL-style file has one column (tokens, no tags):
    the prediction input of a tagger."""
    for _, line in read_text_lines(path, drop_bom=True):
        cols = line.split()
        if _is_token_line(cols):
            return len(cols) == 1
    return False


def read_tokens(path: str | Path) -> list[TaggedSentence]:
    """Sentences of a one-token-per-line file: :func:`iter_tokens`, whole."""
    return list(iter_tokens(path))


def iter_tokens(path: str | Path) -> Iterator[TaggedSentence]:
    """Sentences of a one-token-per-line file (blank line between sentences), with no tags,
    each parsed as it is pulled; ``-DOCSTART-`` lines start a new document, as in
    :func:`iter_conll`. Raises InputError(path, line, ...) for a line of more than one column."""

    def word(lineno: int, cols: list[str]) -> str:
        if len(cols) != 1:
            raise InputError(
                path,
                lineno,
                f"expected one token per line (like the file's first), got {len(cols)} columns",
            )
        return cols[0]

    for first, doc, words in _sentences(path, word):
        yield TaggedSentence(tuple(words), (), first, doc)
