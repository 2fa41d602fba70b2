"""Batch dictionaries: padding and conversion to numpy arrays or torch tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.tokenizer.encoding import Encoding


def flatten(encodings: Sequence[Encoding], with_overflow: bool) -> tuple[list[Encoding], list[int]]:
    """Each encoding followed by its overflow windows, and the input index of each."""
    out: list[Encoding] = []
    sample: list[int] = []
    for i, enc in enumerate(encodings):
        out.append(enc)
        sample.append(i)
        if with_overflow:
            out.extend(enc.overflowing)
            sample.extend([i] * len(enc.overflowing))
    return out, sample


def batch_dict(
    encodings: Sequence[Encoding],
    *,
    pad_id: int,
    padding: str | bool,
    max_length: int | None,
    return_token_type_ids: bool = True,
    return_attention_mask: bool = True,
    return_overflowing_tokens: bool,
    return_offsets_mapping: bool,
    return_special_tokens_mask: bool,
    return_tensors: str | None,
) -> dict[str, Any]:
    """Hugging Face-style batch: keys ``input_ids``, ``token_type_ids``, ``attention_mask``
    (unless turned off; + requested extras), each a list of rows, an int64 array (``"np"``) or
    a tensor (``"pt"``).

    Padding (right side) uses ``pad_id``, type 0, attention 0, special mask 1, offset (0, 0).
    """
    encs, sample = flatten(encodings, return_overflowing_tokens)
    if padding is True:
        padding = "longest"
    if padding == "max_length":
        if max_length is None:
            raise ValueError("padding='max_length' needs max_length")
        width = max_length
    elif padding == "longest":
        width = max((len(e) for e in encs), default=0)
    elif padding is False or padding is None or padding == "do_not_pad":
        width = None
    else:
        raise ValueError(f"unknown padding {padding!r}; expected 'longest', 'max_length' or False")

    def pad(rows: list[list[Any]], value: Any) -> list[list[Any]]:
        if width is None:
            return rows
        return [r + [value] * (width - len(r)) if len(r) < width else r for r in rows]

    out: dict[str, Any] = {"input_ids": pad([e.input_ids for e in encs], pad_id)}
    if return_token_type_ids:
        out["token_type_ids"] = pad([e.token_type_ids for e in encs], 0)
    if return_attention_mask:
        out["attention_mask"] = pad([e.attention_mask for e in encs], 0)
    if return_special_tokens_mask:
        out["special_tokens_mask"] = pad([e.special_tokens_mask for e in encs], 1)
    if return_offsets_mapping and return_tensors is None:
        out["offset_mapping"] = pad([list(e.offsets) for e in encs], (0, 0))
    if return_overflowing_tokens:
        out["overflow_to_sample_mapping"] = sample
    if return_tensors is None:
        return out
    lengths = {len(r) for r in out["input_ids"]}
    if len(lengths) > 1:
        raise ValueError(
            f"rows have different lengths {sorted(lengths)}; use padding='longest' (or "
            "truncation with max_length) to return tensors"
        )
    arrays = {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}
    if return_offsets_mapping:
        # straight from the flat uint32 offsets: no (start, end) tuples are built
        offsets = np.zeros((len(encs), lengths.pop() if lengths else 0, 2), dtype=np.int64)
        for row, e in zip(offsets, encs, strict=True):
            flat = np.frombuffer(e.flat_offsets, dtype=np.uint32).reshape(-1, 2)
            row[: len(flat)] = flat
        arrays["offset_mapping"] = offsets
    if return_tensors == "np":
        return arrays
    if return_tensors == "pt":
        import torch

        return {k: torch.from_numpy(v) for k, v in arrays.items()}
    raise ValueError(f"unknown return_tensors {return_tensors!r}; expected 'np', 'pt' or None")


@dataclass
class TokenArrays:
    """A batch of encodings as flat arrays (what corpus preparation stores).

    Row ``i`` is ``input_ids[row_splits[i]:row_splits[i + 1]]`` (specials included), with the
    same slice of ``token_type_ids`` and ``offsets`` (character spans, (0, 0) for specials).
    """

    input_ids: np.ndarray  # (N,) int32
    token_type_ids: np.ndarray  # (N,) int8
    offsets: np.ndarray  # (N, 2) int32
    row_splits: np.ndarray  # (B + 1,) int64

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    def row(self, i: int) -> np.ndarray:
        """Token ids of row ``i``."""
        return self.input_ids[self.row_splits[i] : self.row_splits[i + 1]]
