"""Sequence classification and regression: single texts or pairs (glue, classify).

Head: ``BertForSequenceClassification``. Metric: the GLUE task's official one (mcc, accuracy,
accuracy + F1, Pearson/Spearman), or for the user's own data accuracy + F1 with two labels,
accuracy with more, Pearson/Spearman for regression (``labels == []``).

Long inputs: windows (:mod:`bertkit.tasks.windows`); training sees every window with its
document's label, prediction combines the window logits (``windows.window_pooling``: a
token-weighted mean by default, or the element-wise max).

Reading: a GLUE folder or an official GLUE TSV, or any CSV/TSV/JSONL holding the text field(s).
A model fine-tuned on GLUE therefore also scores the user's own file: STS-B's
``{"sentence1": ..., "sentence2": ...}`` JSONL, or ``text`` / ``text_pair`` fields.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks import custom
from bertkit.data.tasks.glue import glue_task, iter_glue, read_glue, read_glue_split
from bertkit.errors import InputError
from bertkit.evaluation.classification import glue_metrics
from bertkit.io import format_stem, format_suffix, read_text_lines
from bertkit.tasks import features as F
from bertkit.tasks.base import Scored, TaskAdapter, softmax, unscored
from bertkit.tasks.windows import DEFAULT_MAX_SEQ_LENGTH, WindowConfig, aggregate
from bertkit.tokenizer.protocol import Tokenizer


def metric_for(labels: Sequence[str], regression: bool) -> str:
    """The metric for the user's own data: see the module docstring."""
    if regression:
        return "pearson_spearman"
    return "accuracy_f1" if len(labels) == 2 else "accuracy"


