"""The encoder: a stack of post-LayerNorm transformer layers (attention, then GELU feed-forward)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BertConfig
from bertkit.model.attention import Packing, Selection, SelfAttention
from bertkit.model.dropout import Dropout
from bertkit.model.kernels import Linear, linear_gelu


def activation(name: str):
    """The feed-forward nonlinearity named by config.hidden_act ("gelu" is the exact erf form)."""
    if name == "gelu":
        return F.gelu
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    if name == "tanh":
        return torch.tanh
    raise ValueError(f"unknown activation {name!r}")


class FeedForward(nn.Module):
    """up (H -> I), activation, down (I -> H)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.up = Linear(config.hidden_size, config.intermediate_size)
        self.down = Linear(config.intermediate_size, config.hidden_size)
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act is F.gelu and isinstance(self.up, nn.Linear):
            fused = linear_gelu(self.up, x)  # fp32 CPU inference: GELU inside the product
            if fused is not None:
                return self.down(fused)
        return self.down(self.act(self.up(x)))


class EncoderLayer(nn.Module):
    """x = LN(x + Dropout(Attn(x))); x = LN(x + Dropout(FFN(x))): the paper's post-LN residuals."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(
        self, x: torch.Tensor, packing: Packing, select: Selection | None = None
    ) -> torch.Tensor:
        """Same layout in and out; with ``select``, outputs only the K selected tokens (K, H)."""
        attended = self.attention(x, packing, select)
        if select is not None:
            x = x.reshape(-1, x.shape[-1]).index_select(0, select.rows)  # (K, H)
        x = self.attention_norm(x + self.dropout(attended))
        return self.output_norm(x + self.dropout(self.feed_forward(x)))


class Encoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(
        self,
        x: torch.Tensor,
        packing: Packing,
        select: Selection | None = None,
        every_layer: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run every layer; ``select`` applies to the last one only (see BertModel.forward).
        ``every_layer``, when given, receives each layer's output (the feature-based approach)."""
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, packing, select if i == last else None)
            if every_layer is not None:
                every_layer.append(x)
        return x
