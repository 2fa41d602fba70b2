"""What a resume refuses (a changed batch size, seed, step count, objective, model: every key of
``PretrainOptions.fingerprint``) and what it warns about (a different world size), each with a
negative control that resumes fine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bertkit.errors import CheckpointError
from bertkit.training.checkpoint import Checkpoint, check_resume_settings

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


def _base_options():
    from bertkit.training.pretraining import PretrainOptions

    return PretrainOptions(data=Path("data"), output=Path("run"))


# each key of PretrainOptions.fingerprint() and an option change that moves it
_CHANGES = {
    "batch_size": lambda o: replace(o, train=replace(o.train, batch_size=o.train.batch_size + 1)),
    "phase2_batch_size": lambda o: replace(o, phase2_batch_size=64),
    "seed": lambda o: replace(o, train=replace(o.train, seed=o.train.seed + 1)),
    "max_steps": lambda o: replace(o, max_steps=o.max_steps + 1),
    "model_size": lambda o: replace(o, model_size="mini"),
    "num_attention_heads": lambda o: replace(o, num_attention_heads=4),
    "objective": lambda o: replace(o, objective="mlm"),
    "nsp_weight": lambda o: replace(o, nsp_weight=0.5),
}


def _checkpoint_of(settings: dict) -> Checkpoint:
    return Checkpoint(Path("run/checkpoint-3"), 3, {}, {}, {}, {"settings": dict(settings)})


def test_every_listed_setting_refuses_a_resume_and_no_other_does() -> None:
    """The keys a resume must match have one home (``PretrainOptions.fingerprint``), which the
    checkpoint's check compares in full: changing any of them refuses, changing another option
    (a moved data folder, the learning rate, threads, device) resumes."""
    base = _base_options()
    saved = _checkpoint_of(base.fingerprint())
    assert set(_CHANGES) == set(base.fingerprint())  # each listed key is tried below
    for key, change in _CHANGES.items():
        changed = change(base).fingerprint()
        assert [k for k in changed if changed[k] != saved.state["settings"][k]] == [key]
        with pytest.raises(CheckpointError, match=f"was written with {key}=.*this run has {key}="):
            check_resume_settings(saved, changed)
    for other in (
        replace(base, data=Path("moved/data"), phase2_data=Path("moved/p2")),
        replace(base, learning_rate=5e-4, threads=3, device="cpu", warmup_steps=7),
    ):
        check_resume_settings(saved, other.fingerprint())  # no refusal
    check_resume_settings(_checkpoint_of({"data": "old/path"}), base.fingerprint())  # unlisted


def test_an_auto_precision_resume_keeps_the_precision_the_run_began_in(
    tmp_path: Path, monkeypatch
) -> None:
    """``--precision auto`` on a CPU rests on a timed bf16 probe that can flip between a run and
    its rerun on a busy machine: the resumed steps compute in the precision of the checkpoint's,
    and say so. Control: an explicit precision is the user's choice and is kept. (bf16 forced to
    autocast's kernels, which every CPU runs.)"""
    from bertkit import hardware

    def interrupted(run: Path, speedup: float) -> str:
        monkeypatch.setattr(hardware, "bf16_speedup", lambda: speedup)
        t = make_trainer(run, steps=6, dropout=0.0, precision="auto")
        stop_after(t, 3)
        with pytest.raises(Stop):
            t.fit()
        monkeypatch.setattr(hardware, "bf16_speedup", lambda: 0.0)  # the rerun's probe: fp32
        return t.precision

    with hardware.forced("bf16", "emulated"):
        assert interrupted(tmp_path / "run", 2.0) == "bf16"
        messages: list[str] = []
        resumed = make_trainer(tmp_path / "run", steps=6, dropout=0.0, precision="auto")
        resumed._log = messages.append
        assert resumed.precision == "fp32"
        assert resumed.fit().step == 6
        assert resumed.precision == resumed.update.precision == "bf16"
        assert any("precision bf16, as step-000000003 was trained" in m for m in messages)
        assert interrupted(tmp_path / "other", 2.0) == "bf16"
        kept = make_trainer(tmp_path / "other", steps=6, dropout=0.0, precision="fp32")
        assert kept.fit().step == 6 and kept.update.precision == "fp32"
