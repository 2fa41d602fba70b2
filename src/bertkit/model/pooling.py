"""Sentence vectors from token vectors: [CLS] or masked mean, optionally L2-normalised."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.errors import ConfigError

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


LAYER_COMBINES = ("concat", "sum", "mean")


def combine_layers(
    hidden_states: tuple[torch.Tensor, ...] | list[torch.Tensor],
    layers: tuple[int, ...] | list[int],
    how: str = "concat",
) -> torch.Tensor:
    """The feature-based approach (BERT paper 5.3): layers ``layers`` of ``hidden_states``
    (embeddings first, so -1 is the last layer, 0 the embeddings), each (B, T, H), joined to
    (B, T, len(layers) * H) by "concat", or (B, T, H) by "sum" / "mean"."""
    n = len(hidden_states)
    if not layers:
        raise ValueError("no layers to combine")
    bad = [i for i in layers if not -n <= i < n]
    if bad:
        raise ConfigError(
            f"layers {bad} are out of range: the model has {n} ({n - 1} layers + the embeddings)"
        )
    picked = [hidden_states[i] for i in layers]
    if how == "concat":
        return torch.cat(picked, dim=-1)
    if how == "sum":
        return torch.stack(picked).sum(0)
    if how == "mean":
        return torch.stack(picked).mean(0)
    raise ValueError(f"layer combine must be one of {LAYER_COMBINES}, got {how!r}")
