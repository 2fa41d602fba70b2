"""The module that is traced into ONNX: a head's padded forward pass, with attention written in the
shape ONNX Runtime's BERT fusion recognises.

bertkit's own forward skips padding (packed rows, length groups), which needs data-dependent
shapes a traced graph cannot hold, and runs Q, K and V as one product, which ONNX Runtime's
``Attention`` fusion does not match. The exported graph therefore runs the padded path
(``unpad=False``) and replaces each layer's attention by :class:`FusableAttention`: the same
weights (the fused QKV matrix split in three), the same arithmetic, in the layout of the reference
BERT graph (Q, K, V projections; scores / sqrt(D) + an additive mask built from ``attention_mask``;
softmax; weighted sum). The numbers are bertkit's: the parity tests compare them.

Shape legend: B batch, T tokens, N heads, D head size, H hidden.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from bertkit.model.attention import Packing, Selection, SelfAttention


def _part(linear: nn.Linear, k: int, parts: int) -> nn.Linear:
    """Rows ``k`` of ``parts`` equal slices of ``linear`` as a linear layer of their own."""
    n = linear.out_features // parts
    out = nn.Linear(linear.in_features, n, bias=linear.bias is not None)
    with torch.no_grad():
        out.weight.copy_(linear.weight[k * n : (k + 1) * n])
        if linear.bias is not None:
            out.bias.copy_(linear.bias[k * n : (k + 1) * n])
    return out


class FusableAttention(nn.Module):
    """:class:`SelfAttention` for export, padded layout only (see the module doc)."""

    def __init__(self, attention: SelfAttention) -> None:
        super().__init__()
        self.num_heads, self.head_dim = attention.num_heads, attention.head_dim
        self.query, self.key, self.value = (_part(attention.qkv, k, 3) for k in range(3))
        self.proj = attention.proj

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(
        self, x: torch.Tensor, packing: Packing, select: Selection | None = None
    ) -> torch.Tensor:
        """x (B, T, H) -> (B, T, H), or (K, H) for the selected tokens."""
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, N, T, T)
        if packing.attention_mask is not None:
            keep = packing.attention_mask[:, None, None, :].to(scores.dtype)  # (B, 1, 1, T)
            scores = scores + (1.0 - keep) * torch.finfo(scores.dtype).min
        out = torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, N, T, D)
        out = out.permute(0, 2, 1, 3).contiguous()  # (B, T, N, D)
        out = out.view(*out.shape[:-2], self.num_heads * self.head_dim)  # (B, T, H)
        if select is not None:
            out = out[select.batch, select.token]  # (K, H)
        return self.proj(out)


class ExportGraph(nn.Module):
    """``head(input_ids, attention_mask, token_type_ids)`` -> the tuple of ``outputs``, padded.

    Built on a deep copy of ``head`` (the caller's model is not changed). Position ids are
    computed in the graph (0..T-1 along the last axis), so the sequence axis stays dynamic.
    """

    def __init__(self, head: nn.Module, outputs: tuple[str, ...]) -> None:
        super().__init__()
        self.head = copy.deepcopy(head).eval()
        self.outputs = outputs
        encoder = getattr(self.head, "bert", self.head)
        if not encoder.config.is_decoder:  # a causal mask has no fusable pattern: keep it as is
            for layer in encoder.encoder.layers:
                layer.attention = FusableAttention(layer.attention)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        positions = torch.cumsum(torch.ones_like(input_ids), -1) - 1
        out = self.head(input_ids, attention_mask, token_type_ids, positions, unpad=False)
        return tuple(getattr(out, name) for name in self.outputs)
