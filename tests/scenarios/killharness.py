"""An in-suite kill harness: SIGKILL ``bertkit pretrain`` at random moments and during checkpoint
writes, rerun it after each kill, and compare the result with an uninterrupted run.

Each run is a real separate process killed with SIGKILL. The processes are forked from a
forkserver that has already imported torch and bertkit, so a restart costs milliseconds instead of
the seconds a fresh interpreter needs (this is what lets ten kills fit in the default test run).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

CTX = mp.get_context("forkserver")
# matplotlib too: every run ends by plotting its curves
CTX.set_forkserver_preload(
    [
        "torch",
        "numpy",
        "safetensors.torch",
        "bertkit.cli.main",
        "bertkit.training.pretraining",
        "bertkit.training.loop",
        "bertkit.model",
        "bertkit.interop",
        "matplotlib.pyplot",
    ]
)


def _child(argv: list[str], log: str, env: dict[str, str] | None = None) -> None:
    """Process body: ``bertkit <argv>`` with stdout/stderr appended to ``log`` (and ``env`` added
    to the environment)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ["BERTKIT_PROGRESS"] = "0"
    os.environ.update(env or {})
    from bertkit.cli.main import main

    sys.exit(main(argv))


def pretrain_argv(data: Path, out: Path, steps: int, *extra: str) -> list[str]:
    """A tiny pre-training run: a checkpoint every 4 updates, each file write slowed by 0.05 s."""
    return [
        "pretrain",
        "--data",
        str(data),
        "--output",
        str(out),
        "--max-steps",
        str(steps),
        "--batch-size",
        "8",
        "--save-every",
        "4",
        "--keep-last",
        "2",
        "--log-every",
        "1",
        "--warmup-steps",
        "4",
        "--learning-rate",
        "1e-3",
        "--threads",
        "1",
        "--peak-tflops",
        "1",
        "--eval-every",
        "10",
        "--dropout",
        "0.1",
        "--no-progress",
        "--debug-checkpoint-delay",
        "0.05",
        *extra,
    ]


def run_to_end(argv: list[str], log: Path) -> None:
    p = CTX.Process(target=_child, args=(argv, str(log)))
    p.start()
    p.join(300)
    assert p.exitcode == 0, log.read_text()


def temp_folders(out: Path) -> set[str]:
    root = out / "checkpoints"
    return {p.name for p in root.glob(".tmp-*")} if root.is_dir() else set()


def writing(out: Path, stale: set[str]) -> bool:
    """Whether a checkpoint write is in progress: a ``.tmp-*`` folder other than the ``stale``
    ones left by earlier kills (which the rerun deletes at start-up: that is not a write)."""
    return bool(temp_folders(out) - stale)


def newest_checkpoint(out: Path) -> int:
    """Step of the newest complete checkpoint (0: none), the one a rerun resumes from."""
    done = [int(m.parent.name[5:]) for m in (out / "checkpoints").glob("step-*/manifest.json")]
    return max(done, default=0)


def steps_after(out: Path, step: int) -> int:
    """Train records logged for steps after ``step``."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum(1 for x in path.read_text().splitlines() if '"train"' in x and _step(x) > step)


def _step(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError):  # a line being written
        return 0


def kill_once(
    argv: list[str],
    out: Path,
    during_write: bool,
    rng: random.Random,
    log: Path,
    first_checkpoint: int = 0,
) -> str:
    """Start a run and SIGKILL it inside a checkpoint write, or at a random moment: 0-50 ms after
    its 1st-8th new update (drawn from ``rng``) past its resume point (at least
    ``first_checkpoint``). Counting updates rather than seconds bounds the progress between kills
    on any machine speed, so ten kills land before the run ends; going up to two checkpoint
    intervals (8 updates) makes the run progress, so resumes happen from many steps.
    Returns "write" (the kill landed inside a write), "random" or "finished" (it ended first)."""
    stale, resume_step = temp_folders(out), newest_checkpoint(out)
    floor = max(resume_step, first_checkpoint)
    p = CTX.Process(target=_child, args=(argv, str(log)))
    p.start()
    updates, extra, due_at = rng.randint(1, 8), rng.uniform(0.0, 0.05), None
    deadline = time.monotonic() + 300
    while p.is_alive():
        assert time.monotonic() < deadline, "run neither finished nor was killed"
        if not during_write and due_at is None:
            # before "resumed from", metrics.jsonl may still hold the killed run's extra steps
            resumed = not resume_step or (log.exists() and "resumed from" in log.read_text())
            if resumed and steps_after(out, floor) >= updates:
                due_at = time.monotonic() + extra
        due = due_at is not None and time.monotonic() >= due_at
        if (during_write and writing(out, stale)) or due:
            hit = writing(out, stale)
            os.kill(p.pid, signal.SIGKILL)
            p.join()
            assert p.exitcode == -signal.SIGKILL
            return "write" if hit else "random"
        time.sleep(0.002)
    assert p.exitcode == 0, log.read_text()
    return "finished"


def train_log(out: Path) -> list[tuple[int, float, float]]:
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"], r["lr"]) for r in recs if r["type"] == "train"]


def differences(ref: Path, out: Path, steps: int) -> list[str]:
    """What differs between two finished runs: the per-step loss log (step, loss, lr), the final
    weights, and the last checkpoint's weights, optimizer, RNG and trainer state (JSON)."""
    problems = []
    if train_log(ref) != train_log(out):
        problems.append("per-step loss log")
    last = f"checkpoints/step-{steps:09d}"
    for name in (
        "model/model.safetensors",
        f"{last}/model.safetensors",
        f"{last}/optimizer.safetensors",
        f"{last}/rng.safetensors",
    ):
        a, b = load_file(str(ref / name)), load_file(str(out / name))
        if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
            problems.append(name)
    state = [json.loads((run / last / "state.json").read_text()) for run in (ref, out)]
    if state[0] != state[1]:
        problems.append(f"{last}/state.json")
    return problems


def kill_plan(kills: int, write_kills: int, seed: int) -> list[bool]:
    """Which kills wait for a checkpoint write (True) and which land at random (False)."""
    plan = [True] * write_kills + [False] * (kills - write_kills)
    random.Random(seed).shuffle(plan)
    return plan