@dataclass
class ClassificationAdapter(TaskAdapter):
    """Single-text or pair classification, or regression (``labels == []``).

    glue: ``name`` is the GLUE task; ``metric`` its official metric. classify: ``columns`` names
    the text/pair/label columns of the user's CSV/TSV/JSONL files.
    """

    labels: list[str] = field(default_factory=list)
    metric: str = "accuracy"
    columns: dict[str, str | None] = field(default_factory=dict)
    file_format: str | None = None
    windows: WindowConfig = field(default_factory=WindowConfig)

    head_class = "BertForSequenceClassification"

    def __post_init__(self) -> None:
        self.windows = WindowConfig.of(self.windows)  # a dict from bertkit_task.json

    @classmethod
    def for_glue(
        cls,
        task: str,
        max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
        windows: WindowConfig | None = None,
    ) -> ClassificationAdapter:
        t = glue_task(task)
        return cls(
            "glue",
            t.name,
            max_seq_length,
            labels=list(t.labels or []),
            metric=t.metric,
            windows=windows or WindowConfig(),
        )

    @classmethod
    def for_files(
        cls,
        train: str | Path,
        columns: dict[str, str | None],
        *,
        regression: bool = False,
        file_format: str | None = None,
        max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
        windows: WindowConfig | None = None,
    ) -> tuple[ClassificationAdapter, list[Any]]:
        """The adapter for the user's own files, with its label list (the sorted set of the
        training labels) and metric, and the training examples."""
        data = custom.read_classification(
            train,
            text=columns["text"],
            text_pair=columns.get("text_pair"),
            label=columns["label"],
            regression=regression,
            format=file_format,
        )
        adapter = cls(
            "classify",
            format_stem(train),
            max_seq_length,
            labels=data.labels,
            metric=metric_for(data.labels, regression),
            columns=columns,
            file_format=file_format,
            windows=windows or WindowConfig(),
        )
        return adapter, data.examples

    @property
    def regression(self) -> bool:
        return self.metric == "pearson_spearman"

    @property
    def main_metric(self) -> str:  # type: ignore[override]
        return {"mcc": "mcc", "accuracy": "accuracy", "accuracy_f1": "f1"}.get(
            self.metric, "spearman"
        )

    @property
    def is_pair(self) -> bool:
        if self.family == "glue":
            return len(glue_task(self.name).text_columns) == 2
        return bool(self.columns.get("text_pair"))

    def config_overrides(self) -> dict[str, Any]:
        if self.regression:
            return {"num_labels": 1, "problem_type": "regression"}
        return {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels))}

    def dev_splits(self) -> tuple[str, ...]:
        return glue_task(self.name).dev_splits if self.family == "glue" else ("dev",)

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        p = Path(path)
        if self.family == "glue" and p.is_dir():
            return read_glue_split(p, self.name, split)
        if self.family == "glue" and format_suffix(p) == ".tsv":
            t = glue_task(self.name)
            if t.header is None:  # CoLA's files have no header: only the official format is read
                return read_glue(p, self.name)
            have = custom.first_record_fields(p, "tsv")
            if all(c in have for c in t.text_columns):
                return read_glue(p, self.name)
            return self._read_fields(p, have)
        return self._read_fields(p, custom.first_record_fields(p, self.file_format))

    def iter_read(self, path: str | Path, split: str = "dev") -> Iterator[Any]:
        """:meth:`read` one example at a time where the file allows it (a GLUE TSV, any
        CSV/TSV/JSONL with the saved model's labels); a GLUE folder is read whole."""
        p = Path(path)
        if self.family == "glue" and p.is_dir():
            return iter(read_glue_split(p, self.name, split))
        if self.family == "glue" and format_suffix(p) == ".tsv":
            t = glue_task(self.name)
            if t.header is None:
                return iter_glue(p, self.name)
            have = custom.first_record_fields(p, "tsv")
            if all(c in have for c in t.text_columns):
                return iter_glue(p, self.name)
            return custom.iter_classification(p, **self._fields(p, have))
        have = custom.first_record_fields(p, self.file_format)
        return custom.iter_classification(p, **self._fields(p, have))

    def header_lines(self, path: str | Path) -> int:
        """CoLA's train and dev TSV files have no header (its test file has one); the rest as
        any CSV/TSV."""
        cola = self.family == "glue" and glue_task(self.name).header is None
        if cola and format_suffix(path) == ".tsv":
            first = next(read_text_lines(path), (0, ""))[1]
            return int(first.split("\t") == ["index", "sentence"])  # iter_glue's test
        return super().header_lines(path)

    def _label_names(self) -> list[str]:
        """The label column's names, in the order :meth:`_fields` looks for them."""
        names = [self.columns["label"]] if self.columns.get("label") else []
        if self.family == "glue":
            names.append(glue_task(self.name).label_column)
        return [*names, *custom.LABEL_FIELDS]

    def require_labelled(self, path: str | Path, split: str, examples: list[Any]) -> list[Any]:
        """A CSV/TSV/JSONL with no label column at all is named by its header (its first
        record), as the training file's reader names it, rather than by its first example."""
        p = Path(path)
        glue_only = self.family == "glue" and (p.is_dir() or glue_task(self.name).header is None)
        if examples and examples[0].label is None and p.is_file() and not glue_only:
            have = custom.first_record_fields(p, self.file_format)
            names = list(dict.fromkeys(self._label_names()))
            if not any(n in have for n in names):
                raise InputError(
                    p,
                    1,
                    f"expected labelled {split} data, with a label column "
                    f"({' or '.join(names)}); got {', '.join(have)}",
                )
        return super().require_labelled(path, split, examples)

    def _read_fields(self, path: Path, have: list[str]) -> list[Any]:
        """Any CSV/TSV/JSONL (``have``: its fields): see :meth:`_fields`."""
        return custom.read_classification(path, **self._fields(path, have)).examples

    def _fields(self, path: Path, have: list[str]) -> dict[str, Any]:
        """How to read a CSV/TSV/JSONL holding ``have``: the adapter's own columns, the GLUE
        task's, or common names; the label column if there is one."""
        own = tuple(c for c in (self.columns.get("text"), self.columns.get("text_pair")) if c)
        glue = glue_task(self.name).text_columns if self.family == "glue" else ()
        common = custom.PAIR_FIELDS if self.is_pair else custom.SINGLE_FIELDS
        candidates = [c for c in (own, tuple(glue), *common) if c]
        names = custom.pick_fields(path, have, candidates)
        label = next((n for n in self._label_names() if n in have), None)
        return {
            "text": names[0],
            "text_pair": names[1] if len(names) > 1 else None,
            "label": label,
            "labels": None if self.regression else self.labels,
            "regression": self.regression,
            "format": self.file_format,
        }

    def encode(
        self,
        tokenizer: Tokenizer,
        examples: Sequence[Any],
        training: bool,
        *,
        text_pair_max_tokens: int | None = None,
        max_windows: int | None = None,
    ) -> list[Any]:
        """The windows of the examples (:func:`~bertkit.tasks.features.encode_classification`,
        with its caps on a pair's second text and on the windows; a request's, never saved)."""
        return F.encode_classification(
            tokenizer,
            examples,
            self.max_seq_length,
            self.windows,
            text_pair_max_tokens=text_pair_max_tokens,
            max_windows=max_windows,
        )

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        batch = F.pad_batch(features, pad_id)
        if "labels" in batch and self.regression:
            batch["labels"] = batch["labels"].astype(np.float32)
        return batch

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        return list(out.logits.float().cpu().numpy())

    def example_logits(
        self, features: Sequence[Any], rows: Sequence[Any], inputs: int
    ) -> np.ndarray:
        """(inputs, K) float32: each input's window logits (``rows``, one per feature) combined
        by :attr:`WindowConfig.window_pooling`, the one row prediction and scoring read (and a
        distillation teacher's targets, :mod:`bertkit.training.distill`)."""
        return aggregate(
            np.stack(rows),
            [f.example_index for f in features],
            [len(f.input_ids) for f in features],
            inputs,
            self.windows.window_pooling,
        )

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        logits = self.example_logits(features, rows, len(examples))
        if self.regression:
            values = logits[:, 0]
            preds = [{"guid": e.guid, "score": float(v)} for e, v in zip(examples, values)]
        else:
            values = logits.argmax(-1)
            preds = [
                {
                    "guid": e.guid,
                    "label": self.labels[int(k)],
                    "probabilities": [round(float(x), 6) for x in p],
                    "logits": [float(x) for x in row],
                }
                for e, k, p, row in zip(examples, values, softmax(logits), logits)
            ]
        gold = [e.label for e in examples]
        if any(g is None for g in gold):
            return unscored(preds)
        metrics = glue_metrics(self.metric, np.asarray(gold), values)
        return Scored(metrics, float(metrics[self.main_metric]), preds)
