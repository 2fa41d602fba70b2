"""Generic readers for the user's own data: CSV, TSV or JSONL, with columns/fields the user names.

* Classification (single text or pair): ``read_classification(path, text="review", label="stars")``.
  Labels are strings; the label list is the sorted set of training labels unless given (pass the
  training list when reading dev/test so indices agree). ``regression=True`` parses floats.
* Tagging: ``read_tagging(path, tokens="tokens", tags="tags")``. In JSONL the fields hold lists;
  in CSV/TSV they hold space-separated tokens and tags of equal count. Tags are returned in IOB2.

``iter_classification`` (for a known label list) and ``iter_tagging`` give the same examples one
at a time, each parsed as it is pulled (a corpus-scale ``bertkit predict``).

The format comes from the extension (``.csv``, ``.tsv``, ``.jsonl``/``.json``) unless given, looking
through a compression suffix (``train.csv.gz``, ``.xz``, ``.bz2``: decompressed as it is read).
CSV uses standard quoting; TSV treats quotes as ordinary characters, like GLUE.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.tasks._rows import csv_rows, jsonl_rows
from bertkit.data.tasks.conll import TaggedSentence, is_valid_tag, to_iob2
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.errors import InputError
from bertkit.input_files import FOLDER_NOT_FILE
from bertkit.io import format_suffix

FORMATS = ("csv", "tsv", "jsonl")

# text fields tried, in order, in a file that is not in a task's own format
PAIR_FIELDS = (
    ("text", "text_pair"),
    ("sentence1", "sentence2"),
    ("question", "sentence"),
    ("question1", "question2"),
    ("premise", "hypothesis"),
    ("text_a", "text_b"),
)
SINGLE_FIELDS = (("text",), ("sentence",), ("text_a",))
LABEL_FIELDS = ("label", "score")


@dataclass(frozen=True)
class ClassificationData:
    """Examples with label indices into ``labels`` (empty for regression)."""

    examples: list[ClassificationExample]
    labels: list[str]


def detect_format(path: str | Path, format: str | None = None) -> str:
    """``"csv"``, ``"tsv"`` or ``"jsonl"`` from ``format`` or the file extension (looking
    through ``.gz``, ``.xz``, ``.bz2``); InputError for a folder, whatever its name."""
    if Path(path).is_dir():
        raise InputError(path, None, FOLDER_NOT_FILE)
    if format is not None:
        if format.lower() not in FORMATS:
            raise InputError(
                path, None, f"unknown format {format!r}; expected one of {', '.join(FORMATS)}"
            )
        return format.lower()
    suffix = format_suffix(path).lstrip(".")
    if suffix in ("json", "jsonl", "ndjson"):
        return "jsonl"
    if suffix in ("csv", "tsv"):
        return suffix
    raise InputError(
        path,
        None,
        # only `finetune` has a --format flag: mine, predict and evaluate go by the extension
        "cannot tell the format from the extension; expected .csv, .tsv or .jsonl, optionally "
        "compressed (.gz, .xz, .bz2), or, for `bertkit finetune`, --format",
    )


def records(
    path: str | Path, fmt: str, fields: Sequence[str]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line, {field: value})`` holding at least ``fields``; InputError if one is missing."""
    if fmt == "jsonl":
        for lineno, obj in jsonl_rows(path):
            missing = [f for f in fields if f not in obj]
            if missing:
                raise InputError(
                    path,
                    lineno,
                    f"missing field {missing[0]!r} (expected fields {', '.join(fields)})",
                )
            yield lineno, obj
        return
    rows = csv_rows(path, "," if fmt == "csv" else "\t", quoting=fmt == "csv")
    first = next(rows, None)
    if first is None:
        raise InputError(
            path, 1, f"empty file (expected a header naming the columns {', '.join(fields)})"
        )
    hline, header = first
    missing = [f for f in fields if f not in header]
    if missing:
        raise InputError(
            path,
            hline,
            f"expected a header with the column(s) {', '.join(missing)}, got {', '.join(header)}",
        )
    for lineno, row in rows:
        if len(row) != len(header):
            raise InputError(
                path, lineno, f"expected {len(header)} {fmt.upper()} fields, got {len(row)}"
            )
        yield lineno, dict(zip(header, row))


def read_classification(
    path: str | Path,
    *,
    text: str,
    text_pair: str | None = None,
    label: str | None = "label",
    labels: Sequence[str] | None = None,
    regression: bool = False,
    format: str | None = None,
) -> ClassificationData:
    """Read single-text (``text``) or pair (``text``, ``text_pair``) classification data.

    ``label=None`` reads unlabelled data. With ``labels`` given, any other label raises
    InputError; otherwise the label list is the sorted set of labels found (JSON numbers and
    booleans are turned into strings, so ``1`` and ``"1"`` are the same label).
    """
    rows = list(_classification_rows(path, text, text_pair, label, format))
    found = sorted({y for _, _, _, y in rows if y is not None})
    label_list = [] if regression else (list(labels) if labels is not None else found)
    index = {name: i for i, name in enumerate(label_list)}
    examples = [_example(path, row, label, index, regression) for row in rows]
    return ClassificationData(examples, label_list)


