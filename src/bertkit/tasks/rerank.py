"""Cross-encoder rerankers (family ``rerank``): one relevance logit per (query, passage) pair.

Head: ``BertForSequenceClassification`` with one output and binary cross-entropy on labels in
[0, 1] (``problem_type`` ``multi_label_classification``, which is what sentence-transformers'
``CrossEncoder`` trains with ``num_labels=1``); scores are ``sigmoid(logit)``. Data: labelled
pairs, or triples expanded to (query, positive, 1) and (query, negative, 0)
(:func:`bertkit.data.tasks.retrieval.read_labelled_pairs`). Pairs are cut longest-first to
``max_seq_length``.

Dev: the pairs of each query are ranked by their logit; metrics are MRR@10 (selection), NDCG@10
and Recall@1 over the queries with a positive (label >= 0.5), and the accuracy of
``sigmoid(logit) >= 0.5`` against ``label >= 0.5``.

The saved folder's config.json names the activation (``sentence_transformers.activation_fn``,
and the older ``sbert_ce_default_activation_function``), so ``CrossEncoder(folder)``,
text-embeddings-inference and ``bertkit serve``'s ``/rerank`` score with the same sigmoid.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit import __version__
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.data.tasks.retrieval import LabelledPair, read_labelled_pairs
from bertkit.errors import InputError
from bertkit.evaluation.retrieval import rerank_order, retrieval_metrics
from bertkit.io import atomic_write_text
from bertkit.tasks.base import Scored, TaskAdapter
from bertkit.tasks.features import EncodedInput, encode_classification, pad_batch
from bertkit.tasks.windows import WindowConfig
from bertkit.tokenizer.protocol import Tokenizer

SIGMOID = "torch.nn.modules.activation.Sigmoid"


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class RerankAdapter(TaskAdapter):
    """A one-output pair scorer trained with binary cross-entropy (see the module docstring)."""

    file_format: str | None = None

    head_class = "BertForSequenceClassification"
    main_metric = "MRR@10"

    def config_overrides(self) -> dict[str, Any]:
        return {
            "num_labels": 1,
            "problem_type": "multi_label_classification",
            "id2label": {0: "LABEL_0"},
            "label2id": {"LABEL_0": 0},
        }

    def read(self, path: str | Path, split: str = "dev") -> list[LabelledPair]:
        return read_labelled_pairs(path, self.file_format)

    def require_labelled(
        self, path: str | Path, split: str, examples: list[Any]
    ) -> list[LabelledPair]:
        """Also refused: training pairs that all have the same label (nothing to learn), or a
        dev set where no query has both a relevant (label >= 0.5) and an irrelevant pair (every
        query's positive would rank first: MRR@10 1 for any model). A (query, positive) pairs
        file without negatives reads as relevant pairs only, so it is refused for both."""
        examples = super().require_labelled(path, split, examples)
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

    def encode(
        self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool
    ) -> list[EncodedInput]:
        pairs = [
            ClassificationExample(str(i), e.query, e.passage, float(e.label))
            for i, e in enumerate(examples)
        ]
        return encode_classification(
            tokenizer, pairs, self.max_seq_length, WindowConfig(truncate=True)
        )

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        batch = pad_batch(features, pad_id)
        if "labels" in batch:
            batch["labels"] = batch["labels"].astype(np.float32).reshape(-1, 1)
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
