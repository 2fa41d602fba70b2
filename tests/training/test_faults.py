"""The test-only faults fire exactly where asked: ``at_step`` raises or hangs at its (rank, step)
and nowhere else (the hang itself is replaced here by a recorded call)."""

from __future__ import annotations

import pytest

from bertkit.training import faults
from bertkit.training.faults import Faults


def test_a_fault_fires_only_at_its_rank_and_step(monkeypatch) -> None:
    hangs: list[str] = []

    class Event:
        def wait(self) -> None:
            hangs.append("hang")

    monkeypatch.setattr(faults.threading, "Event", Event)
    plan = Faults(raise_at=(1, 5), hang_at=(0, 3))
    for rank, step in [(0, 5), (1, 4), (1, 3), (0, 4), (1, 6), (0, 2)]:
        plan.at_step(rank, step)  # neither fault's rank and step: returns
    assert hangs == []
    with pytest.raises(RuntimeError, match=r"injected fault \(rank 1, step 5\)"):
        plan.at_step(1, 5)
    plan.at_step(0, 3)
    assert hangs == ["hang"]
    faults.NONE.at_step(0, 0)
    assert hangs == ["hang"]
