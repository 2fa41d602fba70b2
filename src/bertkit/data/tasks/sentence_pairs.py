"""Labelled sentence pairs for scoring embeddings: gold similarity scores (STS) or 0/1 labels.

Read with the task readers, nothing parsed here:

- a GLUE task folder of a pair task scored this way (``STS-B``, ``MRPC``, ``QQP``) and a
  ``--split`` (:func:`~bertkit.data.tasks.glue.read_glue_split`), or one of their official TSV
  files, told apart by its header (:func:`~bertkit.data.tasks.glue.read_glue`);
- any CSV/TSV/JSONL with a text pair under the names ``finetune classify`` reads
  (``sentence1``/``sentence2``, ``text``/``text_pair``, ``question1``/``question2`` ...) and a
  numeric ``label`` or ``score`` (:func:`~bertkit.data.tasks.custom.read_classification`).

The kind (``kind="auto"``): STS-B is ``sts``, MRPC and QQP ``pair_classification``; another file
is ``pair_classification`` when every label is 0 or 1, else ``sts`` (a score per pair, any range).
``kind="sts"`` or ``"pair_classification"`` forces it (an STS file whose scores all happen to be
0 or 1 is otherwise read as pair classification); forcing ``pair_classification`` needs every
label to be 0 or 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data.tasks import custom
from bertkit.data.tasks.glue import (
    ClassificationExample,
    GlueTask,
    glue_file,
    glue_task,
    read_glue,
    read_glue_split,
)
from bertkit.errors import ConfigError, InputError
from bertkit.io import format_suffix

PAIR_KINDS = ("auto", "sts", "pair_classification")
"""What a labelled pairs file may be read as: ``auto`` (from the task or the labels, module
docstring) or one of :data:`bertkit.evaluation.pairs.KINDS`, forced."""

GLUE_PAIR_TASKS = {"STS-B": "sts", "MRPC": "pair_classification", "QQP": "pair_classification"}
"""The GLUE tasks read as labelled pairs, and what each is scored as."""


@dataclass(frozen=True)
class SentencePairs:
    """Pairs ``(texts_a[i], texts_b[i])`` with ``labels[i]`` (a gold score, or 0/1), what they
    are scored as (``kind``: sts or pair_classification) and where they came from (``source``:
    ``GLUE MRPC`` or the columns read)."""

    texts_a: list[str]
    texts_b: list[str]
    labels: list[float]
    kind: str
    source: str
    forced: bool = False
    """Whether ``kind`` was forced (``read_sentence_pairs(kind=...)``), not read from the task
    or the labels."""

    def describe(self) -> str:
        """``"pair_classification (GLUE MRPC; labels 0/1, 279 of 408 are 1)"``;
        ``"sts (forced; sentence1, sentence2, score; scores 0 to 1)"`` when the kind was forced."""
        n = len(self.labels)
        if self.kind == "pair_classification":
            ones = sum(1 for y in self.labels if y == 1)
            what = f"labels 0/1, {ones} of {n} are 1"
        else:
            what = f"scores {min(self.labels):g} to {max(self.labels):g}"
        return f"{self.kind} ({'forced; ' if self.forced else ''}{self.source}; {what})"

    def texts(self) -> list[str]:
        """Each distinct text once (the first sides' in order, then the second sides' new ones):
        what is embedded, once each, as sentence-transformers' evaluators embed them."""
        return list(dict.fromkeys([*self.texts_a, *self.texts_b]))

    def sides(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The vectors of ``texts_a`` and of ``texts_b``, (N, H) each, from ``vectors[i]``: the
        vector of ``texts()[i]``."""
        row = {t: i for i, t in enumerate(self.texts())}
        a = vectors[np.array([row[t] for t in self.texts_a])]
        b = vectors[np.array([row[t] for t in self.texts_b])]
        return a, b


def read_sentence_pairs(path: str | Path, split: str = "dev", kind: str = "auto") -> SentencePairs:
    """The labelled pairs of ``path``, read as ``kind`` (:data:`PAIR_KINDS`; auto: from the task
    or the labels, module docstring). Raises InputError (file, line, what was expected) for a
    file with no text pair or no label, a non-numeric label, no pairs, a folder that is not a
    GLUE pair task's, or a label other than 0 or 1 where ``kind`` is pair_classification;
    ConfigError for an unknown ``kind``."""
    if kind not in PAIR_KINDS:
        raise ConfigError(f"pair kind must be one of {', '.join(PAIR_KINDS)}, got {kind!r}")
    p = Path(path)
    task = _glue_task_of(p)
    if task is not None:
        if p.is_dir():
            examples = read_glue_split(p, task, split)
            p = glue_file(p, task, split)  # errors name the file the labels came from
        else:
            examples = read_glue(p, task, labelled=True)
        return _pairs(p, examples, GLUE_PAIR_TASKS[task.name], f"GLUE {task.name}", kind)
    if p.is_dir():
        raise InputError(
            p,
            None,
            f"expected a GLUE task folder ({', '.join(GLUE_PAIR_TASKS)}), a BEIR folder or a "
            "CSV/TSV/JSONL of labelled sentence pairs",
        )
    have = custom.first_record_fields(p)
    text, text_pair = custom.pick_fields(p, have, custom.PAIR_FIELDS)
    label = next((n for n in custom.LABEL_FIELDS if n in have), None)
    if label is None:
        raise InputError(
            p,
            1,
            f"expected a {' or '.join(custom.LABEL_FIELDS)} field with each pair's gold score "
            f"or 0/1 label; the file has {', '.join(have)}",
        )
    data = custom.read_classification(
        p, text=text, text_pair=text_pair, label=label, regression=True
    )
    binary = all(e.label in (0.0, 1.0) for e in data.examples)
    found = "pair_classification" if binary else "sts"
    return _pairs(p, data.examples, found, f"{text}, {text_pair}, {label}", kind)


def is_sentence_pairs(path: str | Path) -> bool:
    """Whether :func:`read_sentence_pairs` reads ``path`` by its layout: a GLUE pair task's folder
    or TSV, or a file whose first record holds a text pair (the names of
    :data:`~bertkit.data.tasks.custom.PAIR_FIELDS`) and a ``label`` or ``score``. Only the
    header or first record is read."""
    p = Path(path)
    if _glue_task_of(p) is not None:
        return True
    if not p.is_file():
        return False
    have = custom.first_record_fields(p)
    pair = any(all(n in have for n in names) for names in custom.PAIR_FIELDS)
    return pair and any(n in have for n in custom.LABEL_FIELDS)


def _glue_task_of(p: Path) -> GlueTask | None:
    """The GLUE pair task of a folder named after it, or of a TSV with its header; else None."""
    if p.is_dir():
        name = p.name.replace("-", "").upper()
        found = [t for t in GLUE_PAIR_TASKS if t.replace("-", "").upper() == name]
        return glue_task(found[0]) if found else None
    if format_suffix(p) != ".tsv" or not p.is_file():
        return None
    have = tuple(custom.first_record_fields(p, "tsv"))
    for name in GLUE_PAIR_TASKS:
        t = glue_task(name)
        if t.header is not None and have[: len(t.header)] == t.header:
            return t
    return None


def _pairs(
    path: Path, examples: list[ClassificationExample], found: str, source: str, kind: str
) -> SentencePairs:
    """The pairs of ``examples``, scored as ``kind``, or as ``found`` (the task's or the
    labels' kind) where ``kind`` is auto."""
    if not examples:
        raise InputError(path, None, "no pairs (expected labelled sentence pairs)")
    first = examples[0]
    if first.label is None or first.text_b is None:
        raise InputError(
            path,
            first.line or None,
            "expected labelled sentence pairs (a test split has no labels)",
        )
    if kind == "pair_classification":
        bad = next((e for e in examples if e.label not in (0, 1)), None)
        if bad is not None:
            raise InputError(
                path,
                bad.line or None,
                f"pair kind pair_classification needs every label to be 0 or 1, got "
                f"{bad.label!r} (use sts, or auto, for gold similarity scores)",
            )
    return SentencePairs(
        [e.text_a for e in examples],
        [e.text_b or "" for e in examples],
        [float(e.label) for e in examples if e.label is not None],
        found if kind == "auto" else kind,
        source,
        forced=kind != "auto",
    )
