"""Sentence vectors from token vectors: [CLS] or masked mean, optionally L2-normalised; and
SPLADE's sparse vectors from masked-LM logits (:class:`SpladeSpec`, :func:`splade_pool`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bertkit.errors import ConfigError

POOLINGS = ("cls", "mean", "max")
SPLADE = "splade"
"""The pooling name that asks for sparse vectors (``bertkit embed --pooling splade``)."""
EMBED_POOLINGS = (*POOLINGS, SPLADE)
"""``bertkit embed``'s choices: the dense poolings, and SPLADE from the masked-LM head."""
SPLADE_STRATEGIES = ("max", "sum")
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")


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


@dataclass(frozen=True)
class SpladeSpec:
    """How masked-LM logits become one sparse vector over the vocabulary: sentence-transformers'
    ``SpladePooling`` (its config keys) and ``SparseEncoder``'s ``max_active_dims``."""

    pooling_strategy: str = "max"
    """How each vocabulary entry's per-token weights are joined: max (SPLADE v2 and later) or sum
    (the first SPLADE)."""
    activation_function: str = "relu"
    """Per token weight: relu gives log(1 + relu(logit)); log1p_relu takes log(1 + .) once more
    (OpenSearch's SPLADE models)."""
    max_active_dims: int | None = None
    """Keep only the largest this many entries of each vector (none: every non-zero one)."""

    def __post_init__(self) -> None:
        if self.pooling_strategy not in SPLADE_STRATEGIES:
            raise ConfigError(
                f"SPLADE pooling strategy must be one of {', '.join(SPLADE_STRATEGIES)}, "
                f"got {self.pooling_strategy!r}"
            )
        if self.activation_function not in SPLADE_ACTIVATIONS:
            raise ConfigError(
                f"SPLADE activation must be one of {', '.join(SPLADE_ACTIVATIONS)}, "
                f"got {self.activation_function!r}"
            )
        k = self.max_active_dims
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ConfigError(f"max active dims must be a positive integer, got {k!r}")


def splade_pool(
    logits: torch.Tensor,
    attention_mask: torch.Tensor,
    strategy: str = "max",
    activation: str = "relu",
) -> torch.Tensor:
    """logits (B, T, V), attention_mask (B, T) -> (B, V) non-negative weights.

    Each token weighs vocabulary entry v by log(1 + relu(logit_v)) (``log1p_relu``: log1p once
    more), and the real tokens' weights are joined by max or sum: padding adds nothing, [CLS]
    and [SEP] count as any token, as in sentence-transformers' ``SpladePooling``. Example: one
    text whose two tokens have logits [2, -1] and [0, 3] -> max [log 3, log 4]."""
    weights = torch.log1p(torch.relu(logits))
    if activation == "log1p_relu":
        weights = torch.log1p(weights)
    elif activation != "relu":
        raise ValueError(
            f"SPLADE activation must be one of {SPLADE_ACTIVATIONS}, got {activation!r}"
        )
    weights = weights.masked_fill(attention_mask[..., None] == 0, 0.0)  # (B, T, V)
    if strategy == "max":
        return weights.amax(1)
    if strategy == "sum":
        return weights.sum(1)
    raise ValueError(
        f"SPLADE pooling strategy must be one of {SPLADE_STRATEGIES}, got {strategy!r}"
    )


@dataclass(frozen=True)
class LayerSpec:
    """Which hidden layers make the token vectors (the feature-based approach)."""

    layers: tuple[int, ...] = ()
    """Hidden layers to use, e.g. -1 -2 -3 -4 (-1 the last, 0 the embeddings; none given: the last layer)."""
    layer_combine: str = "concat"
    """How the --layers are joined: concat (len(layers) x H values), sum or mean (H values)."""

    def __post_init__(self) -> None:
        if self.layer_combine not in LAYER_COMBINES:
            raise ConfigError(
                f"layer combine must be one of {', '.join(LAYER_COMBINES)}, got {self.layer_combine!r}"
            )

    def check(self, num_hidden_layers: int) -> None:
        """ConfigError unless every layer exists in a model of ``num_hidden_layers`` layers
        (``hidden_states`` holds those plus the embeddings), before any input is read."""
        n = num_hidden_layers + 1
        bad = [i for i in self.layers if not -n <= i < n]
        if bad:
            raise ConfigError(
                f"layers {bad} are out of range: the model has {n} "
                f"({num_hidden_layers} layers + the embeddings), so -{n}..{n - 1}"
            )

    def width(self, hidden: int) -> int:
        n = len(self.layers) or 1
        return hidden * n if self.layer_combine == "concat" else hidden
