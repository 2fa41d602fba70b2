"""Pre-training's data order as a :class:`~bertkit.training.loop.Trainer`'s batch source: phases.

The phases run in turn (BERT: most updates at length 128, then 512). Each phase is a stream of
examples that is a pure function of (seed, phase, examples consumed)
(:mod:`bertkit.training.sharding`), so the source's whole state is its cursor: the phase and the
position in its stream, which a checkpoint keeps (:mod:`bertkit.training.resume`). A skipped
update consumes its batch; the phase of an update follows the count of successful updates, and a
phase's stream starts at 0 when that count enters it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bertkit.errors import ConfigError
from bertkit.training import distributed as D
from bertkit.training import sharding as S
from bertkit.training.settings import Collate, Phase, TrainConfig
from bertkit.training.update import MicroBatch

Key = tuple[int, int]
"""(phase index, position in its stream)."""


class PhaseBatches:
    """``phases`` in turn; ``collate`` makes a CPU batch of a phase's examples (unless the phase
    has its own). ``log`` is told when a phase starts."""

    def __init__(
        self,
        phases: list[Phase],
        collate: Collate | None,
        config: TrainConfig,
        info: D.DistInfo,
        log: Callable[[str], None],
    ) -> None:
        self.phases, self.collate, self.cfg, self.info, self._log = (
            phases,
            collate,
            config,
            info,
            log,
        )
        parts = config.grad_accum * info.world_size
        for i, p in enumerate(phases):
            if p.collate is None and collate is None:
                raise ConfigError(f"phase {p.name!r} has no collate function, nor has the run")
            if self.batch_size(i) % parts:
                raise ConfigError(
                    f"batch size {self.batch_size(i)} must be divisible by "
                    f"grad_accum x world size = {parts}"
                )
        self.phase_index = 0
        self.position = 0
        """Examples of the current phase's stream consumed (all ranks together)."""

    def phase_at(self, step: int) -> tuple[int, Phase]:
        """The phase of the update after ``step`` successful ones (past the end: the last)."""
        i = S.phase_of([p.steps for p in self.phases], step)
        return i, self.phases[i]

    def batch_size(self, phase_index: int) -> int:
        return self.phases[phase_index].batch_size or self.cfg.batch_size

    def next_key(self, step: int) -> Key:
        """The key of the update after ``step`` successful ones (entering a phase starts its
        stream)."""
        index, phase = self.phase_at(step)
        if index != self.phase_index:
            self.phase_index, self.position = index, 0
            self._log(f"step {step}: starting {phase.name}")
        return self.phase_index, self.position

    def upcoming(self, step: int, count: int) -> list[Key]:
        """The keys of the ``count`` updates after the next one, should every one succeed."""
        sizes = [self.batch_size(i) for i in range(len(self.phases))]
        steps = [p.steps for p in self.phases]
        return S.upcoming(steps, sizes, step, self.phase_index, self.position, count)

    def advance(self) -> None:
        """Move past the next batch (trained on or skipped: either way it is consumed)."""
        self.position += self.batch_size(self.phase_index)

    def make(
        self, key: Key, prepare: Callable[[dict[str, torch.Tensor]], MicroBatch]
    ) -> list[MicroBatch]:
        """This rank's ``grad_accum`` micro-batches of the update at ``key``
        (:func:`bertkit.training.sharding.update_micro_batches`: a pure function of the key)."""
        phase_index, position = key
        phase, cfg = self.phases[phase_index], self.cfg
        collate = phase.collate or self.collate
        assert collate is not None  # checked at construction
        return [
            prepare(collate(examples, epochs))
            for examples, epochs in S.update_micro_batches(
                phase,
                phase_index,
                position,
                self.batch_size(phase_index),
                cfg.seed,
                cfg.grad_accum,
                cfg.shard_window,
                self.info,
            )
        ]
