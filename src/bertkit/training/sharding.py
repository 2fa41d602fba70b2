"""Which examples every rank sees: the data order of a phase as a function of (seed, position).

The data stream of a phase is the concatenation of per-epoch permutations seeded by
(seed, phase, epoch); update ``u`` takes the next ``global_batch`` examples of that stream and
splits them into ``accum * world`` micro-batches. Each example is seen exactly once per epoch,
whatever the world size, and the whole schedule is a function of (seed, examples consumed), so a
resume needs only that count.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bertkit.training.distributed import DistInfo
    from bertkit.training.settings import Phase


@functools.lru_cache(maxsize=4)  # a pure function; the cache only avoids re-shuffling every step
def epoch_permutation(n: int, seed: int, phase: int, epoch: int) -> np.ndarray:
    """The order of the ``n`` examples in ``epoch`` of ``phase``: a pure function of its arguments."""
    perm = np.random.default_rng([seed, phase, epoch]).permutation(n)
    perm.setflags(write=False)
    return perm


Shards = tuple[tuple[int, int], ...]
"""(start, stop) index ranges of a dataset's shards, in order."""


@functools.lru_cache(maxsize=4)
def shard_local_permutation(
    shards: Shards, seed: int, phase: int, epoch: int, window: int
) -> np.ndarray:
    """A shard-local order of one epoch: the shards shuffled, taken ``window`` at a time, and the
    examples of each window shuffled together. Every example once; a stretch of the stream reads
    from one window of shards (two where it crosses into the next), so each rank caches at most
    ``2 * window`` shards whatever the data's size. With ``window`` >= the number of shards it
    is :func:`epoch_permutation` (the order of small data does not change)."""
    n = shards[-1][1] if shards else 0
    if window >= len(shards):
        return epoch_permutation(n, seed, phase, epoch)
    rng = np.random.default_rng([seed, phase, epoch, window])
    order = rng.permutation(len(shards))
    parts = []
    for w in range(0, len(order), window):
        idx = np.concatenate([np.arange(*shards[k]) for k in order[w : w + window]])
        parts.append(rng.permutation(idx))
    perm = np.concatenate(parts)
    perm.setflags(write=False)
    return perm


def global_batch_indices(
    n: int,
    start: int,
    size: int,
    seed: int,
    phase: int,
    shards: Shards | None = None,
    window: int | None = None,
) -> tuple[np.ndarray, list[int]]:
    """Examples ``start .. start+size`` of the phase's stream, and the epoch of each.

    The stream is ``perm(epoch 0) ++ perm(epoch 1) ++ ...``; a batch that crosses an epoch boundary
    takes the end of one permutation and the start of the next, so nothing is dropped or repeated.
    ``perm`` is :func:`epoch_permutation`, or with ``shards`` and ``window``
    :func:`shard_local_permutation` (bounded memory on large data).
    """
    idx: list[int] = []
    epochs: list[int] = []
    pos = start
    while len(idx) < size:
        epoch, offset = divmod(pos, n)
        if shards is not None and window is not None:
            perm = shard_local_permutation(shards, seed, phase, epoch, window)
        else:
            perm = epoch_permutation(n, seed, phase, epoch)
        take = perm[offset : offset + size - len(idx)]
        idx.extend(int(i) for i in take)
        epochs.extend([epoch] * len(take))
        pos += len(take)
    return np.asarray(idx, dtype=np.int64), epochs


def phase_of(steps: Sequence[int], step: int) -> int:
    """The phase of update ``step`` for phases of ``steps`` updates each (past the end: the last).

    >>> [phase_of([2, 3], s) for s in range(6)]
    [0, 0, 1, 1, 1, 1]
    """
    end = 0
    for i, n in enumerate(steps):
        end += n
        if step < end:
            return i
    return len(steps) - 1


def upcoming(
    steps: Sequence[int], sizes: Sequence[int], step: int, phase: int, position: int, count: int
) -> list[tuple[int, int]]:
    """The (phase, position) keys of the ``count`` updates after update ``step``, which starts
    at example ``position`` of ``phase``'s stream (``sizes``: each phase's examples per update;
    a new phase's stream starts at 0).

    >>> upcoming([2, 3], [8, 4], 0, 0, 0, 3)
    [(0, 8), (1, 0), (1, 4)]
    """
    keys, position = [], position + sizes[phase]
    for s in range(step + 1, step + 1 + count):
        nxt = phase_of(steps, s)
        if nxt != phase:
            phase, position = nxt, 0
        keys.append((phase, position))
        position += sizes[phase]
    return keys


def micro_batch(batch: np.ndarray, micro: int, accum: int, info: DistInfo) -> np.ndarray:
    """This rank's share of micro-step ``micro`` (0-based, < accum) of a global batch.

    The global batch is cut into ``accum * world`` equal slices; micro-step j of rank r takes
    slice ``j * world + r``.
    """
    parts = accum * info.world_size
    if len(batch) % parts:
        raise ValueError(f"global batch {len(batch)} is not divisible by accum*world={parts}")
    size = len(batch) // parts
    k = micro * info.world_size + info.rank
    return batch[k * size : (k + 1) * size]


def rank_share(batch: Sequence[int], info: DistInfo, micro: int = 0, accum: int = 1) -> list[int]:
    """This rank's part of micro-step ``micro`` (0-based, < ``accum``) of a batch of any size
    (fine-tuning, whose last batch is smaller): the batch is cut into ``accum * world``
    contiguous slices whose sizes differ by at most one, and micro-step j of rank r takes slice
    ``k = j * world + r``, ``batch[k*n//parts : (k+1)*n//parts]`` (the order of
    :func:`micro_batch`); together they take each index exactly once (a slice is empty when the
    batch is smaller than ``accum * world``)."""
    n, parts = len(batch), accum * info.world_size
    k = micro * info.world_size + info.rank
    return list(batch[k * n // parts : (k + 1) * n // parts])


def update_micro_batches(
    phase: Phase,
    phase_index: int,
    position: int,
    batch_size: int,
    seed: int,
    accum: int,
    shard_window: int,
    info: DistInfo,
) -> list[tuple[list, list[int]]]:
    """This rank's ``accum`` micro-batches of the update at ``position`` of a phase, as
    (examples, the data epoch of each) to collate: a pure function of its arguments."""
    batch, epochs = global_batch_indices(
        len(phase.dataset), position, batch_size, seed, phase_index, phase.shards, shard_window
    )
    epochs_arr = np.asarray(epochs, dtype=np.int64)
    out = []
    for j in range(accum):
        idx = micro_batch(batch, j, accum, info).tolist()
        ep = micro_batch(epochs_arr, j, accum, info).tolist()
        out.append(([phase.dataset[i] for i in idx], ep))
    return out
