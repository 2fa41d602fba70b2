"""Run ``bertkit finetune`` / ``evaluate`` / ``predict`` in-process and read what they wrote
(the CLI, inference and long-input tests' shared steps)."""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.cli.main import main

FAST = [
    "--max-steps",
    "2",
    "--epochs",
    "1",
    "--batch-size",
    "4",
    "--learning-rate",
    "1e-3",
    "--seed",
    "3",
]


def finetune(family: str, model: Path, out: Path, *args: str) -> dict:
    assert (
        main(["finetune", family, "--model", str(model), "--output", str(out), *FAST, *args]) == 0
    )
    return json.loads((out / "metrics.json").read_text())


def evaluate(model: Path, data: Path, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "eval.json"
    assert (
        main(["evaluate", "--model", str(model), "--data", str(data), "--output", str(out), *args])
        == 0
    )
    return json.loads(out.read_text())


def predict(model: Path, data: Path, out: Path, *args: str) -> list:
    assert (
        main(["predict", "--model", str(model), "--input", str(data), "--output", str(out), *args])
        == 0
    )
    text = out.read_text()
    return json.loads(text) if out.suffix == ".json" else [json.loads(x) for x in text.splitlines()]
