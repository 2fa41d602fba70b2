"""A run's wall-clock deadline (``TrainConfig.end_by``): when the updates left would end past it,
the schedule's total shrinks so that the decay still ends at zero, on time.

At each log line the Trainer asks :meth:`DeadlineSchedule.check` for a new total. The rate is
measured from this process's first log line (so the first window's start-up, kernel creation and
prefetch, does not count), evaluations and checkpoints included, over two windows at least; the
longest evaluation-and-checkpoint pause so far is kept back for the final evaluation (or, when
more, ``reserve_updates`` at the measured rate: work after the last update the loop does not time). The decay is
linear, so a shrink steps the learning rate down once (to what the shorter schedule has at this
update) and it still reaches zero at the last update. Never below the last phase's first update,
nor into a warmup; never longer.

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
    from bertkit.training.loop import Trainer

DEADLINE_SLACK = 0.02
"""The share of the updates that still fit which a shrink gives up, so that a rate a little
slower at the next log line does not shorten the schedule again by an update or two."""


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
    started: tuple[float, int] | None = field(default=None, init=False)
    """(clock, update) at the first log line, where the rate is measured from."""
    pause: float = field(default=0.0, init=False)
    """The longest evaluation-and-checkpoint pause so far: kept back for the final one."""

    def paused(self, seconds: float) -> None:
        """An evaluation-and-checkpoint pause took ``seconds``."""
        self.pause = max(self.pause, seconds)

    def check(self, step: int, schedule: ScheduleConfig, last_phase_steps: int) -> int | None:
        """At the log line of update ``step``: the total that the schedule must shrink to, or
        None to keep it (the first call only starts the clock)."""
        now = self.clock()
        if self.started is None:
            self.started = (now, step)
            return None
        start, first = self.started
        if step - first < 2 * self.log_every:
            return None
        rate = (now - start) / (step - first)
        keep = max(self.pause, self.reserve_updates * rate)
        more = max(self.end_by - now - keep, 0.0) / rate
        total = schedule.total_steps
        if step + int(more) >= total:
            return None
        restart = schedule.restart_at + schedule.restart_warmup_steps if schedule.restart_at else 0
        floor = 1 + max(schedule.warmup_steps, restart, total - last_phase_steps)
        shorter = max(step + int(more * (1 - DEADLINE_SLACK)), floor, step + 1)
        return shorter if shorter < total else None


def shrink(
    schedule: ScheduleConfig, phases: list[Phase] | None, total: int
) -> tuple[ScheduleConfig, list[Phase] | None]:
    """The schedule and phases of a run ended at update ``total``: the last phase and the
    schedule's decay end there, the earlier phases are unchanged (no phases: None)."""
    cut = schedule.total_steps - total
    shorter = dataclasses.replace(schedule, total_steps=total)
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
