"""Cached contrastive encoding (GradCache, Gao et al. 2021): a large batch's in-batch negatives in
the activation memory of a small mini-batch (sentence-transformers'
``CachedMultipleNegativesRankingLoss``).

A ranking loss couples every row of its batch, so the batch cannot be cut into micro-batches
without losing negatives; but it depends on the encoder only through the (R, H) pooled vectors.
:func:`cached_vectors` therefore

1. encodes the rows in chunks of ``size`` rows with no autograd graph, keeping the RNG state
   (CPU, and the device's) each chunk started from, and returns the concatenated vectors as a
   tensor that requires grad (the caller computes the loss on it: its backward stops there
   with d loss / d vectors);
2. in that backward, re-encodes each chunk with grad under its saved RNG state (the same
   dropout masks) and the forward's autocast state, and back-propagates the chunk's slice of
   d loss / d vectors into the parameters.

The parameter gradients are then the one-pass ones (to float rounding), and only one chunk's
activations are alive at a time. This lives in the model's forward (an autograd function whose
backward runs the second pass, as reentrant activation checkpointing does), so the update step
stays generic: its one ``backward()`` -- through the GradScaler's scale for fp16, which the
incoming gradient already carries -- drives both passes. Each chunk's backward accumulates into
the parameters' ``.grad`` separately, which DDP's one-reduction-per-backward hooks do not allow:
the model says so (``BiEncoder.multi_pass_backward``), and under DDP the update step runs its
backward with DDP's reduction off and averages the gradients over ranks itself, once per update
(:mod:`bertkit.training.update`).

Cost: every row is encoded twice (one extra forward, about a third more compute).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from bertkit.model.batching import Layout
from bertkit.model.batching import layout as layout_from_mask

Chunk = dict[str, Any]
"""One chunk's keyword inputs for the encoder (input_ids, attention_mask, token_type_ids,
layout)."""


def row_chunks(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    layout: Layout | None,
    size: int,
) -> list[Chunk]:
    """The (R, T) rows cut into chunks of ``size`` rows, each cut to its own longest row with
    its :class:`Layout` worked out on the CPU from the batch's lengths (prefix layouts; any
    other is passed on whole with no layout, and the encoder works it out)."""
    lengths = layout.lengths if layout is not None else None
    if layout is not None and not layout.prefix:
        lengths = None
    out = []
    for start in range(0, input_ids.shape[0], size):
        rows = slice(start, start + size)
        chunk: Chunk = {
            "input_ids": input_ids[rows],
            "attention_mask": attention_mask[rows],
            "token_type_ids": None if token_type_ids is None else token_type_ids[rows],
            "layout": None,
        }
        if lengths is not None:
            lens = lengths[rows]
            T = max(lens)
            chunk = {k: v[:, :T] if v is not None else None for k, v in chunk.items()}
            mask = torch.arange(T)[None, :] < torch.tensor(lens)[:, None]  # (r, T) on the CPU
            chunk["layout"] = layout_from_mask(mask).to(input_ids.device)
        out.append(chunk)
    return out


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


@contextmanager
def _replayed(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> Iterator:
    """The global RNG set to ``state`` inside, restored after (dropout draws as before)."""
    cpu, cuda = state
    with torch.random.fork_rng(devices=[device] if cuda is not None else []):
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)
        yield


class _Cached(torch.autograd.Function):
    """Forward: the no-grad chunked pass. Backward: the with-grad replay, chunk by chunk (see
    the module docstring); ``anchor`` is an empty tensor that requires grad, so that autograd
    calls the backward at all (the parameters get their gradients from the replay)."""

    @staticmethod
    def forward(ctx, anchor, encode, chunks, device):  # type: ignore[override]
        ctx.encode, ctx.chunks, ctx.device = encode, chunks, device
        ctx.autocast = (
            torch.is_autocast_enabled(device.type),
            torch.get_autocast_dtype(device.type),
        )
        ctx.states = []
        parts = []
        for chunk in chunks:  # autograd functions run their forward with grad off
            ctx.states.append(_rng_state(device))
            parts.append(encode(chunk))
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        enabled, dtype = ctx.autocast
        start = 0
        for chunk, state in zip(ctx.chunks, ctx.states, strict=True):
            with (
                torch.enable_grad(),
                _replayed(state, ctx.device),
                torch.autocast(ctx.device.type, dtype=dtype, enabled=enabled),
            ):
                vectors = ctx.encode(chunk)
            rows = vectors.shape[0]
            torch.autograd.backward(vectors, grad[start : start + rows])
            start += rows
        return None, None, None, None


def cached_vectors(
    encode: Callable[[Chunk], torch.Tensor], chunks: Sequence[Chunk], device: torch.device
) -> torch.Tensor:
    """The concatenated ``encode(chunk)`` vectors, each chunk encoded without a graph now and
    again with one, under the same RNG state, when the result is back-propagated (module
    docstring). ``encode`` must return float vectors (r, H) for a chunk of r rows."""
    anchor = torch.empty(0, requires_grad=True)
    return _Cached.apply(anchor, encode, list(chunks), torch.device(device))
