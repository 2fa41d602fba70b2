"""Token tagging (ner, tag): one label per word, scored by entity F1 (conlleval rules).

Head: ``BertForTokenClassification``. The label goes on each word's first piece; a sentence longer
than one window is split into windows that share ``context`` pieces of the neighbouring words
(:func:`bertkit.tasks.features.encode_tagged`), and one prediction per word is read back.

Reading: CoNLL column files (ner; a one-column file of tokens is prediction input) or the
user's CSV/TSV/JSONL with token and tag lists (tag).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks.conll import TaggedSentence, is_token_only, read_conll, read_tokens
from bertkit.data.tasks.custom import read_tagging
from bertkit.errors import InputError
from bertkit.evaluation.ner import entity_scores
from bertkit.tasks import features as F
from bertkit.tasks.base import Scored, TaskAdapter, unscored
from bertkit.tokenizer.protocol import Tokenizer


def tag_label_list(sentences: Sequence[TaggedSentence]) -> list[str]:
    """``O`` first, then the other tags sorted by type and prefix (B before I)."""
    tags = {t for s in sentences for t in s.tags} - {"O"}
    return ["O", *sorted(tags, key=lambda t: (t.partition("-")[2], t))]


@dataclass
class TaggingAdapter(TaskAdapter):
    """Token tagging; ``columns`` holds the reader settings (ner: ``tag_column``, ``scheme``;
    tag: the ``tokens`` and ``tags`` field names)."""

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
            if is_token_only(path):  # tokens only (prediction input): no tags to read
                return read_tokens(path)
            return read_conll(path, tag_column=self.columns.get("tag_column", -1),
                              scheme=self.columns.get("scheme", "auto"))  # fmt: skip
        return read_tagging(
            path, tokens=self.columns["tokens"], tags=self.columns["tags"], format=self.file_format
        )

    def fit_labels(self, train: Sequence[Any]) -> None:
        self.labels = tag_label_list(train)

    def encode(self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool) -> list[Any]:
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
        word_ids = F.word_predictions(features, rows, [len(s.tokens) for s in examples])
        tags = [[self.labels[i] for i in ws] for ws in word_ids]
        preds = [{"tokens": list(s.tokens), "tags": t} for s, t in zip(examples, tags)]
        if not all(s.tags for s in examples):
            return unscored(preds)
        scores = entity_scores([list(s.tags) for s in examples], tags).to_dict()
        return Scored(scores, float(scores["f1"]), preds)
