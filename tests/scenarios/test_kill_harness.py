"""Crash safety of ``bertkit pretrain`` under SIGKILL: 10 kills at random moments, at least 3 of
them inside a checkpoint write (``-m slow``; the default run sends 3, 2 of them inside writes);
after every rerun the final weights, optimizer, scheduler, RNG, trainer state and the per-step loss
log are bit-identical to an uninterrupted run. A negative control (resume without the data cursor
and RNG) must differ, so the comparison cannot pass vacuously. (A truncated newest checkpoint
falling back to the previous one with a warning is covered end to end in
tests/cli/test_pretrain.py.)
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from bertkit.training.checkpoint import list_checkpoints
from training.helpers import prepare_tiny_corpus

from .killharness import (
    differences,
    kill_once,
    kill_plan,
    pretrain_argv,
    run_to_end,
    train_log,
)

SHORT, LONG = 24, 48  # updates of the default-run harness, and of the 10-kill one


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return prepare_tiny_corpus(tmp_path_factory.mktemp("corpus"), dynamic=True)


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """reference(steps): an uninterrupted run of ``steps`` updates (built once per length)."""
    runs: dict[int, Path] = {}

    def get(steps: int) -> Path:
        if steps not in runs:
            out = tmp_path_factory.mktemp(f"ref{steps}") / "run"
            run_to_end(pretrain_argv(data, out, steps), out.parent / "log.txt")
            assert [s for s, _, _ in train_log(out)] == list(range(1, steps + 1))
            runs[steps] = out
        return runs[steps]

    return get


def _kill_repeatedly(
    argv, out: Path, plan: list[bool], seed: int, first_checkpoint: int = 4
) -> tuple[dict[str, int], list[int]]:
    """Run ``plan`` (True: kill inside a write), then a last run to the end. Returns the kinds
    of kill that happened and the step of every resume (random kills wait for checkpoint
    ``first_checkpoint``, so the runs do resume from checkpoints)."""
    rng = random.Random(seed)
    counts = {"write": 0, "random": 0, "finished": 0}
    resumes: list[int] = []
    logs = out.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for i, during_write in enumerate(plan):
        had_checkpoint = bool(list_checkpoints(out / "checkpoints"))
        log = logs / f"run-{i:02d}.txt"
        what = kill_once(argv, out, during_write, rng, log, first_checkpoint)
        counts[what] += 1
        resumes += [int(x) for x in re.findall(r"resumed from .* \(step (\d+)\)", log.read_text())]
        if had_checkpoint:  # every rerun continues from a checkpoint instead of starting over
            assert "resumed from" in log.read_text(), log.read_text()
        if what == "finished":
            break
    run_to_end(argv, logs / "final.txt")
    resumes += [int(x) for x in re.findall(r"\(step (\d+)\)", (logs / "final.txt").read_text())]
    return counts, resumes


@pytest.mark.parametrize(
    "kills, write_kills, steps",
    [(3, 2, SHORT), pytest.param(10, 3, LONG, marks=pytest.mark.slow)],  # 10 kills: ~60 s
)
def test_sigkills_during_writes_and_at_random_are_bit_identical(
    data, reference, tmp_path, kills, write_kills, steps
):
    out = tmp_path / "run"
    argv = pretrain_argv(data, out, steps)
    plan = kill_plan(kills, write_kills, seed=kills)
    counts, resumes = _kill_repeatedly(argv, out, plan, seed=kills)
    print(f"{kills} kills: {counts}, resumed from steps {resumes}")  # shown with pytest -s
    assert len(set(resumes)) >= (3 if kills == 10 else 1), resumes  # resumes at several steps
    assert counts["finished"] == 0, counts  # every run was killed before it could finish
    assert counts["write"] >= write_kills, counts
    assert differences(reference(steps), out, steps) == []
    assert not list((out / "checkpoints").glob(".tmp-*"))  # interrupted writes cleaned up


def test_negative_control_resume_without_cursor_and_rng_differs(data, reference, tmp_path):
    out = tmp_path / "run"
    argv = pretrain_argv(data, out, SHORT, "--debug-no-restore", "both")
    counts, resumes = _kill_repeatedly(argv, out, [False], seed=2)
    assert resumes and resumes[-1] >= 4, resumes
    assert counts["finished"] == 0, counts
    found = differences(reference(SHORT), out, SHORT)
    assert "per-step loss log" in found and "model/model.safetensors" in found, found
