"""Kill-and-restart trials of ``bertkit pretrain`` under ``torchrun --max-restarts``.

One trial starts a 2-process gloo run under ``torchrun --standalone``, SIGKILLs one worker (found
among the agent's children by its RANK and TORCHELASTIC_RESTART_COUNT) once the run has logged a
given step, once per entry of ``kills`` (so the agent restarts the group that many times), and
waits for torchrun to end. It records whether torchrun ended within ``timeout`` (else: a hang; the
process group is killed), its exit code, the time, and whether the per-step (step, loss, lr) log
equals an uninterrupted run's.

Run directly to reproduce or measure (``python -m scenarios.restartharness N`` with
``tests`` on PYTHONPATH); tests/scenarios/test_torchrun_restarts.py runs it in the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "BERTKIT_PROGRESS": "0", "HF_HUB_OFFLINE": "1"}


def torchrun(*args: str, nproc: int = 2, restarts: int = 2) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        str(restarts),
        *args,
    ]


def pretrain_args(data: Path, out: Path, steps: int, *extra: str) -> list[str]:
    return [
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
        "5",
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
        "--dropout",
        "0.1",
        "--no-progress",
        *extra,
    ]


def train_log(out: Path) -> list[tuple[int, float, float]]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    recs = []
    for line in path.read_text().splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:  # a line being written
            continue
    return [(r["step"], r["loss"], r["lr"]) for r in recs if r.get("type") == "train"]


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(x) for x in (task / "children").read_text().split()]
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants."""
    for child in children(pid):
        kill_tree(child)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(x.split("=", 1) for x in raw.decode(errors="replace").split("\0") if "=" in x)


def find_worker(agent: int, rank: int, after: int) -> tuple[int, int] | None:
    """(pid, restart round) of the worker with ``rank`` in a restart round later than ``after``
    (None: not running)."""
    for pid in children(agent):
        env = _environ(pid)
        restart = int(env.get("TORCHELASTIC_RESTART_COUNT", "-1"))
        if env.get("RANK") == str(rank) and restart > after:
            return pid, restart
    return None


@dataclass
class Trial:
    hung: bool
    returncode: int | None
    seconds: float
    kills: int
    same_losses: bool
    log: str


def trial(
    argv: list[str],
    out: Path,
    reference: list[tuple[int, float, float]],
    kills: list[tuple[int, int]],
    timeout: float = 180.0,
    log: Path | None = None,
) -> Trial:
    """Run ``argv`` (a torchrun command line) and, for each ``(rank, step)`` of ``kills`` in turn,
    SIGKILL that rank's worker once the run has logged ``step`` (each kill in a later restart
    round than the one before)."""
    log = log or out.parent / f"{out.name}.log"
    t0 = time.monotonic()
    with log.open("w") as f:
        proc = subprocess.Popen(
            argv, env=ENV, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    done, last_round = 0, -1
    deadline = t0 + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if done < len(kills):
                rank, step = kills[done]
                found = find_worker(proc.pid, rank, last_round)
                logged = train_log(out)
                if found is not None and logged and logged[-1][0] >= step:
                    os.kill(found[0], signal.SIGKILL)
                    done, last_round = done + 1, found[1]
            time.sleep(0.005)
        hung = proc.poll() is None
    finally:
        if proc.poll() is None:  # a hang: end torchrun and its workers (own sessions, maybe)
            kill_tree(proc.pid)
            proc.wait()
    seconds = time.monotonic() - t0
    return Trial(
        hung,
        None if hung else proc.returncode,
        seconds,
        done,
        train_log(out) == reference,
        log.read_text(),
    )


def main(n: int, root: Path, timeout: float) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from training.helpers import prepare_tiny_corpus

    steps = 40
    data = prepare_tiny_corpus(root / "corpus", dynamic=True)
    ref_out = root / "ref"
    r = subprocess.run(
        torchrun(*pretrain_args(data, ref_out, steps)),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    reference = train_log(ref_out)
    results = []
    for i in range(n):
        out = root / f"trial{i:02d}"
        t = trial(
            torchrun(*pretrain_args(data, out, steps)),
            out,
            reference,
            kills=[(1, 12), (i % 2, 25)],
            timeout=timeout,
        )
        results.append(t)
        print(
            f"trial {i}: hung={t.hung} rc={t.returncode} kills={t.kills} "
            f"same_losses={t.same_losses} {t.seconds:.1f}s",
            flush=True,
        )
    hangs = sum(t.hung for t in results)
    ok = sum(t.returncode == 0 and t.same_losses for t in results)
    print(
        f"{n} trials: {hangs} hangs, {ok} finished with identical losses, "
        f"max {max(t.seconds for t in results):.1f}s"
    )


if __name__ == "__main__":
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    limit = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    main(count, Path(tempfile.mkdtemp(prefix="restarts-")), limit)
