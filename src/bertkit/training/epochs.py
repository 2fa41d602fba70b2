"""Fine-tuning's data order as a :class:`~bertkit.training.loop.Trainer`'s batch source: epochs.

Every epoch is a fresh permutation of the training features drawn from one explicit
``torch.Generator`` (the order torch's ``RandomSampler`` + ``BatchSampler`` give for the same
generator, so one seed means the same batches as a reference loop built on them), cut into batches
of ``batch_size`` (the last one may be smaller). ``bucket_batches`` > 1 adds length bucketing: the
shuffled data are cut into chunks of that many batches, sorted by length inside each chunk, cut
into batches, and the batch order is shuffled again (docs/finetune.md: why it is not the default).

Under torchrun every rank draws the same global batches and takes its share, and with
``grad_accum`` > 1 each update's batch is cut further into that many micro-batches, whose
gradients are summed before the optimizer steps (:func:`bertkit.training.sharding.rank_share`:
``grad_accum * world`` slices as even as possible, so a last, small batch is split too). A rank's
micro-batch that is empty runs one example with weight 0, so that every rank runs the same
micro-steps and DDP's collectives match. Each micro-batch's collate gets a ``torch.Generator`` of
its own (:func:`batch_draws`: rerank's in-batch negatives draw from it), seeded by the data
order's seed and the micro-batch's place alone, so that prefetching and resuming draw the same.
The source also keeps what this rank has drawn in the current epoch (count, sum and sum of
squares of the indices), which the caller all-reduces to check that every example was seen
exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from bertkit.training import distributed as D
from bertkit.training import sharding as S
from bertkit.training.update import MicroBatch

Key = tuple[int, int]
"""(epoch, batch index in the epoch), epochs counted from 0."""


def length_bucketed_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, chunk_batches: int
) -> list[list[int]]:
    """Index batches of one epoch: shuffle, sort by length within chunks, shuffle the batches.

    Every index appears exactly once. With ``chunk_batches <= 1`` this is a plain random split
    into consecutive batches of one permutation (the last one may be smaller): the order torch's
    ``RandomSampler`` + ``BatchSampler`` give for the same generator.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if chunk_batches <= 1:
        return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]
    chunk = batch_size * chunk_batches
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i], reverse=True)
        batches.extend(part[k : k + batch_size] for k in range(0, len(part), batch_size))
    perm = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in perm]


def batch_draws(seed: int, key: Key, rank: int, micro: int) -> torch.Generator:
    """The generator the collate of micro-batch ``micro`` of rank ``rank``'s share of the batch
    at ``key`` draws from: a function of its arguments alone (no state to save or restore)."""
    mixed = np.random.SeedSequence([seed, *key, rank, micro]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(mixed))


class EpochBatches:
    """``epochs`` passes over ``features``; ``collate(features, length, draws)`` makes a CPU
    batch of them, ``length`` being the longest of ``lengths`` in the whole update (all
    micro-batches and ranks: what a loss over padding pads to), None for a weight-0 placeholder;
    ``draws``: the micro-batch's :func:`batch_draws`.

    The cursor is the next batch to train on; :meth:`advance` moves past it, and
    :attr:`epoch_ended` tells whether that batch was its epoch's last.
    """

    def __init__(
        self,
        features: Sequence[Any],
        lengths: Sequence[int],
        collate: Callable[[list[Any], int | None], dict[str, torch.Tensor]],
        *,
        batch_size: int,
        epochs: int,
        bucket_batches: int,
        generator: torch.Generator,
        info: D.DistInfo,
        grad_accum: int = 1,
    ) -> None:
        self.features, self.lengths, self.collate = features, lengths, collate
        self.batch_size, self.epochs, self.bucket_batches = batch_size, epochs, bucket_batches
        self.generator, self.info, self.grad_accum = generator, info, grad_accum
        # this rank's micro-batches of each epoch's batches: _drawn[epoch][batch][micro]
        self._drawn: list[list[list[list[int]]]] = []
        self._longest: list[list[int]] = []  # [epoch][batch]: the batch's longest feature
        self._drawing = threading.Lock()  # the prefetching thread draws too
        self.epoch, self.index = 0, 0
        self.seen = [0.0, 0.0, 0.0]
        """This epoch so far: indices drawn by this rank, their sum, the sum of their squares."""

    def _epoch(self, epoch: int) -> list[list[list[int]]]:
        """This rank's micro-batches of one epoch's batches (epochs drawn in order from the
        generator)."""
        with self._drawing:
            while len(self._drawn) <= epoch:
                batches = length_bucketed_batches(
                    self.lengths, self.batch_size, self.generator, self.bucket_batches
                )
                accum = self.grad_accum
                self._longest.append([max(self.lengths[i] for i in b) for b in batches])
                self._drawn.append(
                    [[S.rank_share(b, self.info, j, accum) for j in range(accum)] for b in batches]
                )
            return self._drawn[epoch]

    def _after(self, key: Key) -> Key | None:
        epoch, index = key[0], key[1] + 1
        if index == len(self._epoch(epoch)):
            epoch, index = epoch + 1, 0
        return (epoch, index) if epoch < self.epochs else None

    @property
    def epoch_ended(self) -> bool:
        """Whether the batch :meth:`advance` last moved past was its epoch's last (the cursor
        then stands at the start of the next epoch, or past the end)."""
        return self.index == 0 and self.epoch > 0

    def next_key(self, step: int) -> Key | None:
        """The next batch's key, or None when every epoch is used up (``step``: unused, the
        order does not depend on the updates that succeeded)."""
        return (self.epoch, self.index) if self.epoch < self.epochs else None

    def upcoming(self, step: int, count: int) -> list[Key]:
        """The keys of the ``count`` batches after the next one (fewer at the end)."""
        out: list[Key] = []
        key = self.next_key(step)
        while key is not None and len(out) < count:
            key = self._after(key)
            if key is not None:
                out.append(key)
        return out

    def advance(self) -> None:
        """Move past the next batch (trained on or skipped: either way it is consumed)."""
        if self.epoch_ended:
            self.seen = [0.0, 0.0, 0.0]
        idx = [i for micro in self._epoch(self.epoch)[self.index] for i in micro]
        self.seen = [
            self.seen[0] + len(idx),
            self.seen[1] + sum(idx),
            self.seen[2] + sum(i * i for i in idx),
        ]
        after = self._after((self.epoch, self.index))
        self.epoch, self.index = after if after is not None else (self.epochs, 0)

    def make(
        self, key: Key, prepare: Callable[[dict[str, torch.Tensor]], MicroBatch]
    ) -> list[MicroBatch]:
        """This rank's ``grad_accum`` micro-batches of the update at ``key`` (an empty one: one
        example with weight 0, its counts and tokens zero)."""
        micros = self._epoch(key[0])[key[1]]  # draws the epoch, and its _longest, if need be
        longest = self._longest[key[0]][key[1]]
        out = []
        seed = self.generator.initial_seed()
        for j, idx in enumerate(micros):
            feats = [self.features[i] for i in idx or [0]]
            draws = batch_draws(seed, key, self.info.rank, j)
            micro = prepare(self.collate(feats, longest if idx else None, draws))
            if not idx:
                micro.counts, micro.tokens = [0.0] * len(micro.counts), 0.0
            out.append(micro)
        return out
