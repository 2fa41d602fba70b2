"""Pairs files written as :mod:`bertkit.data.tasks.retrieval` reads them (``bertkit mine``'s
output): :func:`write_pairs` (training pairs and triples, with teacher ``scores`` when they carry
them) and :func:`write_labelled_pairs` (query, passage, label or score), JSONL, CSV or TSV by the
extension, atomically. TSV is read unquoted, so a tab or line break in a text becomes a space
there.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bertkit.data.tasks.custom import detect_format
from bertkit.data.tasks.retrieval import LabelledPair, TrainingPair
from bertkit.errors import InputError
from bertkit.io import atomic_write_text, format_suffix


def write_pairs(path: str | Path, pairs: Sequence[TrainingPair]) -> None:
    """``pairs`` as :func:`read_pairs` reads them, atomically: ``query``, ``positive`` and
    ``negative`` (one each) or ``negative_1`` .. ``negative_n``, then ``scores`` when the pairs
    carry them (sentence-transformers' column: a list in JSONL, its JSON text in CSV and TSV);
    every pair needs the same number of negatives, and scores on all or none (ValueError)."""
    n = len(pairs[0].negatives) if pairs else 0
    if any(len(p.negatives) != n for p in pairs):
        raise ValueError("every pair needs the same number of negatives")
    scored = bool(pairs) and bool(pairs[0].scores)
    if any(bool(p.scores) != scored for p in pairs):
        raise ValueError("scores on every pair or on none")
    names = ["negative"] if n == 1 else [f"negative_{i}" for i in range(1, n + 1)]
    as_text = output_format(path) != "jsonl"

    def row(p: TrainingPair) -> list[Any]:
        extra = [json.dumps(list(p.scores)) if as_text else list(p.scores)] if scored else []
        return [p.query, p.positive, *p.negatives, *extra]

    header = ["query", "positive", *names, *(["scores"] if scored else [])]
    _write_rows(path, header, map(row, pairs))


def write_labelled_pairs(
    path: str | Path, pairs: Sequence[LabelledPair], column: str = "label"
) -> None:
    """``pairs`` as :func:`read_labelled_pairs` reads them (``query``, ``passage``, ``label``;
    ``column="score"``: the values are scores, as sentence-transformers names them then)."""
    _write_rows(
        path,
        ["query", "passage", column],
        ([p.query, p.passage, int(p.label) if p.label in (0, 1) else p.label] for p in pairs),
    )


def output_format(path: str | Path) -> str:
    """The format :func:`write_pairs` writes ``path`` in (InputError for another extension,
    compressed ones included), for a caller to check before the work that fills it."""
    fmt = detect_format(path)
    if format_suffix(path) != Path(path).suffix.lower():
        raise InputError(
            path, None, "compressed output is not written; name a .jsonl, .csv or .tsv"
        )
    return fmt


def _write_rows(path: str | Path, header: list[str], rows: Iterable[list[Any]]) -> None:
    fmt = output_format(path)
    buf = io.StringIO()
    if fmt == "jsonl":
        for row in rows:
            buf.write(json.dumps(dict(zip(header, row)), ensure_ascii=False) + "\n")
    elif fmt == "csv":
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    else:
        buf.write("\t".join(header) + "\n")
        for row in rows:
            buf.write(
                "\t".join(" ".join(str(v).replace("\t", " ").splitlines()) for v in row) + "\n"
            )
    atomic_write_text(path, buf.getvalue())
