"""A bi-encoder and its contrastive loss: in-batch negatives, hard negatives, Matryoshka.

A training batch holds G rows per example, stacked column by column: the B queries, then their
B positives, then each column of hard negatives (B rows each); the rows are encoded in one pass
and pooled. Each query is scored against every candidate of the batch (all positives and all
negatives, C = B * (G - 1)) by scaled cosine similarity, and the loss is the cross-entropy of
picking its own positive (sentence-transformers' ``MultipleNegativesRankingLoss``, scale 20 =
temperature 0.05); ``cosine=False`` scores by the dot product instead (the same loss with
``similarity_fct=dot_score``, for a model that does not normalise its vectors). ``symmetric``
averages it with the loss of picking each positive's query among the batch's queries
(``MultipleNegativesSymmetricRankingLoss``). With ``matryoshka_dims`` the loss is summed over the
vectors cut to each of those sizes (``MatryoshkaLoss``, weights 1), so the first d values of a
vector are an embedding of their own.

``loss="margin-mse"`` distils a cross-encoder instead (Hofstätter et al. 2020, sentence-transformers'
``MarginMSELoss``): each example carries the teacher's scores [t_p, t_n1 .. t_nn] of its positive
and negatives, and the loss is the mean squared error between the student's margins
s(q, p) - s(q, n_i) and the teacher's t_p - t_ni. No example sees another's texts, so the loss
is a mean over examples (gradient accumulation keeps it). The student's s is the dot product of
the vectors (sentence-transformers' default ``pairwise_dot_score``) with ``cosine=False``, and
their cosine otherwise (the similarity the saved model declares and will be served by).
``loss="distill-kl"`` distils the same scores listwise (Lin et al. 2020, sentence-transformers'
``DistillKLDivLoss``): the KL divergence from the teacher's softmax over [positive, negatives]
to the student's, the student's scores divided by its temperature and the teacher's by its own
(one shared temperature by default), times the student's temperature squared.

Under DDP each rank scores its own share of the batch (negatives are not gathered across ranks).
With ``mini_batch_size`` the rows are encoded that many at a time, twice (GradCache,
:mod:`bertkit.model.grad_cache`): the same loss and gradients in one chunk's activation memory;
under DDP too (each rank's batch share is chunked; the update step averages the gradients).
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
    queries: torch.Tensor,
    candidates: torch.Tensor,
    scale: float = 20.0,
    symmetric: bool = False,
    cosine: bool = True,
) -> torch.Tensor:
    """queries (B, H), candidates (C, H) with C >= B and candidate i the positive of query i ->
    the mean cross-entropy of each query's positive among all candidates (fp32), scored by
    ``scale`` times their cosine, or their dot product (``cosine=False``: a dot-product
    bi-encoder's, and SPLADE's ``SparseMultipleNegativesRankingLoss``, both at scale 1)."""
    q, c = queries.float(), candidates.float()
    if cosine:
        q, c = F.normalize(q, dim=-1), F.normalize(c, dim=-1)
    scores = scale * q @ c.T  # (B, C)
    target = torch.arange(q.shape[0], device=q.device)
    loss = F.cross_entropy(scores, target)
    if symmetric:
        loss = (loss + F.cross_entropy(scores[:, : q.shape[0]].T, target)) / 2
    return loss


LOSSES = ("ranking", "margin-mse", "distill-kl")


def _pair_scores(
    queries: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor, cosine: bool
) -> torch.Tensor:
    """queries, positives (B, H), negatives (N, B, H) -> s(q, [p, n_1 .. n_N]) (B, 1 + N) in
    fp32, s the dot product (of unit vectors if ``cosine``)."""
    q, p, n = queries.float(), positives.float(), negatives.float()
    if cosine:
        q, p, n = F.normalize(q, dim=-1), F.normalize(p, dim=-1), F.normalize(n, dim=-1)
    return torch.cat([(q * p).sum(-1)[:, None], (q[None] * n).sum(-1).T], dim=1)


def margin_mse_loss(
    queries: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    teacher: torch.Tensor,
    cosine: bool = False,
) -> torch.Tensor:
    """queries, positives (B, H), negatives (N, B, H) (column i: each query's negative i),
    teacher (B, 1 + N) scores [positive, negatives] -> the mean over B x N of
    ((s(q, p) - s(q, n_i)) - (t_p - t_ni))^2, s the dot product (of unit vectors if ``cosine``)."""
    s = _pair_scores(queries, positives, negatives, cosine)
    student = s[:, :1] - s[:, 1:]  # (B, N)
    target = teacher[:, :1].float() - teacher[:, 1:].float()  # (B, N)
    return F.mse_loss(student, target)


def distill_kl_loss(
    queries: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    teacher: torch.Tensor,
    temperature: float,
    cosine: bool = False,
    teacher_temperature: float | None = None,
) -> torch.Tensor:
    """queries, positives (B, H), negatives (N, B, H), teacher (B, 1 + N) scores [positive,
    negatives] -> KL(softmax(teacher / Tt) || softmax(student / T)) summed over the 1 + N
    candidates and averaged over B (``batchmean``), times T^2 (which keeps the gradient's size
    as a shared T changes, Hinton et al. 2015); s as in :func:`margin_mse_loss`.

    ``temperature`` T is the student's, and the teacher's unless ``teacher_temperature`` Tt is
    given: DistillKLDivLoss with ``student_temperature=T, teacher_temperature=Tt``, which also
    multiplies by the student's T^2 alone."""
    t_teacher = temperature if teacher_temperature is None else teacher_temperature
    student = F.log_softmax(_pair_scores(queries, positives, negatives, cosine) / temperature, 1)
    target = F.softmax(teacher.detach().float() / t_teacher, dim=1)
    return F.kl_div(student, target, reduction="batchmean") * temperature**2


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
        loss: str = "ranking",
        cosine: bool = True,
        temperature: float = 1.0,
        teacher_temperature: float | None = None,
        head: nn.Module | None = None,
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
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
        # distill-kl: temperature divides the student's scores, and the teacher's unless
        # teacher_temperature is given (distill_kl_loss)
        self.loss, self.temperature = loss, temperature
        self.cosine = cosine
        """Every loss scores by the cosine of the vectors; False: by their dot product."""
        self.teacher_temperature = teacher_temperature
        self.head = head
        """Dense modules after the pooling (a sentence-transformers folder's projection, as
        :func:`~bertkit.interop.sentence_dense.dense_head` builds it), trained with the encoder
        and run in fp32 as ``Embedder`` runs them; None: the pooled vectors as they are."""

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        layout: Layout | None = None,
        teacher_scores: torch.Tensor | None = None,
    ) -> EmbeddingOutput:
        """Rows (R, T) -> pooled vectors (R, H); with ``labels`` (B,), the B query rows come
        first and the loss is computed (``labels`` are 0..B-1: the positive's candidate index;
        margin-mse and distill-kl read ``teacher_scores`` (B, 1 + N) instead)."""
        size = self.mini_batch_size
        if labels is not None and size and torch.is_grad_enabled() and input_ids.shape[0] > size:
            chunks = row_chunks(input_ids, attention_mask, token_type_ids, layout, size)
            vectors = cached_vectors(lambda c: self.vectors(**c), chunks, input_ids.device)
        else:
            vectors = self.vectors(input_ids, attention_mask, token_type_ids, layout)
        loss = None if labels is None else self.objective(vectors, labels, teacher_scores)
        return EmbeddingOutput(embeddings=vectors, loss=loss)

    def objective(
        self, vectors: torch.Tensor, labels: torch.Tensor, teacher_scores: torch.Tensor | None
    ) -> torch.Tensor:
        """The loss of a training batch's vectors (R, H): the B query rows first, then their
        candidates (B = ``labels.shape[0]``)."""
        b = labels.shape[0]
        q, c = vectors[:b], vectors[b:]
        dims = self.matryoshka_dims or (vectors.shape[1],)
        if self.loss == "ranking":
            return sum(
                ranking_loss(q[:, :d], c[:, :d], self.scale, self.symmetric, self.cosine)
                for d in dims
            )
        return sum(self._distil(q[:, :d], c[:, :d], teacher_scores) for d in dims)

    def _distil(
        self, q: torch.Tensor, c: torch.Tensor, teacher: torch.Tensor | None
    ) -> torch.Tensor:
        """The distillation loss of queries q (B, H) and their candidates c ((1 + N) * B, H),
        laid out positives then each column of negatives, against ``teacher`` (B, 1 + N)."""
        if teacher is None:
            raise ValueError(f"{self.loss} needs the teacher's scores (teacher_scores)")
        b = q.shape[0]
        p, n = c[:b], c[b:].reshape(-1, b, c.shape[1])  # (B, H), (N, B, H)
        if self.loss == "margin-mse":
            return margin_mse_loss(q, p, n, teacher, self.cosine)
        return distill_kl_loss(
            q, p, n, teacher, self.temperature, self.cosine, self.teacher_temperature
        )

    def vectors(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        layout: Layout | None = None,
    ) -> torch.Tensor:
        """Rows (R, T) -> pooled float vectors (R, H), projected by :attr:`head`, in one pass."""
        out = self.bert(input_ids, attention_mask, token_type_ids, layout=layout)
        pooled = pool(out.last_hidden_state, attention_mask, self.pooling).float()
        if self.head is None:
            return pooled
        with torch.autocast(pooled.device.type, enabled=False):
            return self.head(pooled)

    @property
    def multi_pass_backward(self) -> bool:
        """True with ``mini_batch_size``: one ``backward()`` back-propagates chunk by chunk, so
        the update step averages the gradients over DDP ranks itself
        (:func:`bertkit.training.update.multi_pass_backward`)."""
        return self.mini_batch_size is not None

    @contextmanager
    def whole_encoder(self) -> Iterator[BertModel]:
        """The encoder with its pooler back in place (for saving a complete checkpoint)."""
        self.bert.pooler = self.__dict__["_pooler"]
        try:
            yield self.bert
        finally:
            self.bert.pooler = None
