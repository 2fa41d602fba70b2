"""With DDP (gloo on CPU), every instance is seen exactly once per epoch, for world sizes 1, 2
and 4 (with gradient accumulation), and across a crash + resume.

Each rank records the instances its collate function receives. The index arithmetic alone is
checked in tests/training/test_distributed.py; this runs the real Trainer in real processes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from training.helpers import free_port

from .ddp_worker import N_EXAMPLES, coverage_worker
from .killharness import CTX

STEPS = 10  # batch 8 over 40 instances: 5 updates per epoch, 2 epochs


def _spawn(run: Path, world: int, tag: str, stop: int | None = None) -> None:
    """Start ``world`` ranks (forked from the kill harness's forkserver, which has torch and
    bertkit imported: seconds faster than torch.multiprocessing.spawn) and wait for them."""
    port = free_port()
    procs = [
        CTX.Process(target=coverage_worker, args=(r, world, port, str(run), STEPS, tag, stop))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    assert [p.exitcode for p in procs] == [0] * world


def _seen(run: Path, world: int, tag: str, last_step: int | None = None) -> list[tuple[int, int]]:
    """(uid, epoch) of every instance trained on, all ranks, up to ``last_step``."""
    out = []
    for rank in range(world):
        for line in (run / f"seen-{tag}-rank{rank}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if last_step is None or rec["step"] <= last_step:
                out.extend(zip(rec["uids"], rec["epochs"], strict=True))
    return out


def _assert_once_per_epoch(seen: list[tuple[int, int]]) -> None:
    counts = Counter(seen)
    assert sorted(counts) == sorted((u, e) for e in (0, 1) for u in range(N_EXAMPLES)), "coverage"
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}


@pytest.mark.parametrize("world", [pytest.param(1, marks=pytest.mark.slow), 2, 4])
def test_each_instance_once_per_epoch(tmp_path, world):
    _spawn(tmp_path, world, "full")
    _assert_once_per_epoch(_seen(tmp_path, world, "full"))


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])  # 4: ~15 s
def test_each_instance_once_per_epoch_across_a_resume(tmp_path, world):
    _spawn(tmp_path, world, "killed", stop=6)  # dies during update 8; last checkpoint: step 6
    killed = _seen(tmp_path, world, "killed")
    assert len(killed) > 6 * 8  # it trained past its last checkpoint before dying
    _spawn(tmp_path, world, "resumed")
    resumed = _seen(tmp_path, world, "resumed")
    # what the crashed run trained on up to its checkpoint, then what the resumed run trained on
    _assert_once_per_epoch(_seen(tmp_path, world, "killed", last_step=6) + resumed)
    # negative control: counting the crashed run's lost update too sees some instances twice
    with pytest.raises(AssertionError):
        _assert_once_per_epoch(killed + resumed)


@pytest.mark.parametrize(("before", "after"), [(2, 1), pytest.param(4, 2, marks=pytest.mark.slow)])
def test_resume_on_another_world_size_keeps_each_instance_once_per_epoch(tmp_path, before, after):
    """The data order is a function of (seed, examples consumed) alone, so a run checkpointed by
    ``before`` processes and resumed by ``after`` continues the same global order: every instance
    once per epoch (documented in docs/pretraining-data.md; only the dropout RNG streams differ,
    and the resume says so)."""
    _spawn(tmp_path, before, "killed", stop=6)
    _spawn(tmp_path, after, "resumed")
    _assert_once_per_epoch(
        _seen(tmp_path, before, "killed", last_step=6) + _seen(tmp_path, after, "resumed")
    )
