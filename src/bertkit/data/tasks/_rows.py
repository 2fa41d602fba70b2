"""Row readers shared by the task readers: CSV/TSV and JSONL with 1-based line numbers."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertkit.errors import InputError
from bertkit.io import read_text_lines


def csv_rows(
    path: str | Path, delimiter: str = ",", quoting: bool = True
) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(first line of the row, fields)`` for the non-empty rows of a CSV/TSV file.

    With ``quoting`` (CSV convention) quoted fields may hold delimiters and span lines; without
    it (the GLUE TSV convention, ``quotechar=None``) a quote is an ordinary character. A leading
    UTF-8 byte-order mark is dropped. Invalid UTF-8 and malformed quoting raise InputError.
    """
    lines = read_text_lines(path, drop_bom=True)
    state = {"line": 0}

    def text() -> Iterator[str]:
        for n, line in lines:
            state["line"] = n
            yield line + "\n"

    if quoting:
        reader = csv.reader(text(), delimiter=delimiter, strict=True)
    else:
        reader = csv.reader(text(), delimiter=delimiter, quoting=csv.QUOTE_NONE, quotechar=None)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise InputError(path, state["line"], f"malformed CSV ({e})") from e
        if row and any(field.strip() for field in row):
            yield start, row
        start = state["line"] + 1


def jsonl_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line, object)`` for each non-blank line of a JSON-lines file (a leading UTF-8
    byte-order mark is dropped, as :func:`csv_rows` drops it)."""
    for lineno, line in read_text_lines(path, drop_bom=True):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(
                path,
                lineno,
                f"invalid JSON at column {e.colno}: {e.msg} (expected one JSON object per line)",
            ) from e
        if not isinstance(obj, dict):
            raise InputError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj
