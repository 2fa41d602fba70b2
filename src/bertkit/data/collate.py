"""Batches for pre-training: pad to the batch's longest instance, build MLM labels.

Both collators take a list of ``PretrainingDataset`` items and return torch tensors:
``input_ids``, ``token_type_ids``, ``attention_mask`` (B, T) int64, ``labels`` (B, T) int64 with
the original id at predicted positions and -100 elsewhere, ``next_sentence_label`` (B,) int64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bertkit.data.masking import MaskingSpec, derive_rng, mask_tokens

IGNORE_INDEX = -100


def _pad(items: Sequence[dict[str, Any]], pad_token_id: int) -> dict[str, np.ndarray]:
    """Padded numpy arrays (no torch yet) from items holding masked ids and mask positions."""
    b = len(items)
    t = max(len(x["input_ids"]) for x in items)
    input_ids = np.full((b, t), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((b, t), dtype=np.int64)
    attention_mask = np.zeros((b, t), dtype=np.int64)
    labels = np.full((b, t), IGNORE_INDEX, dtype=np.int64)
    nsp = np.zeros(b, dtype=np.int64)
    for r, x in enumerate(items):
        n = len(x["input_ids"])
        input_ids[r, :n] = x["input_ids"]
        token_type_ids[r, :n] = x["token_type_ids"]
        attention_mask[r, :n] = 1
        labels[r, np.asarray(x["masked_positions"], dtype=np.int64)] = x["masked_labels"]
        nsp[r] = x["next_sentence_label"]
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "labels": labels,
        "next_sentence_label": nsp,
    }


def collate_pretraining(items: Sequence[dict[str, Any]], pad_token_id: int = 0) -> dict[str, Any]:
    """Collate statically masked instances into torch tensors (see the module docstring)."""
    import torch

    if not items:
        raise ValueError("cannot collate an empty batch")
    return {k: torch.from_numpy(v) for k, v in _pad(items, pad_token_id).items()}


class DynamicMaskingCollator:
    """Masks unmasked instances at batch time, then collates.

    The masks of instance ``index`` in epoch ``epoch`` come from ``derive_rng(seed, epoch,
    index)``: they change every epoch, yet are reproducible (same batch after a resume, in any
    DataLoader worker, in any batch composition). Call :meth:`set_epoch` at each epoch.
    """

    def __init__(self, spec: MaskingSpec, seed: int, epoch: int = 0, pad_token_id: int = 0) -> None:
        self.spec = spec
        self.seed = seed
        self.epoch = epoch
        self.pad_token_id = pad_token_id

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def mask(self, item: dict[str, Any]) -> dict[str, Any]:
        """One item with fresh masks for (seed, epoch, item['index'])."""
        rng = derive_rng(self.seed, self.epoch, int(item["index"]))
        m = mask_tokens(item["input_ids"], self.spec, rng)
        return {
            **item,
            "input_ids": np.asarray(m.input_ids, dtype=np.int64),
            "masked_positions": np.asarray(m.positions, dtype=np.int64),
            "masked_labels": np.asarray(m.labels, dtype=np.int64),
        }

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return collate_pretraining([self.mask(x) for x in items], self.pad_token_id)


def unmasked(item: dict[str, Any]) -> dict[str, Any]:
    """A statically masked instance with its original tokens put back (no masks)."""
    ids = np.array(item["input_ids"], copy=True)
    ids[item["masked_positions"]] = item["masked_labels"]
    empty = np.zeros(0, dtype=np.int64)
    return {**item, "input_ids": ids, "masked_positions": empty, "masked_labels": empty}


def make_collate(
    dataset: Any, seed: int = 0, dynamic: bool = False
) -> Callable[..., dict[str, Any]]:
    """``collate(items, epochs=None)`` for a ``PretrainingDataset``: its static masks as stored, or,
    for unmasked (dynamic) data, fresh masks keyed by (seed, epoch, instance index), so a batch is
    the same in any composition or resume. ``epochs[i]`` is the data epoch item ``i`` is drawn in
    (None: epoch 0 for every item).

    ``dynamic=True`` re-masks statically masked data too (RoBERTa's dynamic masking at training
    time, ``bertkit pretrain --dynamic-masking``): the stored masks are undone and new ones drawn
    with the data's masking settings, per epoch.
    """
    pad = dataset.pad_token_id
    if not dataset.dynamic_masking and not dynamic:
        return lambda items, epochs=None: collate_pretraining(items, pad)
    masker = DynamicMaskingCollator(dataset.masking_spec(), seed, 0, pad)
    restore = not dataset.dynamic_masking

    def collate(items: Sequence[dict[str, Any]], epochs: Sequence[int] | None = None) -> dict:
        masked = []
        for item, epoch in zip(items, epochs or [0] * len(items), strict=True):
            masker.set_epoch(epoch)
            masked.append(masker.mask(unmasked(item) if restore else item))
        return collate_pretraining(masked, pad)

    return collate
