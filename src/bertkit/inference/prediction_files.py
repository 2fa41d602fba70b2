"""The files ``bertkit predict`` writes, chosen by the output's suffix and the model's family.

- ``.tsv`` (sequence classification and regression): the GLUE benchmark's submission format,
  a header ``index<TAB>prediction`` and one row per example in input order: the example's id
  (the ``index`` column of a GLUE test file, else its 1-based line) and the predicted label as
  the model names it (``entailment``, ``not_entailment``, ``0``, ``1``, ...) or, for regression
  (STS-B), the score as it came out (not clipped to 0-5, as transformers' ``run_glue.py``
  writes it). gluebenchmark.com takes a zip of these, one per task, named ``CoLA.tsv``,
  ``SST-2.tsv``, ``MRPC.tsv``, ``STS-B.tsv``, ``QQP.tsv``, ``MNLI-m.tsv``, ``MNLI-mm.tsv``,
  ``QNLI.tsv``, ``RTE.tsv``, ``WNLI.tsv`` and ``AX.tsv`` (the diagnostic set, predicted by
  the MNLI model).
- ``.csv`` (the same families): the same two columns, comma-separated (Python's ``csv``
  quoting, for labels holding a comma or a quote).
- SQuAD: the official ``predictions.json`` (``{"question id": "answer text"}``), unless the
  path ends in ``.jsonl``: then JSON lines as below (id, answer, its character span,
  probability, null_score_diff), as a user naming that suffix expects (it was one JSON object).
- Anything else: JSON lines, one prediction object per example.

Each is written whole and atomically (:func:`bertkit.io.atomic_write`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import ConfigError
from bertkit.io import atomic_write

SUBMISSION_FAMILIES = ("glue", "classify")
"""The families whose predictions a ``.tsv`` output writes as a GLUE submission file."""


def is_submission(path: str | Path) -> bool:
    """Whether ``path`` asks for the two-column table (its suffix is ``.tsv`` or ``.csv``)."""
    return Path(path).suffix.lower() in (".tsv", ".csv")


def submission_rows(predictions: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(index, prediction)`` per prediction of a classifier (``label``) or regressor
    (``score``, written with ``repr``'s shortest round-tripping digits)."""
    rows = []
    for p in predictions:
        if "label" in p:
            value = str(p["label"])
        else:
            score = float(p["score"])
            if not math.isfinite(score):
                raise ConfigError(f"example {p['guid']}: score {score} cannot be submitted")
            value = repr(score)
        rows.append((str(p["guid"]), value))
    return rows


def write_predictions(path: str | Path, family: str, predictions: Sequence[dict[str, Any]]) -> None:
    """Write ``predictions`` of a ``family`` model to ``path`` in the format the module
    docstring gives; a ``.tsv`` or ``.csv`` path for a family without that table is a
    :class:`ConfigError` raised before anything is written."""
    if is_submission(path) and family not in SUBMISSION_FAMILIES:
        raise ConfigError(
            f"{path}: a {Path(path).suffix.lower()} output is the (index, prediction) table of "
            f"classification and regression models; a {family} model writes "
            + ("predictions.json" if family == "squad" else "JSON lines (.jsonl)")
        )
    rows = submission_rows(predictions) if is_submission(path) else None
    with atomic_write(path) as f:
        if rows is not None and Path(path).suffix.lower() == ".csv":
            csv.writer(f, lineterminator="\n").writerows([("index", "prediction"), *rows])
        elif rows is not None:
            f.write("index\tprediction\n")
            f.writelines(f"{i}\t{v}\n" for i, v in rows)
        elif family == "squad" and Path(path).suffix.lower() != ".jsonl":
            json.dump({p["id"]: p["answer"] for p in predictions}, f, indent=2, ensure_ascii=False)
            f.write("\n")
        else:
            f.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions)
