"""Length-bucketed batches for inference: sort by length so each batch pads very little."""

from __future__ import annotations

from collections.abc import Sequence

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
