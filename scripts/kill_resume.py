"""Kill harness: SIGKILL ``bertkit pretrain`` many times, at random moments and during checkpoint
writes, rerun it each time, and check the result is bit-identical to an uninterrupted run.

    .venv/bin/python scripts/kill_resume.py --workdir /tmp/killtest [--kills 10] [--steps 120]

Builds a small synthetic corpus with the real data pipeline (dynamic masking, dropout on), runs
the reference, then the victim. Checkpoint writes are slowed down (hidden test switch
``--debug-checkpoint-delay``) so that kills can land inside them; at least ``--write-kills`` of the
kills wait for a write in progress (a ``.tmp-*`` folder) before firing. Compared at the end:
the per-step loss log (step, loss, lr), final weights, and the last checkpoint's optimizer, RNG
and trainer state. Exit status 0 when everything matches. ``--negative-control`` resumes without
restoring the data cursor and RNG: the comparison must then FAIL (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "BERTKIT_PROGRESS": "0"}

# checkpoint-folder inspection shared with the in-suite harness (tests/scenarios/killharness.py)
from scenarios.killharness import newest_checkpoint, steps_after, temp_folders, writing  # noqa: E402


def command(data: Path, out: Path, steps: int, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bertkit",
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
        "7",
        "--keep-last",
        "2",
        "--log-every",
        "1",
        "--warmup-steps",
        "10",
        "--learning-rate",
        "1e-3",
        "--threads",
        "1",
        "--peak-tflops",
        "1",
        "--eval-every",
        "25",
        "--debug-checkpoint-delay",
        "0.15",
        *extra,
    ]


def logged_steps(out: Path) -> int:
    path = out / "metrics.jsonl"
    return sum(1 for x in path.read_text().splitlines() if '"train"' in x) if path.exists() else 0


def finished(out: Path, steps: int) -> bool:
    return (out / "checkpoints" / f"step-{steps:09d}" / "manifest.json").exists()


def kill_once(cmd: list[str], out: Path, during_write: bool, rng: random.Random, log: Path) -> str:
    """Start the run and SIGKILL it during a checkpoint write, or at a random moment: 0-50 ms after
    its 1st-14th new update (up to two checkpoint intervals) past the checkpoint it resumed from.
    (Counting updates, not seconds from launch: start-up time varies too much on a shared machine;
    the bound on the progress between kills keeps the run from ending before all kills are sent,
    and going past one interval makes the run progress, so resumes happen at many steps.)"""
    stale, resume_step = temp_folders(out), newest_checkpoint(out)
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    updates, extra, due_at = rng.randint(1, 14), rng.uniform(0.0, 0.05), None
    while proc.poll() is None:
        if not during_write and due_at is None:
            # before "resumed from", metrics.jsonl may still hold the killed run's extra steps
            resumed = not resume_step or "resumed from" in log.read_text()
            if resumed and steps_after(out, resume_step) >= updates:
                due_at = time.monotonic() + extra
        due = due_at is not None and time.monotonic() >= due_at
        if (during_write and writing(out, stale)) or due:
            hit = writing(out, stale)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            if hit:
                return "killed during a checkpoint write"
            return f"killed after {updates} updates (+{extra * 1000:.0f} ms)"
        time.sleep(0.005)
    return f"finished by itself (exit {proc.returncode})"


def compare(ref: Path, out: Path, steps: int) -> list[str]:
    import torch
    from safetensors.torch import load_file

    problems = []

    def log(run: Path) -> list:
        recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"], r["lr"]) for r in recs if r["type"] == "train"]

    if log(ref) != log(out):
        problems.append("per-step loss log differs")
    last = f"checkpoints/step-{steps:09d}"
    for name in (
        "model/model.safetensors",
        f"{last}/optimizer.safetensors",
        f"{last}/rng.safetensors",
        f"{last}/model.safetensors",
    ):
        a, b = load_file(str(ref / name)), load_file(str(out / name))
        if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
            problems.append(f"{name} differs")
    sa = json.loads((ref / last / "state.json").read_text())
    sb = json.loads((out / last / "state.json").read_text())
    if sa != sb:
        problems.append("trainer state (scheduler, cursor, counters) differs")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--write-kills", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--negative-control", action="store_true")
    args = ap.parse_args()
    from training.helpers import prepare_tiny_corpus

    shutil.rmtree(args.workdir, ignore_errors=True)
    data = prepare_tiny_corpus(args.workdir / "corpus", docs=80, dynamic=True)
    ref, out = args.workdir / "reference", args.workdir / "victim"
    t0 = time.monotonic()
    subprocess.run(
        command(data, ref, args.steps, []),
        env=ENV,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    print(f"reference run: {time.monotonic() - t0:.1f}s")
    extra = ["--debug-no-restore", "both"] if args.negative_control else []
    cmd = command(data, out, args.steps, extra)
    rng = random.Random(args.seed)
    plan = [True] * args.write_kills + [False] * (args.kills - args.write_kills)
    rng.shuffle(plan)
    in_write = 0
    for i, during_write in enumerate(plan, 1):
        if finished(out, args.steps):
            print(f"kill {i}: run already finished; stopping early")
            break
        (args.workdir / "logs").mkdir(exist_ok=True)
        what = kill_once(cmd, out, during_write, rng, args.workdir / "logs" / f"run-{i:02d}.txt")
        in_write += what.startswith("killed during")
        print(f"kill {i}: {what}; {logged_steps(out)} steps logged")
    subprocess.run(cmd, env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    problems = compare(ref, out, args.steps)
    print(f"kills during a checkpoint write: {in_write}")
    if problems:
        print("MISMATCH: " + "; ".join(problems))
        return 1
    print("bit-identical: loss log, final weights, optimizer, RNG and trainer state")
    return 0


if __name__ == "__main__":
    sys.exit(main())
