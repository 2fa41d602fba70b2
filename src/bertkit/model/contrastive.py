"""A bi-encoder and its contrastive loss: in-batch negatives, hard negatives, Matryoshka.

A training batch holds G rows per example, stacked column by column: the B queries, then their
B positives, then each column of hard negatives (B rows each); the rows are encoded in one pass
and pooled. Each query is scored against every candidate of the batch (all positives and all
negatives, C = B * (G - 1)) by scaled cosine similarity, and the loss is the cross-entropy of
picking its own positive (sentence-transformers' ``MultipleNegativesRankingLoss``, scale 20 =
temperature 0.05). ``symmetric`` averages it with the loss of picking each positive's query among
the batch's queries (``MultipleNegativesSymmetricRankingLoss``). With ``matryoshka_dims`` the
loss is summed over the vectors cut to each of those sizes (``MatryoshkaLoss``, weights 1), so
the first d values of a vector are an embedding of their own.

Under DDP each rank scores its own share of the batch (negatives are not gathered across ranks).
With ``mini_batch_size`` the rows are encoded that many at a time, twice (GradCache,
:mod:`bertkit.model.grad_cache`): the same loss and gradients in one chunk's activation memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.batching import Layout
from bertkit.model.bert import BertModel
from bertkit.model.grad_cache import cached_vectors, row_chunks
from bertkit.model.outputs import EmbeddingOutput
from bertkit.model.pooling import pool


def ranking_loss(
    queries: torch.Tensor, candidates: torch.Tensor, scale: float = 20.0, symmetric: bool = False
) -> torch.Tensor:
    """queries (B, H), candidates (C, H) with C >= B and candidate i the positive of query i ->
    the mean cross-entropy of each query's positive among all candidates (fp32)."""
    q = F.normalize(queries.float(), dim=-1)
    c = F.normalize(candidates.float(), dim=-1)
    scores = scale * q @ c.T  # (B, C)
    target = torch.arange(q.shape[0], device=q.device)
    loss = F.cross_entropy(scores, target)
    if symmetric:
        loss = (loss + F.cross_entropy(scores[:, : q.shape[0]].T, target)) / 2
    return loss


class BiEncoder(nn.Module):
    """An encoder with a pooling, trained by :func:`ranking_loss` (see the module docstring).

    The encoder's pooler is set aside while training (no pooling reads it, and DDP needs every
    parameter to get a gradient) and put back by :meth:`whole_encoder` for saving.
    """

    def __init__(
        self,
        bert: BertModel,
        pooling: str = "mean",
        *,
        scale: float = 20.0,
        symmetric: bool = False,
        matryoshka_dims: Sequence[int] = (),
        mini_batch_size: int | None = None,
    ) -> None:
        super().__init__()
        self.__dict__["_pooler"] = bert.pooler  # not a submodule: not trained, not in DDP
        bert.pooler = None
        self.bert = bert
        self.config = bert.config
        self.pooling, self.scale, self.symmetric = pooling, scale, symmetric
        self.matryoshka_dims = tuple(matryoshka_dims)
        self.mini_batch_size = mini_batch_size
        """Rows per encoder pass when training with grad (None: all rows in one pass)."""

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        layout: Layout | None = None,
    ) -> EmbeddingOutput:
        """Rows (R, T) -> pooled vectors (R, H); with ``labels`` (B,), the B query rows come
        first and the loss is computed (``labels`` are 0..B-1: the positive's candidate index)."""
        size = self.mini_batch_size
        if labels is not None and size and torch.is_grad_enabled() and input_ids.shape[0] > size:
            chunks = row_chunks(input_ids, attention_mask, token_type_ids, layout, size)
            vectors = cached_vectors(lambda c: self.vectors(**c), chunks, input_ids.device)
        else:
            vectors = self.vectors(input_ids, attention_mask, token_type_ids, layout)
        loss = None
        if labels is not None:
            b = labels.shape[0]
            q, c = vectors[:b], vectors[b:]
            dims = self.matryoshka_dims or (vectors.shape[1],)
            loss = sum(ranking_loss(q[:, :d], c[:, :d], self.scale, self.symmetric) for d in dims)
        return EmbeddingOutput(embeddings=vectors, loss=loss)

    def vectors(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        layout: Layout | None = None,
    ) -> torch.Tensor:
        """Rows (R, T) -> pooled float vectors (R, H), in one pass."""
        out = self.bert(input_ids, attention_mask, token_type_ids, layout=layout)
        return pool(out.last_hidden_state, attention_mask, self.pooling).float()

    @contextmanager
    def whole_encoder(self) -> Iterator[BertModel]:
        """The encoder with its pooler back in place (for saving a complete checkpoint)."""
        self.bert.pooler = self.__dict__["_pooler"]
        try:
            yield self.bert
        finally:
            self.bert.pooler = None
