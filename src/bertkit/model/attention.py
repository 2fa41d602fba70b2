"""Multi-head self-attention with a fused QKV projection, through scaled_dot_product_attention.

Shape legend: B batch, T tokens (padded length), S real (non-pad) tokens in the whole batch,
N heads, D head size (H = N * D), H hidden size.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertkit import hardware, probes
from bertkit.config import BertConfig
from bertkit.model.dropout import dropout
from bertkit.model.kernels import Linear


@dataclass
class AttentionGroup:
    """Sequences that attend together, padded to their own longest (see ``Packing.group``).

    rows: (S_g,) their tokens' packed rows, sequence by sequence; batch, length: the group's
    (B_g, T_g) layout; key_mask: (B_g, 1, 1, T_g) or None; b, t: (S_g,) each token's place in it.
    """

    rows: torch.Tensor
    batch: int
    length: int
    key_mask: torch.Tensor | None
    b: torch.Tensor
    t: torch.Tensor


@dataclass
class Packing:
    """Where the tokens of a batch live, shared by every layer of one forward pass.

    key_mask: (B, 1, 1, T) bool, True = attend; None when no position is padding.
    indices: (S,) flat positions of the real tokens in (B*T) when activations are packed as
        (S, H) (the unpadded path); None when activations are padded (B, T, H). rows / cols:
        the same positions as (batch, token) index pairs.
    groups: when set (``group``), attention runs group by group on the packed rows; regroup:
        (S,) the order that puts the groups' concatenated outputs back into packed order.
    """

    batch: int
    length: int
    key_mask: torch.Tensor | None = None
    indices: torch.Tensor | None = None
    rows: torch.Tensor | None = None
    cols: torch.Tensor | None = None
    groups: list[AttentionGroup] | None = None
    regroup: torch.Tensor | None = None
    causal: bool = False
    """Each query attends to its own and earlier positions only (``config.is_decoder``)."""
    attention_mask: torch.Tensor | None = None
    """The caller's (B, T) mask, kept for the pooler's choice of token."""
    cu_seqlens: torch.Tensor | None = None
    """(B + 1,) int32 starts of the sequences among the packed rows (prefix layout only)."""
    max_seqlen: int = 0

    def set_indices(self, indices: torch.Tensor) -> None:
        """Pack: ``indices`` (S,) flat positions; rows / cols are their (batch, token) pairs."""
        self.indices = indices
        self.rows = torch.div(indices, self.length, rounding_mode="floor")
        self.cols = indices - self.rows * self.length

    def group(self, lengths: Sequence[int] | torch.Tensor, parts: int = 4) -> None:
        """Let attention run on up to ``parts`` groups of sequences of similar length, each
        padded to its own longest, when that cuts the padded attention area (B T^2) by at least a
        quarter. Needs the packed layout (``set_indices`` first) in prefix order; ``lengths``
        (B,) real tokens, as Python ints from the :class:`~bertkit.model.batching.Layout` (a
        tensor is read back once).

        The dense layers already skip padding; this does the same for the T x T score matrices,
        which on one padded batch of lengths 8..128 are ~2.8x larger than the sum of the real
        ones. A token's attention output does not depend on where its sequence sits, so every
        group moves its tokens to a prefix layout (left padding is fine too). The CPU's path:
        the index tensors are built from Python ints, no value is read back from a tensor; on
        CUDA attention takes the variable-length kernel over the packed tokens instead
        (:func:`packed_attention`).
        """
        n_seq = self.batch
        if self.indices is None or n_seq < 2 * parts:
            return
        lens = lengths.tolist() if isinstance(lengths, torch.Tensor) else [int(n) for n in lengths]
        order = sorted(range(n_seq), key=lambda i: -lens[i])
        size = -(-n_seq // parts)
        chunks = [order[k : k + size] for k in range(0, n_seq, size)]
        if sum(len(c) * lens[c[0]] ** 2 for c in chunks) > 0.75 * n_seq * self.length**2:
            return
        device = self.indices.device
        starts = [0, *itertools.accumulate(lens[:-1])]  # packed row of each sequence's first token
        self.groups = []
        for chunk in chunks:
            T = lens[chunk[0]]
            rows = [r for b in chunk for r in range(starts[b], starts[b] + lens[b])]
            batch = [i for i, b in enumerate(chunk) for _ in range(lens[b])]
            token = [t for b in chunk for t in range(lens[b])]
            mask = None
            if any(lens[b] < T for b in chunk):
                n = torch.tensor([lens[b] for b in chunk])
                mask = (torch.arange(T)[None, :] < n[:, None])[:, None, None, :].to(device)
            idx = torch.tensor([rows, batch, token], dtype=torch.long).to(device)
            self.groups.append(AttentionGroup(idx[0], len(chunk), T, mask, idx[1], idx[2]))
        self.regroup = torch.argsort(torch.cat([g.rows for g in self.groups]))

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(S, F) packed -> (B, T, F) with zeros at padding positions."""
        # Zeros, not garbage, at padding: masked-out keys still multiply their values by 0.
        out = x.new_zeros(self.batch * self.length, x.shape[-1])
        out.index_copy_(0, self.indices, x)  # in place: no second copy of the buffer
        return out.view(self.batch, self.length, x.shape[-1])

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, F) -> (S, F): the real tokens only."""
        return x.reshape(self.batch * self.length, x.shape[-1]).index_select(0, self.indices)


@dataclass
class Selection:
    """The K tokens whose output a layer must produce (the rest are not needed downstream).

    rows: (K,) their rows in the layer's input layout (flat B*T positions when padded, packed
        rows when unpadded); batch, token: (K,) their (b, t) coordinates.
    """

    rows: torch.Tensor
    batch: torch.Tensor
    token: torch.Tensor


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    causal: bool = False,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D), keys where ``mask`` (B, 1, 1, T) is True) v: (B, N, T, D).

    ``causal``: query t also ignores keys after t (sequences start at position 0, padding at the
    end, so this is the left-to-right mask in every layout used here).

    On the CPU in bf16/fp16 (explicitly or under autocast) the kernel is a hardware decision
    (:func:`bertkit.hardware.fused_bf16_attention`, probed per machine): torch's fused kernel, or
    two batched matmuls around a softmax (fp32 accumulation, output rounded to bf16, as
    autocast's matmul inputs are). On a 2-core Xeon with AMX (torch 2.13) the fused kernel was
    2-3x slower in forward + backward at 128 tokens, 1.25-1.4x faster at 384-512, and 1.3-4.3x
    faster in inference, most at 256-512 tokens; elsewhere it was measured ~1.7x slower in
    inference too.

    With attention dropout (training) the CPU always takes the two matmuls, whose dropout
    (:mod:`bertkit.model.dropout`) draws 15-bit integers: torch's fused kernel draws a float per
    score. Forward + backward with p = 0.1 on that Xeon, (32, 12, 128, 32) / (8, 12, 384, 32):
    fp32 82 / 243 ms fused, 62 / 195 ms matmuls; bf16 84 / 274 ms fused, 48 / 107 ms matmuls.
    Everywhere else it is ``scaled_dot_product_attention``.
    """
    if causal:
        T = q.shape[-2]
        tril = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()[
            None, None
        ]  # (1, 1, T, T)
        mask = tril if mask is None else mask & tril
    if q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    low = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else q.dtype
    if dropout_p > 0.0:  # the fused kernel's dropout is the slow one (docstring)
        fused = False
    elif low in (torch.bfloat16, torch.float16):
        training = torch.is_grad_enabled() and q.requires_grad
        fused = hardware.fused_bf16_attention(training, *q.shape[-2:])
    else:
        fused = True
    with torch.autocast("cpu", enabled=False):  # keep the softmax in `low` (fp32 inside)
        q, k, v = q.to(low), k.to(low), v.to(low)
        if fused:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        drop = functools.partial(dropout, p=dropout_p) if dropout_p > 0.0 else None
        return probes.two_matmul_attention(q, k, v, mask, drop)


