"""A run's wall-clock deadline (``TrainConfig.end_by``): when the updates left would end past it,
the schedule's total shrinks so that the decay still ends at zero, on time.

At each log line the Trainer asks :meth:`DeadlineSchedule.check` for a new total. The rate is
measured from this process's first log line (so the first window's start-up, kernel creation and
prefetch, does not count), evaluations and checkpoints included, over two windows at least; the
longest evaluation-and-checkpoint pause so far is kept back for the final evaluation (or, when
more, ``reserve_updates`` at the measured rate plus ``reserve_seconds``: work after the last
update the loop does not time). The decay is
linear, so a shrink steps the learning rate down once (to what the shorter schedule has at this
update) and it still reaches zero at the last update. A run of one segment keeps its warmup's
share (:func:`shrink`), so a run cut inside its warmup still decays; a second segment's warmup
is never cut into, nor the last phase's first update; never longer.

Two windows can be a long time when updates are slow (ten-second updates logged every ten: the
first decision at update 30, five minutes in). So until that first decision a **guard** looks at
each log line: when the updates left up to the first decision would take more than half the time
left, the run shrinks to what fits at the rate of the one window since the first log line, or, at
the first log line itself, at ``GUARD_MARGIN`` times the rate since the process's first update
ended (start-up left out; early updates are the slow ones, kernels being created for each new
shape, so this estimate is generous on purpose). The decisions that follow may shrink it further.

Worked example (log every 2, no pause, 1 s per update, first log line at update 2 and 1002 s,
deadline 1020.5 s, 40 updates planned): at update 6 (1006 s) 14.5 s are left, 14 updates fit,
which is fewer than the 34 planned: the total becomes 6 + int(14.5 * 0.98) = 20.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bertkit.training import distributed as D
from bertkit.training.schedule import ScheduleConfig
from bertkit.training.settings import Phase

if TYPE_CHECKING:
    import torch

    from bertkit.training.loop import Trainer

GUARD_MARGIN = 2.0
"""How many times faster than its first updates the guard assumes a run's rest will be."""

DEADLINE_SLACK = 0.02
"""The share of the updates that still fit which a shrink gives up, so that a rate a little
slower at the next log line does not shorten the schedule again by an update or two."""


SAVE_BYTES_PER_S = 50e6
"""The write rate a deadline assumes for saving the model after the last scoring: a third of
the slowest measured here (BERT-Base's 438 MB of fp32 weights saved in 2.3-4.0 s, fsync
included, on the 2-core KVM Xeon, 2026-12-05)."""
SAVE_FLOOR_S = 1.0
"""Seconds kept back for a save besides its bytes (tokenizer files, renames, fsyncs)."""


def save_seconds(model: torch.nn.Module) -> float:
    """Seconds to keep back before a deadline for the last save: by bytes, not by updates (an
    update's time says nothing about a disk; 40 updates, as was kept, are 2.5 minutes of
    BERT-Base updates on 2 CPU cores, and 4 s on a GPU)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return SAVE_FLOOR_S + weights / SAVE_BYTES_PER_S


@dataclass(frozen=True)
class Shrink:
    """A deadline's decision at log line ``step``: the schedule ends at ``total_steps``, not ``was``."""

    step: int
    total_steps: int
    was: int

    @property
    def message(self) -> str:
        return (
            f"step {self.step}: the time left fits {self.total_steps - self.step} more updates, "
            f"not {self.was - self.step}: the schedule now ends at update {self.total_steps}"
        )

    @property
    def record(self) -> dict[str, Any]:
        """The metrics.jsonl line."""
        return {
            "type": "deadline",
            "step": self.step,
            "total_steps": self.total_steps,
            "was": self.was,
        }


