"""SPLADE training: a masked-LM encoder whose pooled MLM logits are sparse vectors, trained by
a ranking loss on their dot products plus FLOPS regularisers (Formal et al. 2021).

Each row of a training batch (laid out as :class:`bertkit.model.contrastive.BiEncoder`'s: the B
queries, their B positives, then each column of hard negatives) becomes one vector over the
vocabulary (V) by :func:`splade_vectors`. The loss is sentence-transformers'
``SpladeLoss(SparseMultipleNegativesRankingLoss(scale=1, dot product), ...)``:

    ranking_loss(q, c, scale=1, dot) + w_d * flops(c) + w_q * flops(q)

where ``flops(x) = sum_v (mean_b x[b, v])^2`` (``FlopsLoss``: the squared mean weight of each
vocabulary entry over the batch, summed), c every candidate row (positives and negatives) and
q the query rows. The regulariser pushes entries that are active for many texts to zero, so the
vectors stay sparse and an inverted index over them stays fast.

Memory: the MLM head's (R, T, V) logits are the peak: 48 rows (16 triples) x 128 tokens x 30522
entries are 750 MB per float32 tensor, and autograd would keep several (logits, relu, log1p,
mask). :func:`splade_vectors` makes and pools them a slice of positions at a time; under
autograd each slice is checkpointed (only its hidden states are kept, its logits are made again
in the backward pass), so one (R, slice, V) slice's tensors live at a time, forward and
backward, for one more pass through the MLM head per step. Training slices are
``TRAIN_CHUNK_TOKENS`` long. Measured on a 2-core Intel Xeon (AVX-512/AMX), fp32, that 48 x 128
x 30522 batch through a hidden-768 MLM head, forward and backward of the pooling alone: peak
memory grows 3094 MiB pooling all positions at once (14.3 s), 1815 MiB in checkpointed slices of
64 (21.6 s), 1054 MiB of 32 (14.9 s), 681 MiB of 16 (17.0 s; timings on shared cores, noisy).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils.checkpoint import checkpoint

from bertkit.model.batching import Layout
from bertkit.model.contrastive import BiEncoder, ranking_loss
from bertkit.model.heads import BertForMaskedLM, MaskedLMHead
from bertkit.model.pooling import SpladeSpec, splade_pool

CHUNK_TOKENS = 64
"""Token positions per pass through the MLM head: its (B, T, V) logits are the memory peak
(32 x 512 x 30522 floats would be 2 GB), so they are made and pooled a slice of T at a time."""
TRAIN_CHUNK_TOKENS = 16
"""Token positions per checkpointed slice under autograd: a quarter of :data:`CHUNK_TOKENS`'
memory (module docstring), for a few more, smaller decoder matmuls."""


def flops_loss(vectors: torch.Tensor) -> torch.Tensor:
    """vectors (B, V) -> sum over v of (mean over b of vectors[b, v])^2 (``FlopsLoss``), fp32."""
    return (vectors.float().mean(0) ** 2).sum()


def splade_loss(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    query_weight: float,
    document_weight: float,
    scale: float = 1.0,
) -> torch.Tensor:
    """queries (B, V), candidates (C, V) (candidate i the positive of query i) -> the ranking
    loss of their dot products plus ``document_weight * flops(candidates) + query_weight *
    flops(queries)`` (``SpladeLoss``'s sum; a weight of 0 drops its term)."""
    loss = ranking_loss(queries, candidates, scale, cosine=False)
    return loss + document_weight * flops_loss(candidates) + query_weight * flops_loss(queries)


def _pooled_slice(
    head: MaskedLMHead,
    word: torch.Tensor,
    hidden: torch.Tensor,
    mask: torch.Tensor,
    strategy: str,
    activation: str,
) -> torch.Tensor:
    """hidden (B, C, H), mask (B, C) -> the slice's pooled weights (B, V), in fp32."""
    return splade_pool(head(hidden, word).float(), mask, strategy, activation)


def splade_vectors(
    head: MaskedLMHead,
    word: torch.Tensor,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    spec: SpladeSpec,
    chunk: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """hidden (B, T, H), attention_mask (B, T) -> SPLADE vectors (B, V) in fp32: the MLM head's
    logits (decoder ``word``, the tied word embeddings) pooled ``chunk`` positions at a time and
    joined by max or sum; under autograd each slice is checkpointed (module docstring)."""
    grad = torch.is_grad_enabled() and hidden.requires_grad
    pooled = None
    for s in range(0, hidden.shape[1], chunk):
        args = (head, word, hidden[:, s : s + chunk], attention_mask[:, s : s + chunk])
        rest = (spec.pooling_strategy, spec.activation_function)
        if grad:
            part = checkpoint(_pooled_slice, *args, *rest, use_reentrant=False)
        else:
            part = _pooled_slice(*args, *rest)  # (B, V)
        if pooled is None:
            pooled = part
        elif spec.pooling_strategy == "max":
            pooled = torch.maximum(pooled, part)
        else:
            pooled = pooled + part
    assert pooled is not None, "no token positions"
    return pooled


class SpladeEncoder(BiEncoder):
    """A masked-LM model trained as a SPLADE encoder (module docstring): :class:`BiEncoder`'s
    batch layout, GradCache (``mini_batch_size``) and DDP handling, with SPLADE vectors and
    :func:`splade_loss`. ``masked_lm`` keeps the trained weights (its ``bert`` and ``mlm`` are
    this module's): :meth:`whole_encoder` gives it for saving."""

    def __init__(
        self,
        masked_lm: BertForMaskedLM,
        spec: SpladeSpec,
        *,
        query_regularizer_weight: float,
        document_regularizer_weight: float,
        mini_batch_size: int | None = None,
    ) -> None:
        super().__init__(masked_lm.bert, "splade", scale=1.0, mini_batch_size=mini_batch_size)
        self.mlm = masked_lm.mlm
        self.__dict__["_masked_lm"] = masked_lm  # not a submodule: its parameters are these
        self.spec = spec
        self.query_regularizer_weight = query_regularizer_weight
        self.document_regularizer_weight = document_regularizer_weight

    def vectors(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        layout: Layout | None = None,
    ) -> torch.Tensor:
        """Rows (R, T) -> SPLADE vectors (R, V) in fp32, in one encoder pass (in training the
        MLM head reads :data:`TRAIN_CHUNK_TOKENS` positions at a time; without grad
        :data:`CHUNK_TOKENS`, as :class:`~bertkit.inference.sparse.SparseEmbedder` reads them)."""
        hidden = self.bert(input_ids, attention_mask, token_type_ids, layout=layout)
        word = self.bert.embeddings.word.weight
        chunk = TRAIN_CHUNK_TOKENS if torch.is_grad_enabled() else CHUNK_TOKENS
        h = hidden.last_hidden_state
        return splade_vectors(self.mlm, word, h, attention_mask, self.spec, chunk)

    def objective(
        self, vectors: torch.Tensor, labels: torch.Tensor, teacher_scores: torch.Tensor | None
    ) -> torch.Tensor:
        b = labels.shape[0]
        return splade_loss(
            vectors[:b],
            vectors[b:],
            self.query_regularizer_weight,
            self.document_regularizer_weight,
            self.scale,
        )

    @contextmanager
    def whole_encoder(self) -> Iterator[BertForMaskedLM]:  # type: ignore[override]
        """The masked-LM model (encoder and head) for saving."""
        yield self.__dict__["_masked_lm"]
