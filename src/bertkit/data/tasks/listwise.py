"""Listwise reranking data: a query, its candidate documents and a graded label for each.

A JSON-lines file, one list a line, with the column names of sentence-transformers' listwise
losses (``ListNetLoss``, ``LambdaLoss``; its MS MARCO listwise example)::

    {"query": "what are pandas?", "docs": ["Pandas are bears.", "A pan."], "labels": [2, 0]}

Lists may differ in length (sentence-transformers pads them in the loss, as bertkit does:
:mod:`bertkit.model.group_losses`). Each label is a finite number (binary or graded relevance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.tasks.custom import detect_format, records
from bertkit.data.tasks.retrieval import LabelledPair
from bertkit.errors import InputError

LIST_FIELDS = ("query", "docs", "labels")
"""The fields of a listwise record (a file whose first record has ``docs`` is listwise)."""


@dataclass(frozen=True)
class RankedList:
    """A query, its candidate documents and their relevance labels (as many as documents)."""

    query: str
    docs: tuple[str, ...]
    labels: tuple[float, ...]
    line: int = 0
    """The record's line in its file (for errors about it found later)."""


def read_lists(path: str | Path, format: str | None = None) -> list[RankedList]:
    """The lists of a listwise JSONL file; a bad record is an InputError naming the file, the
    line and what was expected (a query, a non-empty list of texts, one number per text)."""
    if detect_format(path, format) != "jsonl":
        raise InputError(path, None, "a listwise file is JSON lines (docs and labels are lists)")
    out = [_ranked(path, line, rec) for line, rec in records(path, "jsonl", ())]
    if not out:
        raise InputError(path, None, "no records")
    return out


def _ranked(path: str | Path, line: int, rec: dict[str, Any]) -> RankedList:
    expected = 'expected {"query": TEXT, "docs": [TEXT, ...], "labels": [NUMBER, ...]}'
    query, docs, labels = (rec.get(k) for k in LIST_FIELDS)
    if not isinstance(query, str) or not query.strip():
        raise InputError(path, line, f"no query; {expected}")
    if not isinstance(docs, list) or not docs:
        raise InputError(path, line, f"no docs (a non-empty list of texts); {expected}")
    if not all(isinstance(d, str) and d.strip() for d in docs):
        raise InputError(path, line, f"a doc that is not a non-empty text; {expected}")
    if not isinstance(labels, list) or len(labels) != len(docs):
        have = len(labels) if isinstance(labels, list) else "no list of"
        raise InputError(path, line, f"{len(docs)} docs but {have} labels; {expected}")
    bad = [x for x in labels if isinstance(x, bool) or not isinstance(x, (int, float))]
    if bad or not all(math.isfinite(x) for x in labels):
        shown = bad[0] if bad else next(x for x in labels if not math.isfinite(x))
        raise InputError(path, line, f"label {shown!r} is not a finite number; {expected}")
    return RankedList(query, tuple(docs), tuple(float(x) for x in labels), line)


def list_pairs(path: str | Path, lists: list[RankedList], unit: bool) -> list[LabelledPair]:
    """Each list's (query, doc, label) pairs, one ``group`` per list: a listwise dev set scored as
    labelled pairs, or (``unit``: labels must lie in [0, 1], else an InputError naming the line)
    a listwise file training a pointwise (``bce``) reranker."""
    out: list[LabelledPair] = []
    for group, x in enumerate(lists):
        if unit and not all(0.0 <= y <= 1.0 for y in x.labels):
            shown = next(y for y in x.labels if not 0.0 <= y <= 1.0)
            raise InputError(
                path,
                x.line,
                f"label {shown:g} is outside [0, 1]: --loss bce trains on labels in [0, 1]; "
                "graded lists train with --loss listnet or ranking",
            )
        out += [LabelledPair(x.query, d, y, group) for d, y in zip(x.docs, x.labels, strict=True)]
    return out