def iter_classification(
    path: str | Path,
    *,
    text: str,
    text_pair: str | None = None,
    label: str | None = "label",
    labels: Sequence[str] | None = None,
    regression: bool = False,
    format: str | None = None,
) -> Iterator[ClassificationExample]:
    """The examples of :func:`read_classification` one at a time, for a file whose label list
    is known (a saved model's ``labels``): a row is parsed when it is pulled, so a corpus-scale
    run holds one window of examples, never the file."""
    index = {name: i for i, name in enumerate([] if regression else labels or [])}
    for row in _classification_rows(path, text, text_pair, label, format):
        yield _example(path, row, label, index, regression)


def _classification_rows(
    path: str | Path, text: str, text_pair: str | None, label: str | None, format: str | None
) -> Iterator[tuple[int, str, str | None, str | None]]:
    """``(line, text, text_pair, label as a string or None)`` per record."""
    fields = [f for f in (text, text_pair, label) if f is not None]
    for lineno, rec in records(path, detect_format(path, format), fields):
        a = _text(path, lineno, rec, text)
        b = _text(path, lineno, rec, text_pair) if text_pair else None
        yield lineno, a, b, None if label is None else _label_str(path, lineno, label, rec[label])


def _example(
    path: str | Path,
    row: tuple[int, str, str | None, str | None],
    label: str | None,
    index: dict[str, int],
    regression: bool,
) -> ClassificationExample:
    """A row as an example: its label an index into ``index``'s list (or a float)."""
    lineno, a, b, y = row
    value: int | float | None = None
    if y is not None and regression:
        try:
            value = float(y)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InputError(path, lineno, f"expected a numeric {label!r} value, got {y!r}")
    elif y is not None:
        if y not in index:
            raise InputError(
                path, lineno, f"expected a {label!r} in {{{', '.join(index)}}}, got {y!r}"
            )
        value = index[y]
    return ClassificationExample(str(lineno), a, b, value, lineno)


def _text(path: str | Path, lineno: int, rec: dict[str, Any], name: str) -> str:
    value = rec[name]
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, lineno, f"expected a non-empty text in {name!r}, got {value!r}")
    return value


def _label_str(path: str | Path, lineno: int, name: str, value: Any) -> str:
    """A label as a string (JSON numbers and booleans too); InputError for an empty one or a
    JSON null, list or object."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (str, int, float)) and str(value).strip():
        return str(value).strip()
    raise InputError(
        path, lineno, f"expected a non-empty string or number in {name!r}, got {value!r}"
    )


def read_tagging(
    path: str | Path, *, tokens: str = "tokens", tags: str = "tags", format: str | None = None
) -> list[TaggedSentence]:
    """Read token-tagging data: :func:`iter_tagging`, whole."""
    return list(iter_tagging(path, tokens=tokens, tags=tags, format=format))


def iter_tagging(
    path: str | Path, *, tokens: str = "tokens", tags: str = "tags", format: str | None = None
) -> Iterator[TaggedSentence]:
    """Token-tagging data, one sentence per record, each parsed as it is pulled: per record a
    token list and a tag list of the same length.

    Raises InputError for a missing field, unequal lengths, an empty sentence or a tag that is
    not ``O`` / ``B|I|E|S-TYPE`` (when that record is reached), or a format it cannot tell (at
    once). Tags come back in IOB2 (:func:`~bertkit.data.tasks.conll.to_iob2`).
    """
    return _tagged_records(path, detect_format(path, format), tokens, tags)


def _tagged_records(path: str | Path, fmt: str, tokens: str, tags: str) -> Iterator[TaggedSentence]:
    for lineno, rec in records(path, fmt, [tokens, tags]):
        toks, tgs = rec[tokens], rec[tags]
        if fmt != "jsonl":
            toks, tgs = str(toks).split(), str(tgs).split()
        if (
            not isinstance(toks, list)
            or not all(isinstance(t, str) and t for t in toks)
            or not toks
        ):
            raise InputError(path, lineno, f"expected {tokens!r} to be a non-empty list of strings")
        if not isinstance(tgs, list) or len(tgs) != len(toks):
            got = len(tgs) if isinstance(tgs, list) else type(tgs).__name__
            raise InputError(
                path,
                lineno,
                f"expected {tags!r} to list one tag per token ({len(toks)}), got {got}",
            )
        bad = next((t for t in tgs if not isinstance(t, str) or not is_valid_tag(t)), None)
        if bad is not None:
            raise InputError(path, lineno, f"expected tags O, B-TYPE or I-TYPE, got {bad!r}")
        yield TaggedSentence(tuple(toks), tuple(to_iob2(tgs)), lineno)


def first_record_fields(path: str | Path, format: str | None = None) -> list[str]:
    """The column names of a CSV/TSV header, or the field names of the first JSONL record
    (``[]`` for an empty file): what a reader may pick its columns from."""
    fmt = detect_format(path, format)
    rows = (
        jsonl_rows(path)
        if fmt == "jsonl"
        else csv_rows(path, "," if fmt == "csv" else "\t", fmt == "csv")
    )
    first = next(iter(rows), None)
    return [] if first is None else list(first[1])


def pick_fields(
    path: str | Path, have: Sequence[str], candidates: Sequence[tuple[str, ...]]
) -> tuple[str, ...]:
    """The first candidate tuple of field names that all are in ``have`` (the file's fields,
    :func:`first_record_fields`).

    Raises InputError naming the fields the file has and the ones that were looked for (each
    once: a model's own column is often also a common name).
    """
    for names in candidates:
        if all(n in have for n in names):
            return names
    wanted = " or ".join(dict.fromkeys("+".join(c) for c in candidates))
    raise InputError(path, 1, f"expected text fields {wanted}; the file has {have or 'none'}")
