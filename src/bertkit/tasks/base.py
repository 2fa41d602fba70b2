"""The task protocol: what every fine-tuning family provides, and the scored result it returns.

A task adapter joins the file readers of :mod:`bertkit.data.tasks` with the feature code of this
package and the metrics of :mod:`bertkit.evaluation` for one family:

``read(path, split)`` -> examples, ``encode(tokenizer, examples, training)`` -> features,
``collate(features, pad_id, training)`` -> numpy arrays named as the head's arguments,
``outputs(model_output, batch)`` -> one row per feature, ``score(examples, features, rows)`` ->
:class:`Scored` (metrics when the examples carry gold labels, and one JSON prediction each).

Training and dev files are read by the same ``read``; ``fit_labels(train)`` takes the label set
from the training examples. ``state()`` is the JSON saved beside a fine-tuned model as
``bertkit_task.json``, so ``bertkit evaluate`` / ``predict`` / ``serve`` need no task flags.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bertkit.errors import InputError
from bertkit.io import atomic_write_text
from bertkit.tasks.features import EncodedInput
from bertkit.tasks.windows import DEFAULT_MAX_SEQ_LENGTH, WindowCounts
from bertkit.tokenizer.protocol import Tokenizer

TASK_FILE = "bertkit_task.json"
TASK_FORMAT = 1
"""The layout of bertkit_task.json (its ``format`` key)."""


def examples_bytes(examples: Sequence[Any]) -> bytes:
    """The canonical bytes of task examples: one sorted-key JSON object per example (a
    dataclass's fields; numpy values as their lists and numbers), the text a streamed prediction
    run hashes per shard and a fine-tuning job given its examples in memory is known by."""

    def plain(x: Any) -> Any:
        if isinstance(x, np.ndarray | np.generic):
            return x.tolist()
        raise TypeError(f"a task example holds a {type(x).__name__}, which has no JSON form")

    return b"".join(
        json.dumps(
            asdict(e) if is_dataclass(e) and not isinstance(e, type) else e,
            sort_keys=True,
            ensure_ascii=False,
            default=plain,
        ).encode()
        + b"\n"
        for e in examples
    )


@dataclass
class Scored:
    """Dev metrics (fractions, or percent for SQuAD as its script reports) and one prediction per
    example (JSON-ready). ``main`` is the metric value used for model selection (NaN unscored)."""

    metrics: dict[str, Any]
    main: float
    predictions: list[dict[str, Any]]
    windows: WindowCounts | None = None
    """How the inputs were read (windowed, truncated); set by the caller that encoded them."""


@dataclass
class TaskAdapter:
    """Base class of the task families; subclasses implement the family-specific parts.

    Features are any objects with ``input_ids`` (a list, or for multiple choice a list of
    choices); :meth:`collate` pads a list of them to numpy arrays named as the head's arguments.
    """

    family: str
    name: str
    max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH

    head_class: ClassVar[str] = "BertModel"
    main_metric: ClassVar[str] = ""
    in_batch_negatives: ClassVar[bool] = False
    """Whether the training loss scores each example against the others of its batch, so that
    a batch cut into accumulation micro-batches trains another loss (fine-tuning refuses it);
    a family with several losses answers per loss in :meth:`couples_batch`."""
    loss_over_padding: ClassVar[bool] = False
    """Whether the training loss normalises over padding positions too (span QA's softmax runs
    over all T positions), so that the micro-batches and rank shares of an update are padded to
    the update's longest feature to keep the whole batch's loss."""

    @classmethod
    def couples_batch(cls, loss: str | None = None) -> bool:
        """Whether training with ``loss`` (None: the family's only one) couples the examples
        of a batch (:attr:`in_batch_negatives`)."""
        return cls.in_batch_negatives

    def config_overrides(self) -> dict[str, Any]:
        """BertConfig fields the head needs (num_labels, id2label)."""
        return {}

    def dev_splits(self) -> tuple[str, ...]:
        """Names of the dev sets read from a task folder (MNLI has two)."""
        return ("dev",)

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        raise NotImplementedError

    def iter_read(self, path: str | Path, split: str = "dev") -> Iterator[Any]:
        """The examples of :meth:`read` as an iterator, read when the first is pulled (so that
        a caller can refuse the task before a large file is read); families whose files can be
        parsed a record at a time override it to stream (a corpus-scale ``predict``)."""
        yield from self.read(path, split)

    def count_examples(self, path: str | Path) -> int | None:
        """About how many examples :meth:`iter_read` will yield from ``path``, from one pass over
        its bytes (a progress bar's total; None where unknown): its lines but the header
        (:meth:`header_lines`), for the formats of one example a line."""
        from bertkit.io import count_lines

        lines = count_lines(path)  # None for a folder, a FIFO or a compressed file
        return None if lines is None else max(lines - self.header_lines(path), 0)

    def header_lines(self, path: str | Path) -> int:
        """Lines of ``path`` before its first example: 1 for a CSV or TSV file (its header names
        the columns), 0 for JSONL and the formats without one."""
        from bertkit.io import format_suffix

        fmt = getattr(self, "file_format", None) or format_suffix(path).lstrip(".")
        return int(fmt.lower() in ("csv", "tsv"))

    def missing_label(self, example: Any) -> str | None:
        """What ``example`` lacks to be trained on or scored ("a label"), None when it has it.

        The base rule: a ``label`` of None is missing (a classification or multiple-choice row
        without a label column); examples with no ``label`` field (SQuAD's, with answers, and
        the retrieval families') carry theirs in other fields, checked by their readers."""
        return "a label" if getattr(example, "label", 0) is None else None

    def require_labelled(self, path: str | Path, split: str, examples: list[Any]) -> list[Any]:
        """``examples`` (the ``split`` read from ``path``), refused with an InputError naming the
        file, and the line of the first example that lacks its label (:meth:`missing_label`),
        when there are none or one cannot be learned from or scored."""
        if not examples:
            raise InputError(path, None, f"no examples (expected labelled {split} data)")
        for e in examples:
            if (what := self.missing_label(e)) is not None:
                raise InputError(
                    path,
                    getattr(e, "line", 0) or None,
                    f"expected labelled {split} data, got an example without {what}",
                )
        return examples

    def fit_labels(self, train: Sequence[Any]) -> None:
        """Take the label list from the training examples (families whose labels come from data)."""

    def unseen_labels(self, train: Sequence[Any], dev: Sequence[Any]) -> list[str]:
        """Gold labels of ``dev`` that no ``train`` example holds: the model never learns to
        predict them, so each is a miss in the dev score (families that can say; else none)."""
        return []

    def encode(self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool) -> list[Any]:
        raise NotImplementedError

    def length(self, feature: Any) -> int:
        """Tokens of a feature (for length bucketing)."""
        return len(feature.input_ids)

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def window_counts(self, examples: Sequence[Any], features: Sequence[Any]) -> WindowCounts:
        """How many inputs were windowed, into how many windows, and how many were cut (features
        carry ``example_index`` and, where inputs can be cut, ``truncated``)."""
        owners = [f.example_index for f in features]
        cut = [f.example_index for f in features if getattr(f, "truncated", False)]
        return WindowCounts.of(owners, cut, len(examples))

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

    def with_tuned(self, metrics: dict[str, Any]) -> TaskAdapter:
        """The adapter to save with a model selected on ``metrics`` (a copy holding any setting
        :meth:`fit_dev` tuned; the base class has none)."""
        return self

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TaskAdapter:
        """Rebuild from :meth:`state` (less its ``format`` key); families with older layouts to
        read override it."""
        return cls(**state)

    def state(self) -> dict[str, Any]:
        return {
            "format": TASK_FORMAT,
            **{k: v for k, v in asdict(self).items() if not k.startswith("_")},
        }

    def save(self, directory: str | Path) -> None:
        atomic_write_text(Path(directory) / TASK_FILE, json.dumps(self.state(), indent=2) + "\n")


@dataclass(frozen=True)
class GroupFeature:
    """One training example's rows, kept together in a batch: query, positive, then the hard
    negatives (a bi-encoder's texts; a cross-encoder's (query, passage) pairs,
    :class:`bertkit.tasks.rerank.RerankAdapter`)."""

    rows: tuple[EncodedInput, ...]
    example_index: int
    truncated: bool
    scores: tuple[float, ...] = ()
    """The teacher's scores of the positive and each negative (:data:`bertkit.tasks.embedding.TEACHER_LOSSES`)."""

    @property
    def length(self) -> int:
        """Tokens of the longest row (for length bucketing)."""
        return max(len(r.input_ids) for r in self.rows)


class GroupedAdapter(TaskAdapter):
    """An adapter whose training features are :class:`GroupFeature` s and whose dev features
    are single rows: a bi-encoder's (:class:`bertkit.tasks.embedding.EmbeddingAdapter`) and a
    cross-encoder's (:class:`bertkit.tasks.rerank.RerankAdapter`)."""

    def length(self, feature: Any) -> int:
        """Tokens for length bucketing: a group's longest row, else the row's own."""
        if isinstance(feature, GroupFeature):
            return feature.length
        return len(feature.input_ids)


def softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise softmax of logits (numerically stable)."""
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def unscored(predictions: list[dict[str, Any]]) -> Scored:
    """The result for examples without gold labels: predictions only."""
    return Scored({}, float("nan"), predictions)
