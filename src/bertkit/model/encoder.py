"""The encoder: a stack of post-LayerNorm transformer layers (attention, then GELU feed-forward)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BertConfig
from bertkit.model.attention import Packing, SelfAttention


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
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class EncoderLayer(nn.Module):
    """x = LN(x + Dropout(Attn(x))); x = LN(x + Dropout(FFN(x))): the paper's post-LN residuals."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention(x, packing)))
        return self.output_norm(x + self.dropout(self.feed_forward(x)))


class Encoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, packing)
        return x
