"""``torchrun --max-restarts`` restarts that always come back.

torchrun (>= 2.4) gives every restart round of the worker group the same TCPStore (the agent's);
joined with plain env://, a round read the gloo addresses the killed workers of the previous round
had published and its full-mesh connect was refused or hung (see bertkit.training.distributed).

Default run: a minimal worker (restart_worker.py) under torchrun where rank 1 SIGKILLs itself in
round 0 and joins late in round 1, so rank 0 reads the keys first: the restart must succeed.
``-m slow``: 10 trials of
``bertkit pretrain`` (2 gloo workers) with a worker SIGKILLed at step 12 and again at step 25:
0 hangs, and the per-step losses equal an uninterrupted run's every time.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from training.helpers import prepare_tiny_corpus

from .restartharness import ENV, pretrain_args, torchrun, train_log, trial

WORKER = str(Path(__file__).with_name("restart_worker.py"))


def _restart(*extra: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = subprocess.run(
        torchrun(WORKER, "5", *extra, restarts=1),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p, time.monotonic() - t0


def test_a_restarted_round_never_sees_the_previous_rounds_keys():
    p, seconds = _restart()
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0 restart 1 sum 3" in p.stdout and "rank 1 restart 1 sum 3" in p.stdout, p.stdout
    assert seconds < 60, seconds


@pytest.mark.slow
def test_ten_kill_and_restart_trials_never_hang_and_match(tmp_path):
    steps = 40
    data = prepare_tiny_corpus(tmp_path / "corpus", dynamic=True)
    ref = tmp_path / "ref"
    r = subprocess.run(
        torchrun(*pretrain_args(data, ref, steps)),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    reference = train_log(ref)
    assert [s for s, _, _ in reference] == list(range(1, steps + 1))
    results = []
    for i in range(10):
        out = tmp_path / f"trial{i:02d}"
        argv = torchrun(*pretrain_args(data, out, steps, "--collective-timeout", "30"))
        t = trial(argv, out, reference, kills=[(1, 12), (i % 2, 25)], timeout=150)
        print(
            f"trial {i}: hung={t.hung} rc={t.returncode} kills={t.kills} "
            f"same_losses={t.same_losses} {t.seconds:.1f}s"
        )
        results.append(t)
        assert not t.hung, t.log[-3000:]
        assert t.returncode == 0 and t.kills == 2, t.log[-3000:]
        assert t.same_losses, t.log[-3000:]
        assert t.log.count("resumed from") == 2, t.log[-3000:]  # both restarts resumed
