"""Listwise losses of a one-output cross-encoder over groups of candidates of one query.

A training batch of the ``ranking`` and ``listnet`` rerank losses holds B groups of G rows each,
group after group: the query paired with its positive, then with each of its G - 1 hard
negatives (:class:`bertkit.tasks.rerank.RerankAdapter`). The head's logits (B * G, 1) are viewed
as (B, G), and ``labels`` (B, G) hold each candidate's relevance (1 for the positive, 0 for the
negatives of an n-tuple file).

- ``ranking``: sentence-transformers' CrossEncoder ``MultipleNegativesRankingLoss`` with its
  defaults (``activation_fn=Sigmoid``, ``scale=10``): the cross-entropy of picking the positive
  (column 0) among the group's candidates from ``scale * sigmoid(logit)``. Only the group's own
  hard negatives are candidates: sentence-transformers also scores each query against
  ``num_negatives`` passages drawn at random from the other groups of the batch (extra forward
  passes on new pairs); bertkit does not, so the loss is a mean of independent per-group terms,
  which gradient accumulation and DDP keep. It equals sentence-transformers' loss on a batch of
  one group (where there is no other group to draw from) and its ``calculate_loss`` on the same
  logits.
- ``listnet``: ``ListNetLoss`` (``activation_fn=Identity``): the cross-entropy between the
  softmax of the labels and the softmax of the logits, averaged over the groups (with labels
  1, 0, ..., 0 the target is softmax([1, 0, ...]), not one-hot, exactly as there).

Both are computed in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GROUP_LOSSES = ("ranking", "listnet")
RANKING_SCALE = 10.0
"""sentence-transformers' CrossEncoder MultipleNegativesRankingLoss ``scale``."""


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
    """The ``name`` loss (:data:`GROUP_LOSSES`) of the row logits (B * G, 1), groups laid out
    one after the other, against ``labels`` (B, G)."""
    grouped = logits.reshape(labels.shape)  # (B, G)
    if name == "ranking":
        return ranking_loss(grouped)
    if name == "listnet":
        return listnet_loss(grouped, labels)
    raise ValueError(f"group loss must be one of {', '.join(GROUP_LOSSES)}, got {name!r}")
