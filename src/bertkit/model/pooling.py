"""Sentence vectors from token vectors: [CLS] or masked mean, optionally L2-normalised."""

from __future__ import annotations

import torch
import torch.nn.functional as F

POOLINGS = ("cls", "mean", "max")


def pool(
    hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str = "mean", normalize: bool = False
) -> torch.Tensor:
    """hidden (B, T, H), attention_mask (B, T) -> (B, H).

    "mean" averages the real tokens only (specials included, padding excluded), which is what
    sentence-transformers' mean pooling does; "max" takes each dimension's maximum over the real
    tokens; "cls" takes position 0. normalize divides by the
    L2 norm (cosine similarity becomes a dot product).
    """
    if mode == "cls":
        out = hidden[:, 0]
    elif mode == "mean":
        mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
        out = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    elif mode == "max":
        real = attention_mask.bool().unsqueeze(-1)  # (B, T, 1)
        out = hidden.masked_fill(~real, torch.finfo(hidden.dtype).min).amax(1)
    else:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {mode!r}")
    return F.normalize(out, p=2, dim=-1) if normalize else out
