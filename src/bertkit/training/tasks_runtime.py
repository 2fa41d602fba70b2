"""Per-family fine-tuning adapters: which head, how features and batches are built, how dev is scored.

An adapter joins the readers and feature conversion of :mod:`bertkit.data.tasks` with the metrics of
:mod:`bertkit.evaluation` for one task family, so the fine-tuning loop
(:mod:`bertkit.training.finetune`) stays generic:

===============  ===============================  ======================================
family           head                             official metric (selection key)
===============  ===============================  ======================================
glue, classify   BertForSequenceClassification    the GLUE task's (mcc/accuracy/f1/spearman)
ner, tag         BertForTokenClassification       entity F1 (conlleval)
squad            BertForQuestionAnswering         SQuAD F1 (v2.0: at the tuned null threshold)
swag             BertForMultipleChoice            accuracy
===============  ===============================  ======================================

``adapter.state()`` is a JSON dictionary saved next to the fine-tuned model as ``bertkit_task.json``
(labels, columns, window settings and, for SQuAD v2.0, the tuned null threshold);
:func:`adapter_from_state` rebuilds the adapter, so ``bertkit evaluate``/``predict`` need no task flags.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks import features as F
from bertkit.errors import CheckpointError, InputError
from bertkit.io import atomic_write_text

TASK_FILE = "bertkit_task.json"


@dataclass
class Scored:
    """Dev metrics (fractions, or percent for SQuAD as its script reports) and one prediction per
    example (JSON-ready). ``main`` is the metric value used for model selection."""

    metrics: dict[str, Any]
    main: float
    predictions: list[dict[str, Any]]


@dataclass
class TaskAdapter:
    """Base class; subclasses implement the family-specific parts.

    Features are any objects with ``input_ids`` (a list, or for multiple choice a list of
    choices); :meth:`collate` pads a list of them to numpy arrays named as the head's arguments.
    """

    family: str
    name: str
    max_seq_length: int = 128

    head_class = "BertModel"

    def config_overrides(self) -> dict[str, Any]:
        """BertConfig fields the head needs (num_labels, id2label)."""
        return {}

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        raise NotImplementedError

    def encode(self, tokenizer: Any, examples: Sequence[Any], training: bool) -> list[Any]:
        raise NotImplementedError

    def length(self, feature: Any) -> int:
        """Tokens of a feature (for length bucketing)."""
        return len(feature.input_ids)

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        """Per-row results of one eval forward pass (numpy, trimmed to the row's length)."""
        raise NotImplementedError

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        raise NotImplementedError

    def fit_dev(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        """Score dev during training; may tune settings (SQuAD v2.0's null threshold)."""
        return self.score(examples, features, rows)

    def state(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}

    def save(self, directory: str | Path) -> None:
        atomic_write_text(Path(directory) / TASK_FILE, json.dumps(self.state(), indent=2) + "\n")


# ---- classification (glue, classify) -----------------------------------------------------------


@dataclass
class ClassificationAdapter(TaskAdapter):
    """Single-text or pair classification, or regression (``labels == []``).

    glue: ``name`` is the GLUE task; ``metric`` its official metric. classify: ``columns`` names
    the text/pair/label columns of the user's CSV/TSV/JSONL files and ``metric`` is
    "accuracy_f1" for two labels, "accuracy" for more, "pearson_spearman" for regression.
    """

    labels: list[str] = field(default_factory=list)
    metric: str = "accuracy"
    columns: dict[str, str | None] = field(default_factory=dict)
    file_format: str | None = None

    head_class = "BertForSequenceClassification"

    @property
    def regression(self) -> bool:
        return not self.labels

    @property
    def main_metric(self) -> str:
        return {"mcc": "mcc", "accuracy": "accuracy", "accuracy_f1": "f1"}.get(
            self.metric, "spearman"
        )

    def config_overrides(self) -> dict[str, Any]:
        if self.regression:
            return {"num_labels": 1, "problem_type": "regression"}
        return {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels))}

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        if self.family == "glue":
            from bertkit.data.tasks.glue import read_glue, read_glue_split

            p = Path(path)
            return read_glue_split(p, self.name, split) if p.is_dir() else read_glue(p, self.name)
        from bertkit.data.tasks.custom import read_classification

        c = self.columns
        has_label = _has_column(path, c["label"], self.file_format) if c.get("label") else False
        data = read_classification(
            path, text=c["text"], text_pair=c.get("text_pair"), label=c["label"] if has_label else None,
            labels=None if self.regression else self.labels, regression=self.regression,
            format=self.file_format,
        )  # fmt: skip
        return data.examples

    def encode(self, tokenizer: Any, examples: Sequence[Any], training: bool) -> list[Any]:
        return F.encode_classification(tokenizer, examples, self.max_seq_length)

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        batch = F.pad_batch(features, pad_id)
        if "labels" in batch and self.regression:
            batch["labels"] = batch["labels"].astype(np.float32)
        return batch

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        return list(out.logits.float().cpu().numpy())

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        from bertkit.evaluation.classification import glue_metrics

        logits = np.stack(rows)
        preds: list[dict[str, Any]] = []
        if self.regression:
            values = logits[:, 0]
            preds = [{"guid": e.guid, "score": float(v)} for e, v in zip(examples, values)]
        else:
            values = logits.argmax(-1)
            probs = _softmax(logits)
            preds = [
                {
                    "guid": e.guid,
                    "label": self.labels[int(k)],
                    "probabilities": [round(float(x), 6) for x in p],
                }
                for e, k, p in zip(examples, values, probs)
            ]
        gold = [e.label for e in examples]
        if any(g is None for g in gold):
            return Scored({}, float("nan"), preds)
        metrics = glue_metrics(self.metric, np.asarray(gold), values)
        return Scored(metrics, float(metrics[self.main_metric]), preds)


