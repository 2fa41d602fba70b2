"""Multiple choice (swag): each ending scored as ``[CLS] context [SEP] start ending [SEP]``.

Head: ``BertForMultipleChoice`` (one score per choice, softmax over the choices); metric:
accuracy. Reading: SWAG-format CSV.

Long inputs are truncated, not windowed: a window holding the context without the ending (or
the ending without the context) says nothing about the choice. The inputs cut are counted
(:meth:`MultipleChoiceAdapter.window_counts`), so the summary line says how many.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks.swag import iter_swag, read_swag
from bertkit.evaluation.classification import accuracy
from bertkit.tasks import features as F
from bertkit.tasks.base import Scored, TaskAdapter, softmax, unscored
from bertkit.tasks.windows import WindowCounts
from bertkit.tokenizer.protocol import Tokenizer


@dataclass
class MultipleChoiceAdapter(TaskAdapter):
    """SWAG-format multiple choice."""

    head_class = "BertForMultipleChoice"
    main_metric = "accuracy"

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        return read_swag(path)

    def iter_read(self, path: str | Path, split: str = "dev") -> Iterator[Any]:
        """The rows of a SWAG-format CSV, each parsed as it is pulled."""
        return iter_swag(path)

    def encode(self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool) -> list[Any]:
        return F.encode_multiple_choice(tokenizer, examples, self.max_seq_length)

    def window_counts(self, examples: Sequence[Any], features: Sequence[Any]) -> WindowCounts:
        """One row per example (never windowed); an example is cut when any choice was."""
        cut = [i for i, f in enumerate(features) if any(c.truncated for c in f)]
        return WindowCounts.of(list(range(len(features))), cut, len(examples))

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
        logits = np.stack(rows)
        choice = logits.argmax(-1)
        preds = [
            {"guid": e.guid, "label": int(k), "probabilities": [round(float(x), 6) for x in p]}
            for e, k, p in zip(examples, choice, softmax(logits))
        ]
        if any(e.label is None for e in examples):
            return unscored(preds)
        acc = accuracy([e.label for e in examples], choice)
        return Scored({"accuracy": acc}, acc, preds)
