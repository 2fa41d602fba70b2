"""The next update's micro-batches are collated while the current update runs (recorded events,
not timings), prefetching changes no value, and every ``make`` runs on the one worker thread, one
at a time."""

from __future__ import annotations

import threading
import time

import pytest

from bertkit.training.prefetch import Prefetcher

from .helpers import collate, losses, make_trainer


def _events(tmp_path, prefetch: int) -> list[tuple[str, int]]:
    """("collate", k) when the batch of update k starts being collated, ("done", k) when update
    k has finished, in the order they happened."""
    trainer = make_trainer(tmp_path, steps=6, prefetch=prefetch, log_every=1000, save_every=1000)
    events: list[tuple[str, int]] = []

    def slow(items, epochs):
        time.sleep(0.03)  # a deliberately slow collate
        return collate(items, epochs)

    trainer.phases[0].collate = slow
    make, step = trainer._make_micro_batches, trainer._train_step

    def made(phase_index, position):
        events.append(("collate", position // trainer.cfg.batch_size + 1))
        return make(phase_index, position)

    def stepped(model):
        out = step(model)
        time.sleep(0.03)  # the host waiting for a device step: the worker thread gets the CPU
        events.append(("done", trainer.step))
        return out

    trainer._make_micro_batches, trainer._train_step = made, stepped
    trainer.fit()
    return events


def test_the_next_batch_is_collated_before_the_step_ends(tmp_path):
    events = _events(tmp_path / "ahead", prefetch=2)
    for k in range(1, 6):
        assert events.index(("collate", k + 1)) < events.index(("done", k)), events
    assert ("collate", 7) not in events  # nothing past the last update


def test_without_prefetch_collation_waits_for_the_step(tmp_path):
    events = _events(tmp_path / "series", prefetch=0)  # negative control
    for k in range(1, 6):
        assert events.index(("collate", k + 1)) > events.index(("done", k)), events


def test_by_default_the_cpu_collates_in_series_and_an_accelerator_ahead(tmp_path):
    from bertkit.training.prefetch import ACCELERATOR_DEPTH, default_depth

    assert default_depth("cpu") == 0 and default_depth("cuda") == ACCELERATOR_DEPTH == 2
    events = _events(tmp_path / "default", prefetch=None)  # this trainer runs on the CPU
    for k in range(1, 6):
        assert events.index(("collate", k + 1)) > events.index(("done", k)), events


def test_prefetching_changes_no_value(tmp_path):
    for prefetch in (0, 3):
        make_trainer(tmp_path / str(prefetch), steps=8, prefetch=prefetch).fit()
    assert losses(tmp_path / "0") == losses(tmp_path / "3")


def test_a_wrong_prediction_is_dropped():
    made: list[int] = []

    def make(k: int) -> int:
        made.append(k)
        return k * 10

    p = Prefetcher(make, depth=2)
    try:
        assert p.get(1, [2, 3]) == 10
        assert p.get(5, [6]) == 50  # 2 and 3 were predicted: dropped, 5 made now
        assert p.get(6) == 60
    finally:
        p.close()
    assert made[0] == 1 and 5 in made and 6 in made


@pytest.mark.parametrize("depth", [1, 2])
def test_every_make_runs_on_one_worker_thread_one_at_a_time(depth):
    """Any depth above 0 makes on a worker thread, not the caller's, and only one: ``make`` may keep
    state without locks (a shard cache), so while one call runs no other starts. The first call
    waits a little for a second one to start, which only a second thread could do."""
    second_started = threading.Event()
    overlapped: list[bool] = []
    threads: set[str] = set()

    def make(k: int) -> int:
        threads.add(threading.current_thread().name)
        if k == 0:
            overlapped.append(second_started.wait(0.5))
        else:
            second_started.set()
        return k * 10

    p = Prefetcher(make, depth=depth)
    try:
        assert [p.get(k, [k + 1, k + 2]) for k in range(4)] == [0, 10, 20, 30]
    finally:
        p.close()
    assert overlapped == [False]
    assert len(threads) == 1 and threads != {threading.current_thread().name}


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_at_most_depth_results_are_made_ahead(depth):
    p = Prefetcher(lambda k: k, depth=depth)
    try:
        assert p.get(0, range(1, 10)) == 0
        assert list(p._ahead) == list(range(1, depth + 1))  # the next ones, in order, no more
        assert p.get(1, range(2, 10)) == 1
        assert list(p._ahead) == list(range(2, depth + 2))
    finally:
        p.close()


def test_depth_0_makes_everything_in_the_callers_thread():
    threads: list[str] = []

    def make(k: int) -> int:
        threads.append(threading.current_thread().name)
        return k

    p = Prefetcher(make, depth=0)
    try:
        assert [p.get(k, [k + 1]) for k in range(3)] == [0, 1, 2]
    finally:
        p.close()
    assert threads == [threading.current_thread().name] * 3  # in series: nothing made ahead


def test_negative_prefetch_is_refused():
    from bertkit.errors import ConfigError
    from bertkit.training.settings import TrainConfig

    with pytest.raises(ConfigError, match="prefetch"):
        TrainConfig(prefetch=-1)
