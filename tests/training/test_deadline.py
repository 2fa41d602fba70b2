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
    assert at(deadline, clock, 6, 1006.0, schedule=warm) == 7  # inside the warmup: it shrinks too
    deadline, clock = started(900.0)
    restart = ScheduleConfig(40, 2, restart_at=20, restart_warmup_steps=5)
    assert at(deadline, clock, 6, 1006.0, schedule=restart) == 26  # nor the second warmup
    deadline, clock = started(900.0)
    assert at(deadline, clock, 6, 1006.0, last=10) == 31  # nor before the last phase's first


def test_a_floor_at_the_planned_end_is_no_shrink():
    deadline, clock = started(900.0)
    # the last phase is the last update: the floor is 40, the schedule's own end, so nothing changes
    assert at(deadline, clock, 6, 1006.0, last=1) is None


def test_a_shrink_keeps_the_warmups_share_of_a_one_segment_run():
    """MRPC's 3 epochs of 115 updates at batch 32 warm up over 35 (10%): a deadline that leaves
    36 used to keep all 35 (the run ended at its peak learning rate, and could not end sooner);
    now 4 of 36 (rounded up). A second segment's warmups are the deadline's floor instead."""
    schedule, phases = shrink(ScheduleConfig(345, 35), None, 36)
    assert (schedule, phases) == (ScheduleConfig(36, 4), None)
    assert shrink(ScheduleConfig(40, 2), None, 20)[0] == ScheduleConfig(20, 1)
    assert shrink(ScheduleConfig(40, 0), None, 7)[0] == ScheduleConfig(7, 0)
    two = ScheduleConfig(40, 10, restart_at=30, restart_warmup_steps=4)
    assert shrink(two, None, 35)[0] == ScheduleConfig(35, 10, restart_at=30, restart_warmup_steps=4)


def test_the_rate_counts_from_the_first_log_line():
    deadline, clock = started(1040.5, step=2, now=1012.0)  # 10 s of start-up before update 2
    # 4 updates in 4 s since (not 14 s for 6): 24.5 s left fit 24, 6 + int(24.5 * 0.98) = 30
    assert at(deadline, clock, 6, 1016.0) == 30


HUNDRED = ScheduleConfig(100, 2)


def guarded(
    end_by: float, *, first: float = 1001.0, log_every: int = 10
) -> tuple[DeadlineSchedule, Clock]:
    """A deadline whose process's first update (update 1) ended at ``first``."""
    clock = Clock(first)
    deadline = DeadlineSchedule(end_by, log_every, clock)
    deadline.updated(1)
    clock.now = first + 100.0
    deadline.updated(2)  # only the first update counts
    assert deadline.first_update == (first, 1)
    return deadline, clock


def test_the_guard_shrinks_a_slow_run_before_its_first_decision():
    """1 s updates logged every 10, 10 s left at the first log line: the first decision would
    come at update 30, 20 s away, more than half the time left, so the guard shrinks at once to
    what fits at twice the rate (10 + int(20 * 0.98) = 29), and at the next log line, with no
    time left, to the next update (the window's rate); without it the run went on to update 30
    and ended at 31."""
    deadline, clock = guarded(1020.0)
    assert at(deadline, clock, 10, 1010.0, schedule=HUNDRED, last=100) == 29
    assert at(deadline, clock, 20, 1020.0, schedule=ScheduleConfig(29, 2), last=29) == 21


def test_the_guard_keeps_a_run_whose_first_decision_is_near():
    """0.03 s updates logged every 25 with 400 s left: the first decision (update 75) is 1.5 s
    away, so the guard keeps a schedule twice too long, and that decision shrinks it."""
    deadline, clock = guarded(1400.0, first=1000.03, log_every=25)
    plan = ScheduleConfig(26_000, 100)
    assert at(deadline, clock, 25, 1000.75, schedule=plan, last=26_000) is None
    assert at(deadline, clock, 50, 1001.5, schedule=plan, last=26_000) is None
    assert at(deadline, clock, 75, 1002.25, schedule=plan, last=26_000) == 75 + int(
        (1400.0 - 1002.25) / 0.03 * 0.98
    )


def test_the_guard_counts_from_the_first_update_and_assumes_twice_its_rate():
    """Start-up before the first update's end is not counted; the rate since then is halved:
    2 s updates from update 1 (1030 s) to 10 (1048 s), 22 s left: 22 / 1 s = 22 more fit at twice
    the rate, 10 + int(22 * 0.98) = 31. A run of 40 with 50 s left is kept: its first decision is
    40 s away, more than half, but the 30 updates left fit at twice the rate (at the measured rate
    they would not: the decisions after see to that); one of 70 is cut to 10 + int(50 * 0.98)."""
    deadline, clock = guarded(1070.0, first=1030.0)
    assert at(deadline, clock, 10, 1048.0, schedule=HUNDRED, last=100) == 31
    deadline, clock = guarded(1098.0, first=1030.0)
    assert at(deadline, clock, 10, 1048.0, schedule=ScheduleConfig(40, 2), last=40) is None
    assert at(deadline, clock, 10, 1048.0, schedule=ScheduleConfig(70, 2), last=70) == 10 + 49


def test_after_one_window_the_guard_takes_its_rate_as_measured():
    """The run of 70 above, cut to 59 at update 10 (1048 s): at update 20 (1068 s, 2 s per update
    since the first log line) the first decision is 20 s away, more than half of the 30 s left,
    so the guard fits the 15 updates of 2 s that are left: 20 + int(15 * 0.98) = 34."""
    deadline, clock = guarded(1098.0, first=1030.0)
    assert at(deadline, clock, 10, 1048.0, schedule=ScheduleConfig(70, 2), last=70) == 59
    assert at(deadline, clock, 20, 1068.0, schedule=ScheduleConfig(59, 2), last=59) == 34


def test_a_past_deadline_ends_at_the_update_after_the_first_window():
    """No update reported (``started`` shows the first log line then only starts the clock);
    one window later the guard's window rate applies: the next update is the last."""
    deadline, clock = started(900.0)
    assert at(deadline, clock, 4, 1004.0) == 5


def test_the_guard_ends_a_slow_finetuning_like_run_near_its_deadline(tmp_path, monkeypatch):
    """Through the Trainer: 1 s updates logged every 10, 20 s to the deadline, 100 planned: the
    guard's shrinks at updates 10 and 20 end the run at update 21 (before: 31, the first
    decision coming at update 30)."""
    from .helpers import make_trainer
    from .test_loop import _fake_clock, _records

    box: list = []
    _fake_clock(monkeypatch, box)
    box.append(make_trainer(tmp_path / "run", steps=100, log_every=10, end_by=1020.0))
    assert box[0].fit().step == 21
    assert [r["total_steps"] for r in _records(tmp_path / "run", "deadline")] == [29, 21]


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
