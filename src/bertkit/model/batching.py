"""Batches: length-bucketed batches for inference (sort by length so each batch pads very
little), and a padded batch's :class:`Layout` worked out on the CPU before it reaches a device."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first, so memory peaks early).

    >>> length_batches([3, 9, 4, 8, 2], 2)
    [[1, 3], [2, 0], [4]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def collate(rows: Sequence[Sequence[int]], types: Sequence[Sequence[int]] | None, pad_id: int):
    """Pad id lists to the batch's longest: input_ids, token_type_ids, attention_mask (B, T)."""
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    segs = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[b, : len(row)] = 1
        if types is not None:
            segs[b, : len(row)] = torch.tensor(types[b], dtype=torch.long)
    return {"input_ids": ids, "token_type_ids": segs, "attention_mask": mask}


@dataclass(frozen=True)
class Layout:
    """Where a padded batch's real tokens and labelled positions are, worked out on the CPU at
    collation (:func:`layout`) so that the forward pass never reads a device value back.

    lengths: each sequence's real tokens (prefix layout: padding at the end). indices: (S,)
    flat positions ``b * T + t`` of the real tokens, None when nothing is padding. cu_seqlens:
    (B + 1,) int32 starts of each sequence among the packed tokens (FlashAttention's varlen
    convention); max_seqlen its longest. labelled / targets: (M,) flat positions whose label is
    not -100 and their ids; label_rows: their rows among the packed tokens (the flat positions
    when nothing is padding). ``to`` and ``pin_memory`` move the tensors as a batch's do.
    """

    batch: int
    length: int
    lengths: tuple[int, ...]
    indices: torch.Tensor | None
    cu_seqlens: torch.Tensor
    labelled: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    label_rows: torch.Tensor | None = None
    prefix: bool = True
    """Every row's tokens come first (the mask is 1...1 0...0); cu_seqlens needs it."""

    @property
    def max_seqlen(self) -> int:
        return max(self.lengths, default=0)

    @property
    def padded(self) -> bool:
        return self.indices is not None

    @property
    def tokens(self) -> int:
        """Real (non-pad) tokens."""
        return sum(self.lengths)

    @property
    def masked(self) -> int:
        """Labelled (predicted) positions; 0 for a batch laid out without labels."""
        return 0 if self.labelled is None else int(self.labelled.numel())

    def _map(self, fn) -> Layout:
        moved = {
            k: fn(getattr(self, k)) if getattr(self, k) is not None else None
            for k in ("indices", "cu_seqlens", "labelled", "targets", "label_rows")
        }
        return dataclasses.replace(self, **moved)

    def to(self, device: str | torch.device, non_blocking: bool = False) -> Layout:
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Layout:
        return self._map(lambda t: t.pin_memory())


def layout(attention_mask: torch.Tensor, labels: torch.Tensor | None = None) -> Layout:
    """The :class:`Layout` of a batch from its (B, T) mask (1 = token; prefix layout) and, for
    a masked-LM batch, its (B, T) labels (-100 = not predicted). Meant for CPU tensors (in the
    collating thread); on a device it works but reads the lengths back once.

    A labelled padding position is a ValueError here, on the CPU, instead of a check inside
    the forward pass."""
    mask = attention_mask.to("cpu", torch.bool)
    B, T = mask.shape
    lengths = mask.sum(1)
    prefix = bool((mask == (torch.arange(T)[None, :] < lengths[:, None])).all())
    lens = tuple(int(n) for n in lengths.tolist())
    cu = torch.zeros(B + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0)
    indices = None if all(n == T for n in lens) else mask.reshape(-1).nonzero().squeeze(1)
    labelled = targets = rows = None
    if labels is not None:
        flat = labels.to("cpu").reshape(-1)
        labelled = (flat != -100).nonzero().squeeze(1)
        targets = flat.index_select(0, labelled)
        rows = labelled
        if indices is not None:
            to_row = torch.full((B * T,), -1, dtype=torch.long)
            to_row[indices] = torch.arange(indices.numel())
            rows = to_row[labelled]
            if bool((rows < 0).any()):
                raise ValueError("labels at padding positions (attention_mask 0)")
    return Layout(B, T, lens, indices, cu, labelled, targets, rows, prefix)


def layout_of(attention_mask: torch.Tensor, device: torch.device) -> Layout:
    """:func:`layout` of a mask already on ``device`` (inference, tests), moved back there."""
    return layout(attention_mask).to(device)
