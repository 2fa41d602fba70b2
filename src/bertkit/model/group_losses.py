"""Listwise losses of a one-output cross-encoder over groups of candidates of one query.

A training batch of the ``ranking`` and ``listnet`` rerank losses holds B groups, their rows
group after group (:class:`bertkit.tasks.rerank.RerankAdapter`): group b's candidates, then
(``ranking`` with in-batch negatives) the query paired with documents of other groups. The
head's logits (R, 1) are laid into ``labels`` (B, K) row-major at its finite entries (K: the
longest group; ``-inf`` pads a shorter one, as sentence-transformers' ``ListNetLoss`` pads its
label matrix), so groups may differ in length. ``labels`` hold each candidate's relevance: 1
for a positive, 0 for a negative, graded values from a listwise file.

- ``ranking``: sentence-transformers' CrossEncoder ``MultipleNegativesRankingLoss`` with its
  defaults (``activation_fn=Sigmoid``, ``scale=10``): the cross-entropy of picking the positive
  (column 0) among the group's candidates from ``scale * sigmoid(logit)``. The candidates are
  the group's hard negatives and ``num_negatives`` documents of the other groups of the batch
  drawn by :func:`bertkit.tasks.rerank.in_batch_negatives` as sentence-transformers draws them.
- ``listnet``: ``ListNetLoss`` (``activation_fn=Identity``): the cross-entropy between the
  softmax of the labels and the softmax of the logits, averaged over the groups (with labels
  1, 0, ..., 0 the target is softmax([1, 0, ...]), not one-hot, exactly as there).

Both are computed in fp32; padding takes the logit -1e16 (sentence-transformers' value: finite,
so that a target probability of 0 times its log-probability is 0, not NaN).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GROUP_LOSSES = ("ranking", "listnet")
RANKING_SCALE = 10.0
"""sentence-transformers' CrossEncoder MultipleNegativesRankingLoss ``scale``."""
PAD_LOGIT = -1e16
"""The score of a padding column (sentence-transformers' ListNetLoss)."""


def ranking_loss(logits: torch.Tensor, scale: float = RANKING_SCALE) -> torch.Tensor:
    """logits (B, G), column 0 each group's positive -> the mean cross-entropy of the positive
    among its group from ``scale * sigmoid(logits)``."""
    scores = torch.sigmoid(logits.float()) * scale
    return F.cross_entropy(
        scores, torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
    )


def listnet_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """logits, labels (B, G) -> the mean over groups of the cross-entropy between
    softmax(labels) and softmax(logits)."""
    return F.cross_entropy(logits.float(), labels.float().softmax(dim=1))


def group_loss(name: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The ``name`` loss (:data:`GROUP_LOSSES`) of the row logits (R, 1), laid row-major into
    the finite entries of ``labels`` (B, K) (R of them; ``-inf`` pads)."""
    present = torch.isfinite(labels)
    if int(present.sum()) != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} rows for {int(present.sum())} labelled candidates")
    if name not in GROUP_LOSSES:
        raise ValueError(f"group loss must be one of {', '.join(GROUP_LOSSES)}, got {name!r}")
    rows = logits.float().reshape(-1)
    if name == "ranking":  # the activation before the padding, which must stay -1e16
        rows = torch.sigmoid(rows) * RANKING_SCALE
    scores = torch.full(labels.shape, PAD_LOGIT, dtype=rows.dtype, device=rows.device)
    scores = scores.masked_scatter(present, rows)  # (B, K)
    if name == "ranking":
        target = torch.zeros(labels.shape[0], dtype=torch.long, device=labels.device)
        return F.cross_entropy(scores, target)
    return F.cross_entropy(scores, labels.float().softmax(dim=1))
