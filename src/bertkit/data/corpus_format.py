"""Which corpus format a file declares by its own markers (the Parquet magic, WikiExtractor's
``<doc`` tags, a JSON object per line), and the check that an explicit ``--format`` agrees.

Plain-text formats (``bert``, ``paragraphs``, ``wikitext``) carry no such marker; telling them
apart from each other is :func:`bertkit.data.corpus.detect_format`'s guess."""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.errors import InputError
from bertkit.io import read_text_lines

PARQUET_MAGIC = b"PAR1"


def _marker(path: str | Path, encoding_errors: str) -> tuple[str | None, int]:
    """(The marked format or None, the 1-based line that marks it; 0 for Parquet)."""
    if is_parquet(path):
        return "parquet", 0
    lines = read_text_lines(path, encoding_errors, replace_hint=True, drop_bom=True)
    for number, line in lines:
        first = line.strip()
        if not first:
            continue
        if first.startswith("<doc"):
            return "wikiextractor", number
        if first.startswith("{"):
            try:
                if isinstance(json.loads(first), dict):
                    return "jsonl", number
            except json.JSONDecodeError:
                pass
        return None, number
    return None, 0


def marked_format(path: str | Path, encoding_errors: str = "strict") -> str | None:
    """The format a file's own markers name, or None for plain text: the Parquet magic
    (``parquet``), a first non-blank line starting with ``<doc`` (``wikiextractor``) or parsing as
    a JSON object (``jsonl``)."""
    return _marker(path, encoding_errors)[0]


def check_format(path: str | Path, fmt: str, encoding_errors: str = "strict") -> None:
    """Refuse an explicit ``fmt`` that would read a marked file (:func:`marked_format`) as
    another format: ``--format bert`` on JSON lines would pre-train on the JSON syntax, one
    "sentence" per record, without a word of warning."""
    marked, line = _marker(path, encoding_errors)
    if marked is None or marked == fmt:
        return
    what = {
        "parquet": "a Parquet file (it starts with the Parquet magic bytes)",
        "wikiextractor": "WikiExtractor output (its first line is a <doc ...> tag)",
        "jsonl": "JSON lines (its first line is a JSON object)",
    }[marked]
    raise InputError(
        str(path),
        line or None,
        f"read as --format {fmt}, but the file is {what}; pass --format {marked} or --format auto",
    )


def is_parquet(path: str | Path) -> bool:
    """Whether the file starts with the Parquet magic ``PAR1``."""
    with open(path, "rb") as f:
        return f.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