PACKED_BACKENDS = ("varlen", "nested", "reference")


def packed_backend(
    device: torch.device,
    dropout_p: float,
    causal: bool = False,
    dtype: torch.dtype = torch.bfloat16,
) -> str | None:
    """Which kernel attends over packed tokens on ``device`` (CUDA only; the CPU groups), None
    for the padded path.

    ``varlen`` is FlashAttention's variable-length kernel (``torch.nn.attention.varlen``); it has
    no dropout argument, so a training pass with attention dropout takes ``nested``: SDPA over a
    nested-jagged tensor built on the same ``cu_seqlens``, which reaches the flash / efficient
    kernels with dropout. Both read no value back from the device. Jagged SDPA takes no causal
    mask, so the left-to-right ablation with attention dropout stays padded; so does fp32
    (FlashAttention runs bf16 and fp16 only)."""
    if torch.device(device).type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return None
    if dropout_p == 0.0:
        return "varlen"
    return None if causal else "nested"


def packed_attention(
    qkv: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    heads: int,
    dropout_p: float = 0.0,
    causal: bool = False,
    backend: str = "varlen",
) -> torch.Tensor:
    """Attention of packed tokens, sequence by sequence: qkv (S, 3H) -> (S, H).

    ``cu_seqlens`` (B + 1,) int32 and ``max_seqlen`` come from the collated batch's Layout.
    ``varlen`` and ``nested`` are the CUDA kernels (:func:`packed_backend`); ``nested`` also
    runs on the CPU (SDPA's math path) and ``reference`` is one plain SDPA call per sequence,
    so the CPU tests run the same packing through both against the padded path.
    """
    S, H3 = qkv.shape
    D = H3 // (3 * heads)
    q, k, v = qkv.view(S, 3, heads, D).unbind(1)  # 3 x (S, N, D)
    if backend == "varlen":
        from torch.nn.attention.varlen import varlen_attn

        if dropout_p > 0.0:
            raise ValueError("the varlen kernel has no dropout (use backend='nested')")
        window = (-1, 0) if causal else (-1, -1)
        cu = cu_seqlens.to(torch.int32)
        out = varlen_attn(q, k, v, cu, cu, max_seqlen, max_seqlen, window_size=window)
        return out.reshape(S, heads * D)
    if backend == "nested":
        offsets = cu_seqlens.to(torch.int64)

        def jagged(t: torch.Tensor) -> torch.Tensor:  # (S, N, D) -> (B, N, j, D)
            nt = torch.nested.nested_tensor_from_jagged(
                t.contiguous(), offsets, min_seqlen=1, max_seqlen=max_seqlen
            )
            return nt.transpose(1, 2)

        out = F.scaled_dot_product_attention(
            jagged(q), jagged(k), jagged(v), dropout_p=dropout_p, is_causal=causal
        )
        return out.transpose(1, 2).values().reshape(S, heads * D)
    if backend != "reference":
        raise ValueError(f"backend must be one of {', '.join(PACKED_BACKENDS)}, got {backend!r}")
    outs = []
    bounds = cu_seqlens.tolist()
    for a, b in itertools.pairwise(bounds):
        qs, ks, vs = (t[a:b].transpose(0, 1)[None] for t in (q, k, v))  # (1, N, n, D)
        o = F.scaled_dot_product_attention(qs, ks, vs, dropout_p=dropout_p, is_causal=causal)
        outs.append(o[0].transpose(0, 1).reshape(b - a, heads * D))
    return torch.cat(outs)


