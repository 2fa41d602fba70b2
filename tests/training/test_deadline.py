"""The deadline schedule (training/deadline.py), exactly, on a fake clock; and through the Trainer
where only the Trainer can show it (resuming a run the deadline shortened)."""

from __future__ import annotations

import pytest

from bertkit.training.deadline import DeadlineSchedule, Shrink, shrink
from bertkit.training.schedule import ScheduleConfig
from bertkit.training.settings import Phase

FORTY = ScheduleConfig(40, 2)


class Clock:
    """A clock that reads what the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def started(end_by: float, *, step: int = 2, now: float = 1002.0) -> tuple[DeadlineSchedule, Clock]:
    """A deadline whose first log line (log every 2) was update ``step`` at ``now``."""
    clock = Clock(now)
    deadline = DeadlineSchedule(end_by, 2, clock)
    assert deadline.check(step, FORTY, 40) is None  # the first line only starts the clock
    assert deadline.started == (now, step)
    return deadline, clock


def at(deadline: DeadlineSchedule, clock: Clock, step: int, now: float, **kw) -> int | None:
    clock.now = now
    return deadline.check(step, kw.get("schedule", FORTY), kw.get("last", 40))


def test_the_worked_example_shrinks_to_what_fits_less_the_slack():
    deadline, clock = started(1020.5)
    assert at(deadline, clock, 4, 1004.0) is None  # one window since the first line: no rate yet
    # 1 s per update, 14.5 s left at update 6: 14 fit, 2% given up: 6 + int(14.21)
    assert at(deadline, clock, 6, 1006.0) == 20


def test_the_longest_pause_is_kept_back_for_the_final_evaluation():
    deadline, clock = started(1020.5)
    deadline.paused(5.0)
    deadline.paused(2.0)  # shorter: the longest pause is kept
    assert deadline.pause == 5.0
    # 14.5 s left less the 5 s pause: 9.5 updates fit, 6 + int(9.5 * 0.98) = 15 (no pause: 20)
    assert at(deadline, clock, 6, 1006.0) == 15


def test_an_exact_fit_keeps_the_schedule_and_half_an_update_short_shrinks_it():
    deadline, clock = started(1040.0)
    assert at(deadline, clock, 6, 1006.0) is None  # 34 updates left, exactly 34 s
    deadline, clock = started(1039.5)
    assert at(deadline, clock, 6, 1006.0) == 38  # 33 fit: 6 + int(33.5 * 0.98)


def test_a_past_deadline_ends_at_the_next_update_above_every_floor():
    deadline, clock = started(900.0)
    assert at(deadline, clock, 6, 1006.0) == 7  # nothing fits: the next update ends it
    deadline, clock = started(900.0)
    warm = ScheduleConfig(40, 10)
    assert at(deadline, clock, 6, 1006.0, schedule=warm) == 11  # not inside the warmup
    deadline, clock = started(900.0)
    restart = ScheduleConfig(40, 2, restart_at=20, restart_warmup_steps=5)
    assert at(deadline, clock, 6, 1006.0, schedule=restart) == 26  # nor the second warmup
    deadline, clock = started(900.0)
    assert at(deadline, clock, 6, 1006.0, last=10) == 31  # nor before the last phase's first


def test_a_floor_at_the_planned_end_is_no_shrink():
    deadline, clock = started(900.0)
    # the warmup ends at update 39: the floor is 40, the schedule's own end, so nothing changes
    assert at(deadline, clock, 6, 1006.0, schedule=ScheduleConfig(40, 39)) is None


def test_the_rate_counts_from_the_first_log_line():
    deadline, clock = started(1040.5, step=2, now=1012.0)  # 10 s of start-up before update 2
    # 4 updates in 4 s since (not 14 s for 6): 24.5 s left fit 24, 6 + int(24.5 * 0.98) = 30
    assert at(deadline, clock, 6, 1016.0) == 30


def test_shrink_message_and_record():
    done = Shrink(6, 20, 40)
    assert done.message == (
        "step 6: the time left fits 14 more updates, not 34: the schedule now ends at update 20"
    )
    assert done.record == {"type": "deadline", "step": 6, "total_steps": 20, "was": 40}


def test_shrink_cuts_the_last_phase_of_a_multi_phase_run():
    first, last = Phase([0], 30, "phase 1"), Phase([1], 10, "phase 2", batch_size=4)
    schedule, phases = shrink(ScheduleConfig(40, 2, restart_at=30), [first, last], 35)
    assert schedule == ScheduleConfig(35, 2, restart_at=30)
    assert phases[0] is first
    assert [(p.name, p.steps, p.batch_size) for p in phases] == [
        ("phase 1", 30, None),
        ("phase 2", 5, 4),
    ]


def test_a_shortened_run_resumed_without_a_deadline_runs_its_full_schedule(tmp_path, monkeypatch):
    from .helpers import make_trainer
    from .test_loop import _fake_clock, _records, _train_until

    box: list = []
    _fake_clock(monkeypatch, box)
    box.append(make_trainer(tmp_path / "run", steps=40, log_every=2, end_by=1020.5))
    _train_until(box[0], 10)  # the deadline cut the run to 20 at update 6, then it was killed
    assert _records(tmp_path / "run", "deadline")[0]["total_steps"] == 20
    box[0] = make_trainer(tmp_path / "run", steps=40, log_every=2)
    assert box[0].fit().step == 40
    box[0] = make_trainer(tmp_path / "again", steps=40, log_every=2, end_by=1020.5)
    _train_until(box[0], 10)
    box[0] = make_trainer(tmp_path / "again", steps=40, log_every=2, end_by=1e12)
    assert box[0].fit().step == 20  # with a deadline (however far) the shortened run stays short


@pytest.mark.parametrize(("seconds", "total"), [(0.0, 30), (3.0, 16)])
def test_the_pause_is_measured_through_the_trainer(tmp_path, monkeypatch, seconds, total):
    """An evaluation that takes ``seconds`` on the trainer's clock counts in the rate and is
    kept back once for the final one."""
    import bertkit.training.loop as loop

    from .helpers import make_trainer
    from .test_loop import _fake_clock, _records

    box: list = []
    _fake_clock(monkeypatch, box)  # 1 s per update
    spent = {"s": 0.0}
    updates = loop.time.time

    def clock() -> float:
        return updates() + spent["s"]

    monkeypatch.setattr(loop.time, "time", clock)
    monkeypatch.setattr(loop.time, "perf_counter", clock)
    box.append(make_trainer(tmp_path / "run", steps=40, log_every=2, eval_every=4, end_by=1030.5))
    original = box[0].evaluate

    def slow_evaluate():
        spent["s"] += seconds
        return original()

    box[0].evaluate = slow_evaluate
    box[0].fit()
    # first line at update 2 (1002 s), the evaluation at update 4; at update 6 (1006 + s):
    # s = 0: 24.5 s left, 6 + int(24.5 * 0.98) = 30; s = 3: 4 updates took 7 s, 21.5 s left
    # less the 3 s kept back fit 18.5 / 1.75 = 10.57 updates, 6 + int(10.57 * 0.98) = 16
    assert _records(tmp_path / "run", "deadline")[0]["total_steps"] == total


def test_reserved_updates_are_kept_back_when_more_than_the_longest_pause():
    """The worked example with 6 updates' worth kept back: 14.5 - 6 s fit 8.5 updates, 6 +
    int(8.5 * 0.98) = 14; a longer pause measured (7 s) is kept back instead: 6 + int(7.35) = 13."""
    clock = Clock(1002.0)
    deadline = DeadlineSchedule(1020.5, 2, clock, reserve_updates=6)
    assert deadline.check(2, FORTY, 40) is None
    assert at(deadline, clock, 4, 1004.0) is None
    assert at(deadline, clock, 6, 1006.0) == 14
    deadline.paused(7.0)
    assert at(deadline, clock, 6, 1006.0) == 13
