"""Folders written by an earlier bertkit keep loading and resuming (tests/fixtures/compat/v1,
made by scripts/make_compat_fixture.py); a newer format is refused with a clear message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bertkit.errors import CheckpointError
from bertkit.inference import Classifier
from bertkit.training import checkpoint as ckpt

from .helpers import make_trainer

V1 = Path(__file__).resolve().parents[1] / "fixtures" / "compat" / "v1"
EXPECTED = json.loads((V1 / "expected.json").read_text())


def test_v1_model_folder_loads_and_predicts_the_same() -> None:
    clf = Classifier.load(V1 / "model-sst2", device="cpu", precision="fp32")
    got = clf(EXPECTED["texts"])
    for g, want in zip(got, EXPECTED["predictions"]):
        assert g["label"] == want["label"]
        assert g["probabilities"] == pytest.approx(want["probabilities"], abs=1e-4)


def test_v1_checkpoint_resumes_to_the_same_losses(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(V1 / "run", run)
    messages: list[str] = []
    trainer = make_trainer(run, steps=6, dropout=0.0)
    trainer._log = messages.append
    assert trainer.fit().step == 6
    assert any("resumed from" in m and "step-000000003" in m for m in messages), messages
    losses = [
        json.loads(x)["loss"]
        for x in (run / "metrics.jsonl").read_text().splitlines()
        if json.loads(x)["type"] == "train" and json.loads(x)["step"] > 3
    ]
    assert losses == pytest.approx(EXPECTED["losses"], rel=1e-4)  # other CPUs: other rounding


def test_a_newer_format_is_refused_not_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(V1 / "run", run)
    manifest = run / "checkpoints" / "step-000000003" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["format"] = "bertkit-checkpoint-2"
    manifest.write_text(json.dumps(data))
    with pytest.raises(
        ckpt.NewerFormatError, match="written in format 'bertkit-checkpoint-2' by a newer bertkit"
    ):
        make_trainer(run, steps=6, dropout=0.0).fit()
    model = tmp_path / "model"
    shutil.copytree(V1 / "model-sst2", model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "bertkit_format": 2}))
    with pytest.raises(CheckpointError, match="bertkit_format 2 is newer than this bertkit reads"):
        Classifier.load(model, device="cpu")
    (model / "config.json").write_text(json.dumps(config))
    task = json.loads((model / "bertkit_task.json").read_text())
    (model / "bertkit_task.json").write_text(json.dumps({**task, "format": 9}))
    with pytest.raises(CheckpointError, match="format 9 is newer"):
        Classifier.load(model, device="cpu")
