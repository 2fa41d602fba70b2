"""What a resume refuses (a changed batch size, seed, step count or objective) and what it warns
about (a different world size), each with a negative control that resumes fine."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.errors import CheckpointError

from .helpers import Stop, make_trainer, stop_after

SETTINGS = {"batch_size": 8, "seed": 7, "max_steps": 6, "objective": "mlm+nsp"}


def _interrupted(run: Path) -> None:
    t = make_trainer(run, steps=6, dropout=0.0)
    t.settings = dict(SETTINGS)
    stop_after(t, 3)  # checkpoint at step 3 (save_every 3), then a crash
    with pytest.raises(Stop):
        t.fit()


@pytest.mark.parametrize(
    ("key", "value"), [("batch_size", 16), ("seed", 8), ("max_steps", 10), ("objective", "mlm")]
)
def test_resume_with_a_changed_setting_is_refused(tmp_path: Path, key: str, value) -> None:
    _interrupted(tmp_path / "run")
    t = make_trainer(tmp_path / "run", steps=6, dropout=0.0)
    t.settings = {**SETTINGS, key: value}
    with pytest.raises(CheckpointError, match=f"was written with {key}=.*this run has {key}="):
        t.fit()
    again = make_trainer(tmp_path / "run", steps=6, dropout=0.0)  # control: the same settings
    again.settings = dict(SETTINGS)
    assert again.fit().step == 6


def test_resume_on_another_world_size_warns(tmp_path: Path, monkeypatch) -> None:
    from bertkit.training import resume

    t = make_trainer(tmp_path / "run", steps=6, dropout=0.0)
    t.settings = dict(SETTINGS)
    original = resume.loop_state

    def written_by_two(trainer):  # as if the checkpoint came from a 2-process job
        state = original(trainer)
        state.world_size = 2
        return state

    stop_after(t, 3)
    with monkeypatch.context() as m, pytest.raises(Stop):
        m.setattr(resume, "loop_state", written_by_two)
        t.fit()
    messages: list[str] = []
    resumed = make_trainer(tmp_path / "run", steps=6, dropout=0.0)
    resumed.settings, resumed._log = dict(SETTINGS), messages.append
    resumed.fit()
    assert any("was written by 2 processes, this run has 1" in m for m in messages), messages
    quiet: list[str] = []
    _interrupted(tmp_path / "same")  # control: the same world size gives no warning
    same = make_trainer(tmp_path / "same", steps=6, dropout=0.0)
    same.settings, same._log = dict(SETTINGS), quiet.append
    same.fit()
    assert not any("processes" in m for m in quiet) and any("resumed from" in m for m in quiet)