def _has_column(path: str | Path, column: str, fmt: str | None) -> bool:
    """Whether a CSV/TSV header (or the first JSONL record) has ``column``: test files may lack it."""
    from bertkit.data.tasks._rows import csv_rows, jsonl_rows
    from bertkit.data.tasks.custom import detect_format

    kind = detect_format(path, fmt)
    rows = (
        jsonl_rows(path)
        if kind == "jsonl"
        else csv_rows(path, "," if kind == "csv" else "\t", kind == "csv")
    )
    first = next(iter(rows), None)
    return first is not None and column in first[1]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---- token tagging (ner, tag) ------------------------------------------------------------------


@dataclass
class TaggingAdapter(TaskAdapter):
    """Token tagging: label on each word's first piece; long sentences split into windows that
    share ``context`` pieces of neighbouring words (see :func:`bertkit.data.tasks.features.encode_tagged`)."""

    labels: list[str] = field(default_factory=list)
    context: int = 16
    columns: dict[str, Any] = field(default_factory=dict)
    file_format: str | None = None

    head_class = "BertForTokenClassification"
    main_metric = "f1"

    def config_overrides(self) -> dict[str, Any]:
        return {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels))}

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        if self.family == "ner":
            from bertkit.data.tasks.conll import read_conll

            if _single_column(path):  # tokens only (prediction input): no tags to read
                return _read_tokens(path)
            return read_conll(path, tag_column=self.columns.get("tag_column", -1),
                              scheme=self.columns.get("scheme", "auto"))  # fmt: skip
        from bertkit.data.tasks.custom import read_tagging

        return read_tagging(
            path, tokens=self.columns["tokens"], tags=self.columns["tags"], format=self.file_format
        )

    def encode(self, tokenizer: Any, examples: Sequence[Any], training: bool) -> list[Any]:
        context = min(self.context, (self.max_seq_length - 3) // 4)
        if training:
            index = {t: i for i, t in enumerate(self.labels)}
            unknown = sorted({t for s in examples for t in s.tags} - set(index))
            if unknown:
                raise InputError(
                    None, None, f"tags {unknown} are not in the label list {self.labels}"
                )
            return F.encode_tagged(
                tokenizer, examples, index, max_length=self.max_seq_length, context=context
            )
        words = [s.tokens for s in examples]
        return F.encode_tagged(
            tokenizer, words, None, max_length=self.max_seq_length, context=context
        )

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        batch = F.pad_token_windows(features, pad_id)
        if not training:
            batch.pop("labels")
        return batch

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        ids = out.logits.argmax(-1).cpu().numpy()
        lengths = batch["attention_mask"].sum(1)
        return [row[:n] for row, n in zip(ids, lengths)]

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        from bertkit.evaluation.ner import entity_scores

        word_ids = F.word_predictions(features, rows, [len(s.tokens) for s in examples])
        tags = [[self.labels[i] for i in ws] for ws in word_ids]
        preds = [{"tokens": list(s.tokens), "tags": t} for s, t in zip(examples, tags)]
        if not all(s.tags for s in examples):
            return Scored({}, float("nan"), preds)
        scores = entity_scores([list(s.tags) for s in examples], tags).to_dict()
        return Scored(scores, float(scores["f1"]), preds)


def _single_column(path: str | Path) -> bool:
    """Whether the first token line of a CoNLL-style file has one column (tokens, no tags)."""
    from bertkit.io import read_text_lines

    for _, line in read_text_lines(path):
        cols = line.split()
        if cols and cols[0] != "-DOCSTART-":
            return len(cols) == 1
    return False


def _read_tokens(path: str | Path) -> list[Any]:
    """Sentences of a one-token-per-line file (blank line between sentences), with no tags."""
    from bertkit.data.tasks.conll import TaggedSentence
    from bertkit.io import read_text_lines

    out, tokens, first = [], [], 0
    for lineno, line in [*read_text_lines(path), (0, "")]:
        cols = line.split()
        if cols and cols[0] != "-DOCSTART-":
            if len(cols) != 1:
                raise InputError(
                    path,
                    lineno,
                    f"expected one token per line (like the file's first), got {len(cols)} columns",
                )
            first = first or lineno
            tokens.append(cols[0])
        elif tokens:
            out.append(TaggedSentence(tuple(tokens), (), first))
            tokens, first = [], 0
    return out


def tag_label_list(sentences: Sequence[Any]) -> list[str]:
    """``O`` first, then the other tags sorted by type and prefix (B before I)."""
    tags = {t for s in sentences for t in s.tags} - {"O"}
    return ["O", *sorted(tags, key=lambda t: (t.partition("-")[2], t))]


# ---- multiple choice (swag) --------------------------------------------------------------------


@dataclass
class MultipleChoiceAdapter(TaskAdapter):
    """SWAG-format multiple choice: each ending scored as ``[CLS] context [SEP] start ending [SEP]``."""

    head_class = "BertForMultipleChoice"
    main_metric = "accuracy"

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        from bertkit.data.tasks.swag import read_swag

        return read_swag(path)

    def encode(self, tokenizer: Any, examples: Sequence[Any], training: bool) -> list[Any]:
        return F.encode_multiple_choice(tokenizer, examples, self.max_seq_length)

    def length(self, feature: Any) -> int:
        return max(len(c.input_ids) for c in feature) * len(feature)

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        return F.pad_multiple_choice(features, pad_id)

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        return list(out.logits.float().cpu().numpy())

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        from bertkit.evaluation.classification import accuracy

        logits = np.stack(rows)
        choice = logits.argmax(-1)
        probs = _softmax(logits)
        preds = [
            {"guid": e.guid, "label": int(k), "probabilities": [round(float(x), 6) for x in p]}
            for e, k, p in zip(examples, choice, probs)
        ]
        if any(e.label is None for e in examples):
            return Scored({}, float("nan"), preds)
        acc = accuracy([e.label for e in examples], choice)
        return Scored({"accuracy": acc}, acc, preds)


# ---- extractive QA (squad) ---------------------------------------------------------------------


@dataclass
class SquadAdapter(TaskAdapter):
    """SQuAD v1.1/v2.0: sliding windows, n-best span search and, for v2.0, a null threshold.

    ``null_threshold`` is tuned on dev by :meth:`fit_dev` (the value that maximises dev F1) and
    saved with the model; :meth:`score` uses the saved value (evaluate, predict).
    """

    version_2: bool = False
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    null_threshold: float = 0.0

    head_class = "BertForQuestionAnswering"
    main_metric = "f1"

    def _feature_config(self) -> Any:
        from bertkit.data.tasks.squad_features import SquadFeatureConfig

        return SquadFeatureConfig(self.max_seq_length, self.doc_stride, self.max_query_length)

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        from bertkit.data.tasks.squad import read_squad

        return read_squad(path)

    def encode(self, tokenizer: Any, examples: Sequence[Any], training: bool) -> list[Any]:
        from bertkit.data.tasks.squad_features import convert_squad_examples

        return convert_squad_examples(
            tokenizer, examples, self._feature_config(), is_training=training
        )

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        batch = F.pad_batch(
            [F.EncodedInput(f.input_ids, f.token_type_ids, f.attention_mask) for f in features],
            pad_id,
        )
        if training:
            batch["start_positions"] = np.asarray(
                [f.start_position for f in features], dtype=np.int64
            )
            batch["end_positions"] = np.asarray([f.end_position for f in features], dtype=np.int64)
        return batch

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        s, e = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
        lengths = batch["attention_mask"].sum(1)
        return [(a[:n], b[:n]) for a, b, n in zip(s, e, lengths)]

    def _search(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> dict[str, Any]:
        from bertkit.data.tasks.squad_post import SquadPostConfig, postprocess_squad

        post = SquadPostConfig(self.n_best_size, self.max_answer_length)
        return postprocess_squad(
            examples, features, [r[0] for r in rows], [r[1] for r in rows], post
        )

    def _scored(self, examples: Sequence[Any], found: dict[str, Any], threshold: float) -> Scored:
        from bertkit.data.tasks.squad import load_gold
        from bertkit.data.tasks.squad_post import final_answers
        from bertkit.evaluation.squad import squad_scores

        answers = final_answers(found, self.version_2, threshold)
        preds = [
            {"id": q, "answer": a, "null_score_diff": _finite(found[q].null_score_diff)}
            for q, a in answers.items()
        ]
        has_gold = all(e.answers or e.is_impossible for e in examples)
        if not has_gold:
            return Scored({}, float("nan"), preds)
        scores = squad_scores(
            load_gold(list(examples)), answers, "2.0" if self.version_2 else "1.1"
        )
        if self.version_2:
            scores["null_threshold"] = threshold
        return Scored(scores, float(scores["f1"]), preds)

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        return self._scored(examples, self._search(examples, features, rows), self.null_threshold)

    def fit_dev(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        """v2.0: tune the null threshold on these examples, then score with it.

        The tuned value is returned in ``metrics["null_threshold"]``; the loop copies it into
        the adapter it saves with the best checkpoint (this adapter is left unchanged).
        """
        found = self._search(examples, features, rows)
        if not self.version_2:
            return self._scored(examples, found, self.null_threshold)
        from bertkit.data.tasks.squad import load_gold
        from bertkit.data.tasks.squad_post import find_best_null_threshold

        best = find_best_null_threshold(found, load_gold(list(examples)))
        return self._scored(examples, found, best.threshold)

    def with_tuned(self, metrics: dict[str, Any]) -> SquadAdapter:
        """A copy holding the threshold found by :meth:`fit_dev`."""
        return replace(
            self, null_threshold=float(metrics.get("null_threshold", self.null_threshold))
        )


def _finite(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)


# ---- state ---------------------------------------------------------------------------------------

_ADAPTERS: dict[str, type[TaskAdapter]] = {
    "glue": ClassificationAdapter,
    "classify": ClassificationAdapter,
    "ner": TaggingAdapter,
    "tag": TaggingAdapter,
    "swag": MultipleChoiceAdapter,
    "squad": SquadAdapter,
}


def adapter_from_state(state: dict[str, Any]) -> TaskAdapter:
    """Rebuild an adapter from :meth:`TaskAdapter.state` output."""
    family = state.get("family")
    if family not in _ADAPTERS:
        raise CheckpointError(
            f"unknown task family {family!r} in {TASK_FILE}; expected one of {sorted(_ADAPTERS)}"
        )
    return _ADAPTERS[family](**state)


def load_adapter(directory: str | Path) -> TaskAdapter:
    """The adapter saved with a fine-tuned model by ``bertkit finetune``."""
    path = Path(directory) / TASK_FILE
    if not path.is_file():
        raise CheckpointError(
            f"{directory}: no {TASK_FILE} (is this a model written by `bertkit finetune`?)"
        )
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e
    return adapter_from_state(state)
