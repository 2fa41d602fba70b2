"""Token tagging (ner, tag): one label per word, scored by entity F1 (conlleval rules).

Head: ``BertForTokenClassification``. The label goes on each word's first piece; a sentence longer
than one window is split into overlapping windows (:func:`bertkit.tasks.features.encode_tagged`,
SQuAD's rule), and each word's prediction is read from the window where it has the most context.

Document context (``document_context``, the paper's "maximal document context provided by the
data"): the sentences of each document (``-DOCSTART-`` in CoNLL files) are joined into one word
sequence, windowed, and the predictions are split back into the original sentences, which are
scored as usual (an entity never crosses a sentence boundary).

Reading: CoNLL column files (ner; a one-column file of tokens is prediction input) or the
user's CSV/TSV/JSONL with token and tag lists (tag), a sentence at a time (:meth:`iter_read`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks.conll import (
    TaggedSentence,
    count_sentences,
    is_token_only,
    iter_conll,
    iter_tokens,
)
from bertkit.data.tasks.custom import iter_tagging
from bertkit.errors import InputError
from bertkit.evaluation.ner import entity_scores
from bertkit.tasks import features as F
from bertkit.tasks.base import Scored, TaskAdapter, unscored
from bertkit.tasks.windows import WindowConfig, WindowCounts
from bertkit.tokenizer.protocol import Tokenizer


def documents(sentences: Sequence[TaggedSentence]) -> list[list[int]]:
    """Indices of the sentences of each document: runs of consecutive sentences with the same
    ``document`` number. Example: documents 0, 0, 1, 1, 1 -> [[0, 1], [2, 3, 4]]."""
    groups: list[list[int]] = []
    for i, s in enumerate(sentences):
        if groups and sentences[groups[-1][0]].document == s.document:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def join_sentences(sentences: Sequence[TaggedSentence], index: Sequence[int]) -> TaggedSentence:
    """One sentence of the words (and tags) of ``sentences[i]`` for ``i`` in ``index``."""
    parts = [sentences[i] for i in index]
    return TaggedSentence(
        tuple(w for p in parts for w in p.tokens),
        tuple(t for p in parts for t in p.tags),
        parts[0].line,
        parts[0].document,
    )


def tag_label_list(sentences: Sequence[TaggedSentence]) -> list[str]:
    """``O`` first, then the other tags sorted by type and prefix (B before I)."""
    tags = {t for s in sentences for t in s.tags} - {"O"}
    return ["O", *sorted(tags, key=lambda t: (t.partition("-")[2], t))]


def _per_sentence(examples: Sequence[Any], units: list[list[int]], per_unit: Sequence[Any]) -> list:
    """Per-word values of each unit (sentence or document) cut back into its sentences."""
    out = []
    for unit, values in zip(units, per_unit):
        start = 0
        for i in unit:
            n = len(examples[i].tokens)
            out.append(values[start : start + n])
            start += n
    return out


def token_logits(out: Any, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
    """(tokens, K) float32 logits of each row of a tagging batch, padding cut off (the
    ``outputs`` of :func:`bertkit.inference.runner.predict_rows` for :meth:`word_logits`)."""
    logits = out.logits.float().cpu().numpy()
    return [row[:n] for row, n in zip(logits, batch["attention_mask"].sum(1))]


@dataclass
class TaggingAdapter(TaskAdapter):
    """Token tagging; ``columns`` holds the reader settings (ner: ``tag_column``, ``scheme``;
    tag: the ``tokens`` and ``tags`` field names)."""

    labels: list[str] = field(default_factory=list)
    columns: dict[str, Any] = field(default_factory=dict)
    file_format: str | None = None
    windows: WindowConfig = field(default_factory=WindowConfig)
    document_context: bool = False

    head_class = "BertForTokenClassification"
    main_metric = "f1"

    def __post_init__(self) -> None:
        self.windows = WindowConfig.of(self.windows)  # a dict from bertkit_task.json

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TaggingAdapter:
        """Models saved before windows followed SQuAD's rule hold ``context`` (now unused)."""
        return cls(**{k: v for k, v in state.items() if k != "context"})

    def units(self, examples: Sequence[Any]) -> list[list[int]]:
        """The sentence indices encoded together: one sentence each, or each document's."""
        if self.document_context:
            return documents(examples)
        return [[i] for i in range(len(examples))]

    def config_overrides(self) -> dict[str, Any]:
        return {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels))}

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        return list(self.iter_read(path, split))

    def iter_read(self, path: str | Path, split: str = "dev") -> Iterator[Any]:
        """The sentences of a CoNLL file (ner; a one-column file is tokens with no tags) or of
        the user's CSV/TSV/JSONL (tag), each parsed as it is pulled."""
        if self.family == "ner":
            if is_token_only(path):  # tokens only (prediction input): no tags to read
                return iter_tokens(path)
            return iter_conll(
                path,
                tag_column=self.columns.get("tag_column", -1),
                scheme=self.columns.get("scheme", "auto"),
            )
        return iter_tagging(
            path, tokens=self.columns["tokens"], tags=self.columns["tags"], format=self.file_format
        )

    def count_examples(self, path: str | Path) -> int | None:
        """Sentences of a CoNLL file (blank-line blocks), lines of the user's formats."""
        return count_sentences(path) if self.family == "ner" else super().count_examples(path)

    def missing_label(self, example: Any) -> str | None:
        """A sentence without tags (a tokens-only CoNLL file, prediction input) lacks them."""
        return None if example.tags else "tags"

    def fit_labels(self, train: Sequence[Any]) -> None:
        self.labels = tag_label_list(train)

    def unseen_labels(self, train: Sequence[Any], dev: Sequence[Any]) -> list[str]:
        seen = {t for s in train for t in s.tags}
        return sorted({t for s in dev for t in s.tags} - seen)

    def encode(self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool) -> list[Any]:
        joined = [join_sentences(examples, u) for u in self.units(examples)]
        if training:
            index = {t: i for i, t in enumerate(self.labels)}
            unknown = sorted({t for s in examples for t in s.tags} - set(index))
            if unknown:
                raise InputError(
                    None, None, f"tags {unknown} are not in the label list {self.labels}"
                )
            return F.encode_tagged(
                tokenizer, joined, index, max_length=self.max_seq_length, windows=self.windows
            )
        words = [s.tokens for s in joined]
        return F.encode_tagged(
            tokenizer, words, None, max_length=self.max_seq_length, windows=self.windows
        )

    def window_counts(self, examples: Sequence[Any], features: Sequence[Any]) -> WindowCounts:
        owners = [f.example_index for f in features]
        cut = [f.example_index for f in features if f.truncated]
        return WindowCounts.of(owners, cut, len(self.units(examples)))

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

    def word_logits(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        """(words, K) float32 per sentence of ``examples``: each word's logits read where
        :meth:`score` reads its prediction (its first piece, in the window where that piece has
        the most context); NaN rows for the words no window holds (cut by truncation).
        ``rows``: per-token logits of each feature (:func:`token_logits`), e.g. a distillation
        teacher's (:mod:`bertkit.training.distill_tokens`)."""
        units = self.units(examples)
        k = len(self.labels)
        per_unit = [
            np.full((sum(len(examples[i].tokens) for i in u), k), np.nan, np.float32) for u in units
        ]
        for win, logits in zip(features, rows):
            for pos, w in win.label_positions():  # the rule of F.word_predictions
                per_unit[win.example_index][w] = logits[pos]
        return _per_sentence(examples, units, per_unit)

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        units = self.units(examples)
        lengths = [sum(len(examples[i].tokens) for i in u) for u in units]
        # a word cut by --truncate is predicted O (label 0): that is what truncation costs
        per_unit = F.word_predictions(
            features, rows, lengths, fill=0 if self.windows.truncate else None
        )
        tags = [[self.labels[i] for i in ws] for ws in _per_sentence(examples, units, per_unit)]
        preds = [{"tokens": list(s.tokens), "tags": t} for s, t in zip(examples, tags)]
        if not all(s.tags for s in examples):
            return unscored(preds)
        scores = entity_scores([list(s.tags) for s in examples], tags).to_dict()
        return Scored(scores, float(scores["f1"]), preds)