class SelfAttention(nn.Module):
    """softmax(Q K^T / sqrt(D) + mask) V over N heads, then the output projection.

    Q, K and V come from one (3H x H) projection: one matmul instead of three.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.qkv = Linear(config.hidden_size, 3 * config.hidden_size)
        self.proj = Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(
        self, x: torch.Tensor, packing: Packing, select: Selection | None = None
    ) -> torch.Tensor:
        """x: (B, T, H) padded, or (S, H) packed when packing.indices is set; returns x's shape,
        or (K, H) for the selected tokens only (keys and values still come from every token)."""
        B, T, N, D = packing.batch, packing.length, self.num_heads, self.head_dim
        qkv = self.qkv(x)  # (B, T, 3H) or (S, 3H)
        p = self.dropout_p if self.training else 0.0
        backend = packed_backend(qkv.device, p, packing.causal, qkv.dtype)
        if packing.cu_seqlens is not None and packing.indices is not None and backend:
            out = packed_attention(
                qkv, packing.cu_seqlens, packing.max_seqlen, N, p, packing.causal, backend
            )
            return self.proj(out if select is None else out.index_select(0, select.rows))
        if packing.groups is not None and select is None:
            return self.proj(self._grouped(qkv, packing))
        if packing.indices is not None:
            # Attention needs the (B, T) layout; only this small tensor is re-padded.
            qkv = packing.pad(qkv)  # (B, T, 3H)
        q, k, v = qkv.view(B, T, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, N, T, D)
        p = self.dropout_p if self.training else 0.0
        out = attend(q, k, v, packing.key_mask, p, packing.causal)
        out = out.transpose(1, 2)  # (B, T, N, D), a view
        if select is not None:
            out = out[select.batch, select.token].reshape(-1, N * D)  # (K, H)
        elif packing.indices is None:
            out = out.reshape(B, T, N * D)  # (B, T, H)
        else:
            # Gather the real tokens straight from the view: one copy instead of two.
            out = out[packing.rows, packing.cols].reshape(-1, N * D)  # (S, H)
        return self.proj(out)

    def _grouped(self, qkv: torch.Tensor, packing: Packing) -> torch.Tensor:
        """(S, 3H) packed -> (S, H): attention group by group (``Packing.group``)."""
        N, D = self.num_heads, self.head_dim
        p = self.dropout_p if self.training else 0.0
        outs = []
        for g in packing.groups or ():
            padded = qkv.new_zeros(g.batch, g.length, qkv.shape[-1])
            padded[g.b, g.t] = qkv.index_select(0, g.rows)  # (B_g, T_g, 3H)
            q, k, v = padded.view(g.batch, g.length, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)
            out = attend(q, k, v, g.key_mask, p, packing.causal)  # (B_g, N, T_g, D)
            outs.append(out.transpose(1, 2)[g.b, g.t].reshape(-1, N * D))  # (S_g, H)
        return torch.cat(outs).index_select(0, packing.regroup)