@dataclass
class DeadlineSchedule:
    """The deadline ``end_by`` of one process's run, read on ``clock`` (injectable for tests)."""

    end_by: float
    """The deadline in ``clock`` seconds (``time.time()``: see ``TrainConfig.end_by``)."""
    log_every: int
    """Updates between log lines: the rate is measured over two such windows at least."""
    clock: Callable[[], float] = time.time
    reserve_updates: float = 0.0
    """Updates' worth of time kept back for the work after the last update, when more than the
    longest pause (``TrainConfig.reserve_updates``)."""
    reserve_seconds: float = 0.0
    """Seconds kept back with them (``TrainConfig.reserve_seconds``)."""
    started: tuple[float, int] | None = field(default=None, init=False)
    """(clock, update) at the first log line, where the rate is measured from."""
    pause: float = field(default=0.0, init=False)
    """The longest evaluation-and-checkpoint pause so far: kept back for the final one."""
    first_update: tuple[float, int] | None = field(default=None, init=False)
    """(clock, update) when this process's first update ended: the guard's rate counts from it."""

    def updated(self, step: int) -> None:
        """Update ``step`` ended (the Trainer calls this after each; only the first counts)."""
        if self.first_update is None:
            self.first_update = (self.clock(), step)

    def paused(self, seconds: float) -> None:
        """An evaluation-and-checkpoint pause took ``seconds``."""
        self.pause = max(self.pause, seconds)

    def check(self, step: int, schedule: ScheduleConfig, last_phase_steps: int) -> int | None:
        """At the log line of update ``step``: the total that the schedule must shrink to, or
        None to keep it (the first call only starts the clock)."""
        now = self.clock()
        if self.started is None:
            self.started = (now, step)
        start, first = self.started
        if step - first < 2 * self.log_every:
            return self._guard(now, step, first + 2 * self.log_every, schedule, last_phase_steps)
        return self._fit(now, step, (now - start) / (step - first), schedule, last_phase_steps)

    def _guard(
        self, now: float, step: int, decides_at: int, schedule: ScheduleConfig, last: int
    ) -> int | None:
        """Before the first decision (at update ``decides_at``): a shrink only where waiting
        for it would spend more than half the time left (see the module doc)."""
        (start, first), margin = self.started, 1.0
        if step - first < self.log_every:  # no window yet: the first update's rate, halved
            if self.first_update is None or step <= self.first_update[1]:
                return None
            (start, first), margin = self.first_update, GUARD_MARGIN
        rate = (now - start) / (step - first)
        waiting = (min(decides_at, schedule.total_steps) - step) * rate
        if waiting <= (self.end_by - now - self.pause) / 2:
            return None
        return self._fit(now, step, rate / margin, schedule, last)

    def _fit(
        self, now: float, step: int, rate: float, schedule: ScheduleConfig, last_phase_steps: int
    ) -> int | None:
        """The shrunk total if the updates left at ``rate`` seconds each end past the deadline."""
        keep = max(self.pause, self.reserve_updates * rate + self.reserve_seconds)
        more = max(self.end_by - now - keep, 0.0) / rate
        total = schedule.total_steps
        if step + int(more) >= total:
            return None
        restart = schedule.restart_at + schedule.restart_warmup_steps if schedule.restart_at else 0
        floor = 1 + max(restart, total - last_phase_steps)
        shorter = max(step + int(more * (1 - DEADLINE_SLACK)), floor, step + 1)
        return shorter if shorter < total else None


def shrink(
    schedule: ScheduleConfig, phases: list[Phase] | None, total: int
) -> tuple[ScheduleConfig, list[Phase] | None]:
    """The schedule and phases of a run ended at update ``total``: the last phase and the
    schedule's decay end there, the earlier phases are unchanged (no phases: None). A schedule of
    one segment keeps its warmup's share of the run (rounded up), as if it had been planned with
    ``total`` updates: a cut into the warmup warms up over fewer updates and still decays, where
    keeping the warmup would end the run at its peak learning rate, or past the deadline."""
    cut = schedule.total_steps - total
    warmup = schedule.warmup_steps
    if not schedule.restart_at:
        warmup = -(-warmup * total // schedule.total_steps)
    shorter = dataclasses.replace(schedule, total_steps=total, warmup_steps=warmup)
    if phases is None:
        return shorter, None
    last = phases[-1]
    return shorter, [*phases[:-1], dataclasses.replace(last, steps=last.steps - cut)]


def meet_deadline(t: Trainer) -> None:
    """Shrink ``t``'s run to what fits before its deadline (rank 0 decides for all ranks)."""
    assert t.deadline is not None
    phases = t.phases  # None for a source of another kind: one stretch
    last = phases[-1].steps if phases is not None else t.schedule.total_steps
    total = t.deadline.check(t.step, t.schedule, last) if t.info.is_main else None
    new = int(D.broadcast_float(float(total or 0), t.info))
    if new:
        done = Shrink(t.step, new, t.schedule.total_steps)
        t.schedule, phases = shrink(t.schedule, phases, new)
        if phases is not None:
            t.phases = phases
        t.log(done.message)
        t.record(done.record)
