"""A failing rank does not hang the others: real gloo processes (2 ranks of ``bertkit pretrain``
joined through env://, forked from the kill harness's preloaded forkserver) with a checkpoint write
that fails on rank 0, an exception on rank 1 mid-step, and rank 1 stopping to respond. Every rank
must exit with status 1 within the collective timeout plus a few seconds of the fault, its last line
one ``bertkit pretrain: error:`` line naming the rank and the cause. Also: a rank whose peers never
come stops within the timeout, with one line, instead of waiting (gloo's default is 30 minutes).

The measured times are printed (``pytest -s``)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from training.helpers import free_port, prepare_tiny_corpus

from .killharness import CTX, _child, pretrain_argv

TIMEOUT = 2.0  # --collective-timeout; the grace period is min(5, max(1, TIMEOUT)) = 2 s
BOUND = TIMEOUT + 2.0 + 4.0  # timeout + grace + slack (polling, a loaded 2-core machine)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return prepare_tiny_corpus(tmp_path_factory.mktemp("corpus"), dynamic=True)


def _launch(data: Path, out: Path, world: int, ranks: list[int], *extra: str):
    argv = pretrain_argv(data, out, 8, "--collective-timeout", str(TIMEOUT), *extra)
    port = str(free_port())
    procs = []
    for r in ranks:
        env = {
            "RANK": str(r),
            "LOCAL_RANK": str(r),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        log = out.parent / f"rank{r}.log"
        p = CTX.Process(target=_child, args=(argv, str(log), env))
        p.start()
        procs.append((r, p, log))
    return procs


def _wait(procs, limit: float = 120.0) -> dict[int, float]:
    """Wall-clock exit time of every rank."""
    ended: dict[int, float] = {}
    deadline = time.monotonic() + limit
    while len(ended) < len(procs):
        for r, p, _ in procs:
            if r not in ended and not p.is_alive():
                ended[r] = time.time()
        if time.monotonic() > deadline:
            for _, p, _ in procs:
                p.kill()
            raise AssertionError(f"ranks still running after {limit} s: exited {ended}")
        time.sleep(0.01)
    for _, p, _ in procs:
        p.join()
    return ended


def _error_line(log: Path) -> str:
    lines = [x for x in log.read_text().splitlines() if x.strip()]
    assert lines, f"{log} is empty"
    errors = [x for x in lines if x.startswith("bertkit pretrain: error:")]
    assert errors == [lines[-1]], log.read_text()  # exactly one error line, the last one
    assert "Traceback" not in log.read_text(), log.read_text()
    return lines[-1]


CASES = {
    "checkpoint write fails on rank 0": (
        ["--debug-fail-checkpoint", "4"],
        [r"rank 0 failed in checkpoint write at step 4: .*No space left on device"] * 2,
    ),
    "rank 1 raises at step 5": (
        ["--debug-raise-at", "1", "5"],
        [r"rank 1 failed in update at step 5: RuntimeError: injected fault"] * 2,
    ),
    "rank 1 hangs at step 5": (
        ["--debug-hang-at", "1", "5"],
        [r"rank 1 did not answer within 2 s \(all_reduce at step 5 on rank 0\)"] * 2,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_failing_rank_ends_every_rank_in_bounded_time(data, tmp_path, case):
    extra, patterns = CASES[case]
    procs = _launch(data, tmp_path / "run", 2, [0, 1], *extra)
    ended = _wait(procs)
    logs = {r: log for r, _, log in procs}
    fault = [
        float(m)
        for log in logs.values()
        for m in re.findall(r"^debug: .* \(t=([\d.]+)\)$", log.read_text(), re.M)
    ]
    assert len(fault) == 1, {r: log.read_text() for r, log in logs.items()}
    seconds = max(ended.values()) - fault[0]
    lines = {r: _error_line(log) for r, log in logs.items()}
    print(f"\n{case}: every rank exited {seconds:.2f} s after the fault")
    for r in sorted(lines):
        print(f"  rank {r} (exit {procs[r][1].exitcode}, +{ended[r] - fault[0]:.2f} s): {lines[r]}")
    for r, p, _ in procs:
        assert p.exitcode == 1, (r, p.exitcode, logs[r].read_text())
        assert re.search(patterns[r], lines[r]), lines[r]
        assert f"rank {r}" in lines[r]  # each rank's line says which rank it is (or names it)
    assert seconds < BOUND, seconds


def test_a_rank_whose_peer_never_comes_stops_within_the_timeout(data, tmp_path):
    start = time.time()
    procs = _launch(data, tmp_path / "run", 2, [0])
    ended = _wait(procs)
    line = _error_line(procs[0][2])
    print(f"\nalone in a world of 2: exited after {ended[0] - start:.2f} s: {line}")
    assert procs[0][1].exitcode == 1
    assert re.search(r"rank 0 could not join the 2-process group at 127.0.0.1:\d+ within 2 s", line)
    assert ended[0] - start < BOUND
