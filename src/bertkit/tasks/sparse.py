"""SPLADE sparse encoders for retrieval (family ``sparse``): a masked-LM model trained as
sentence-transformers' ``SpladeLoss`` trains one.

The training and dev data are what ``finetune embeddings`` reads (:class:`EmbeddingAdapter`:
pairs/triples files or a BEIR folder, with hard negatives; each text cut to ``max_seq_length``
tokens, the query and document prompts put before them); the model is
:class:`bertkit.model.splade.SpladeEncoder` (the loss lives there). Dev is retrieval only (a
BEIR folder or a (query, positive) pairs file): every dev text's SPLADE vector, searched exactly
by sparse dot product (:func:`bertkit.evaluation.retrieval.exact_sparse_search`, ties by
document id), which is what ``bertkit evaluate`` does on the saved folder
(:func:`bertkit.inference.retrieval.sparse_search`); MRR@10 selects. The selected model is saved
as a sentence-transformers ``SparseEncoder`` folder (``MLMTransformer`` -> ``SpladePooling``,
similarity dot).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks.dev_layout import dev_layout
from bertkit.errors import ConfigError
from bertkit.evaluation.retrieval import (
    SparseRows,
    exact_sparse_search,
    id_ties,
    rank_by_scores,
    retrieval_metrics,
    top_hits,
)
from bertkit.tasks.base import Scored
from bertkit.tasks.embedding import EmbeddingAdapter

SPLADE_STRATEGIES = ("max", "sum")
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")
""":class:`bertkit.model.pooling.SpladeSpec`'s choices, named here without torch (a test keeps
them equal)."""


@dataclass
class SparseAdapter(EmbeddingAdapter):
    """SPLADE training (see the module docstring); the dense options of
    :class:`EmbeddingAdapter` keep their defaults (the CLI does not offer them)."""

    pooling_strategy: str = "max"
    """SPLADE pooling of the token weights: max (SPLADE v2 and later) or sum."""
    activation_function: str = "relu"
    """SPLADE token weight: log(1 + relu(logit)), or log1p of that again (log1p_relu)."""
    query_regularizer_weight: float = 5e-5
    """FLOPS regulariser weight of the query vectors (SpladeLoss' query_regularizer_weight,
    lambda_q)."""
    document_regularizer_weight: float = 3e-5
    """FLOPS regulariser weight of the positive and negative vectors (SpladeLoss'
    document_regularizer_weight, lambda_d)."""

    head_class = "SpladeEncoder"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pooling_strategy not in SPLADE_STRATEGIES:
            raise ConfigError(
                f"SPLADE pooling must be one of {', '.join(SPLADE_STRATEGIES)}, "
                f"got {self.pooling_strategy!r}"
            )
        if self.activation_function not in SPLADE_ACTIVATIONS:
            raise ConfigError(
                f"SPLADE activation must be one of {', '.join(SPLADE_ACTIVATIONS)}, "
                f"got {self.activation_function!r}"
            )
        for name in ("query_regularizer_weight", "document_regularizer_weight"):
            value = getattr(self, name)
            if not 0 <= value < math.inf:
                raise ConfigError(f"{name} must be zero or positive and finite, got {value}")

    @property
    def similarity(self) -> str:
        """SPLADE vectors are compared by their dot product (the saved folder says so)."""
        return "dot"

    @property
    def main_metric(self) -> str:  # type: ignore[override]
        return "MRR@10"

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        if split != "train" and dev_layout(path, self.file_format) == "pairs":
            raise ConfigError(
                f"{path}: labelled sentence pairs; finetune sparse is scored by retrieval on a "
                "BEIR folder or a (query, positive) pairs file"
            )
        return super().read(path, split)

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        """Each row's non-zero entries: (vocabulary ids, weights, vocabulary size)."""
        vectors = out.embeddings  # (R, V)
        size = int(vectors.shape[1])
        return [(ids, weights, size) for ids, weights in nonzero_rows(vectors)]

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        queries = [i for i, e in enumerate(examples) if e.relevant is not None]
        docs = [i for i, e in enumerate(examples) if e.relevant is None]
        doc_ids = [examples[i].id for i in docs]
        query_ids = [examples[i].id for i in queries]
        found, scores = exact_sparse_search(
            _csr([rows[i] for i in queries]),
            _csr([rows[i] for i in docs]),
            100,
            ties=id_ties(doc_ids),
        )
        rankings = rank_by_scores(doc_ids, found, query_ids)
        qrels = {examples[i].id: examples[i].relevant for i in queries}
        metrics = retrieval_metrics(rankings, qrels)  # type: ignore[arg-type]
        active = [len(rows[i][0]) for i in queries], [len(rows[i][0]) for i in docs]
        metrics["query_active_dims"] = float(np.mean(active[0])) if queries else 0.0
        metrics["document_active_dims"] = float(np.mean(active[1])) if docs else 0.0
        preds = top_hits(query_ids, rankings, scores)
        return Scored(metrics, float(metrics[self.main_metric]), preds)


def _csr(rows: Sequence[tuple[np.ndarray, np.ndarray, int]]) -> SparseRows:
    """:meth:`SparseAdapter.outputs` rows as the CSR rows the search reads."""
    return SparseRows.of([r[0] for r in rows], [r[1] for r in rows], rows[0][2] if rows else 0)


def nonzero_rows(vectors: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """The non-zero entries of each row of a (R, V) torch tensor (any device and float dtype):
    (vocabulary ids ascending as int64, their weights as float32), one device-to-host copy."""
    vectors = vectors.float()
    rows, cols = vectors.nonzero(as_tuple=True)
    vals = vectors[rows, cols].cpu().numpy()
    rows, cols = rows.cpu().numpy(), cols.cpu().numpy()
    ends = np.searchsorted(rows, np.arange(vectors.shape[0] + 1))
    return [(cols[a:b].astype(np.int64), vals[a:b].astype(np.float32)) for a, b in pairwise(ends)]
