"""Cross-encoder rerankers (family ``rerank``): one relevance logit per (query, passage) pair.

Head: ``BertForSequenceClassification`` with one output; scores are ``sigmoid(logit)``. Pairs
are cut longest-first to ``max_seq_length``. The training loss (``loss``, :data:`LOSSES`):

- ``bce`` (default): binary cross-entropy on labels in [0, 1] (``problem_type``
  ``multi_label_classification``, which is what sentence-transformers' ``CrossEncoder`` trains
  with ``num_labels=1``, its ``BinaryCrossEntropyLoss``). Data: labelled pairs, or triples
  expanded to (query, positive, 1) and (query, negative, 0)
  (:func:`bertkit.data.tasks.retrieval.read_labelled_pairs`).
- ``ranking`` and ``listnet``: listwise losses over groups, each a query with its positive and
  its N hard negatives (:mod:`bertkit.model.group_losses`: ``MultipleNegativesRankingLoss``
  without in-batch negatives, ``ListNetLoss`` with labels 1, 0, ..., 0). Data: a triples or
  n-tuple file (:func:`bertkit.data.tasks.retrieval.read_pairs`: every record with the same N >=
  1); each group's G = 1 + N pairs are one :class:`~bertkit.tasks.embedding.GroupFeature` and
  stay together in a batch. A labelled-pairs file is refused (it has no groups).

Dev: the pairs of each query are ranked by their logit; metrics are MRR@10 (selection), NDCG@10
and Recall@1 over the queries with a positive (label >= 0.5), and the accuracy of
``sigmoid(logit) >= 0.5`` against ``label >= 0.5``.

The saved folder's config.json names the activation (Sigmoid for every loss, as
sentence-transformers keeps its ``num_labels=1`` default whatever the loss: the ranking losses
only order a query's candidates, so their sigmoid is a monotone score, not a calibrated
probability) (``sentence_transformers.activation_fn``,
and the older ``sbert_ce_default_activation_function``): so ``CrossEncoder(folder)``,
text-embeddings-inference and ``bertkit serve``'s ``/rerank`` score with the same sigmoid.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bertkit import __version__
from bertkit.data.tasks import custom
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.data.tasks.retrieval import (
    LabelledPair,
    TrainingPair,
    read_labelled_pairs,
    read_pairs,
)
from bertkit.errors import ConfigError, InputError
from bertkit.evaluation.retrieval import rerank_order, retrieval_metrics
from bertkit.io import atomic_write_text
from bertkit.tasks.base import Scored, TaskAdapter
from bertkit.tasks.embedding import GroupFeature
from bertkit.tasks.features import EncodedInput, encode_classification, pad_batch
from bertkit.tasks.windows import WindowConfig
from bertkit.tokenizer.protocol import Tokenizer

SIGMOID = "torch.nn.modules.activation.Sigmoid"
LOSSES = ("bce", "ranking", "listnet")
"""The rerank losses: bce, then :data:`bertkit.model.group_losses.GROUP_LOSSES` (named here
without torch; a test keeps them equal)."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class RerankAdapter(TaskAdapter):
    """A one-output pair scorer (see the module docstring)."""

    file_format: str | None = None
    loss: str = "bce"

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")

    @property
    def group_loss(self) -> str | None:
        """The listwise loss the head trains with over groups (None: bce, pair by pair)."""
        return None if self.loss == "bce" else self.loss

    head_class = "BertForSequenceClassification"
    main_metric = "MRR@10"

    def config_overrides(self) -> dict[str, Any]:
        return {
            "num_labels": 1,
            "problem_type": "multi_label_classification",
            "id2label": {0: "LABEL_0"},
            "label2id": {"LABEL_0": 0},
        }

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        if split == "train" and self.group_loss:
            return self._read_groups(path)
        return read_labelled_pairs(path, self.file_format)

    def _read_groups(self, path: str | Path) -> list[TrainingPair]:
        """The (query, positive, negatives) groups of a triples or n-tuple file; a labelled-pairs
        file, or one without negatives, is an InputError naming the layout expected."""
        expected = (
            f"--loss {self.loss} trains on groups: a triples or n-tuple file, each record a "
            "query, its positive and the same number (at least 1) of hard negatives (query, "
            "positive, negative or negative_1, negative_2 ...; in JSONL a negatives list), "
            "which `bertkit mine` writes; labelled pairs train with --loss bce"
        )
        have = custom.first_record_fields(path, self.file_format)
        if "label" in have or "score" in have:
            label = "label" if "label" in have else "score"
            raise InputError(
                path, 1, f"labelled pairs (a {label} field) have no groups; {expected}"
            )
        groups = read_pairs(path, self.file_format)
        if not groups[0].negatives:
            raise InputError(path, 1, f"no negatives; {expected}")
        return groups

    def require_labelled(
        self, path: str | Path, split: str, examples: list[Any]
    ) -> list[LabelledPair]:
        """Also refused: training pairs that all have the same label (nothing to learn), or a
        dev set where no query has both a relevant (label >= 0.5) and an irrelevant pair (every
        query's positive would rank first: MRR@10 1 for any model). A (query, positive) pairs
        file without negatives reads as relevant pairs only, so it is refused for both."""
        examples = super().require_labelled(path, split, examples)
        if split == "train" and self.group_loss:
            return examples  # groups: read_pairs checked each has a positive and negatives
        if split == "train":
            labels = {e.label for e in examples}
            if len(labels) > 1:
                return examples
            what = f"every pair has label {labels.pop():g}: nothing to learn"
        else:
            by_query: dict[int, set[bool]] = {}
            for e in examples:
                by_query.setdefault(e.group, set()).add(e.label >= 0.5)
            if any(len(kinds) == 2 for kinds in by_query.values()):
                return examples
            what = "no query has both a relevant (label >= 0.5) and an irrelevant pair to rank"
        raise InputError(
            path,
            None,
            f"{what} (a pairs file without negatives reads as all relevant); "
            "expected labelled pairs with both labels, or triples with negatives "
            "(`bertkit mine` writes them)",
        )

    def encode(self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool) -> list[Any]:
        if not (training and self.group_loss):
            return self._encode_pairs(
                tokenizer, [(e.query, e.passage, float(e.label)) for e in examples]
            )
        out = []
        for i, e in enumerate(examples):
            assert isinstance(e, TrainingPair)
            pairs = [(e.query, e.positive, 1.0)] + [(e.query, n, 0.0) for n in e.negatives]
            rows = tuple(replace(f, example_index=i) for f in self._encode_pairs(tokenizer, pairs))
            out.append(GroupFeature(rows, i, any(r.truncated for r in rows)))
        return out

    def _encode_pairs(
        self, tokenizer: Tokenizer, pairs: Sequence[tuple[str, str, float]]
    ) -> list[EncodedInput]:
        """(query, passage, label) pairs, each cut longest-first to ``max_seq_length``."""
        examples = [ClassificationExample(str(i), *p) for i, p in enumerate(pairs)]
        return encode_classification(
            tokenizer, examples, self.max_seq_length, WindowConfig(truncate=True)
        )

    def length(self, feature: Any) -> int:
        if isinstance(feature, GroupFeature):
            return feature.length
        return len(feature.input_ids)

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        """Pairs, or groups: their B * G rows group after group, ``labels`` (B, G) (each row's
        label: 1 for the positive, 0 for the negatives) for the head's group loss."""
        grouped = bool(features) and isinstance(features[0], GroupFeature)
        rows = [r for f in features for r in f.rows] if grouped else features
        batch = pad_batch(rows, pad_id)
        if "labels" in batch:
            shape = (len(features), -1) if grouped else (-1, 1)
            batch["labels"] = batch["labels"].astype(np.float32).reshape(shape)
        return batch

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        return [float(x) for x in out.logits.float().cpu().numpy()[:, 0]]

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        logits = np.asarray(rows, dtype=np.float64)
        groups: dict[int, list[int]] = {}
        for i, e in enumerate(examples):
            groups.setdefault(e.group, []).append(i)
        rankings, qrels = {}, {}
        for g, members in groups.items():
            order = rerank_order([logits[i] for i in members])
            rankings[str(g)] = [str(members[k]) for k in order]
            qrels[str(g)] = {str(i): int(examples[i].label >= 0.5) for i in members}
        metrics: dict[str, Any] = {}
        if any(any(v.values()) for v in qrels.values()):
            metrics = retrieval_metrics(rankings, qrels, (1,))
            metrics = {k: metrics[k] for k in ("MRR@10", "NDCG@10", "Recall@1", "queries")}
        gold = np.asarray([e.label >= 0.5 for e in examples])
        metrics["accuracy"] = float(np.mean((logits >= 0) == gold))
        preds = [
            {"query": e.query, "score": round(float(sigmoid(x)), 6), "logit": float(x)}
            for e, x in zip(examples, logits, strict=True)
        ]
        return Scored(metrics, float(metrics.get(self.main_metric, np.nan)), preds)

    def save(self, directory: str | Path) -> None:
        """Name the activation in config.json (written before this is called) for
        sentence-transformers' CrossEncoder. No ``bertkit_task.json``: the folder is a plain
        one-output sequence classifier, which bertkit reads as one
        (:func:`bertkit.tasks.registry.adapter_from_hf_config`: ``predict`` gives the logit,
        ``serve``'s ``/rerank`` its sigmoid)."""
        path = Path(directory) / "config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        config["sentence_transformers"] = {
            "activation_fn": SIGMOID,
            "version": f"bertkit {__version__}",
        }
        config["sbert_ce_default_activation_function"] = SIGMOID
        atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
