"""``bertkit.recipes.finetune``: the job ``bertkit finetune`` runs is the one the benchmarks run.

``benchmarks/finetune_quality.py`` (and through it ``int8_quality``; ``ablations`` calls the
recipe itself) hands the recipe a task it read and subsampled itself: on the same data and
settings it must write the CLI's metrics.json and the CLI's model, bit for bit.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch

from bertkit.cli.main import main
from bertkit.interop import load_pretrained
from support.tiny_glue import write_sentiment

RUN = {"epochs": 1, "max_steps": 2, "progress": False, "bucket_batches": 1}


def _comparable(metrics: dict) -> dict:
    """metrics.json less what differs between two identical runs (wall times) and the one
    setting the CLI has no flag for (progress bars)."""
    m = json.loads(json.dumps(metrics, default=float))
    for run in m["runs"]:
        run.pop("wall_s")
    m["config"].pop("show_progress")
    return m


def test_the_benchmark_runs_the_clis_job(tiny_model: Path, tmp_path: Path, monkeypatch) -> None:
    import benchmarks.finetune_quality as fq

    data = write_sentiment(tmp_path / "glue")
    cli = tmp_path / "cli"
    flags = [
        "--epochs",
        "1",
        "--max-steps",
        "2",
        "--batch-size",
        "32",
        "--learning-rate",
        "1e-3",
        "--seed",
        "3",
    ]
    argv = ["finetune", "glue", "--model", str(tiny_model), "--output", str(cli)]
    assert main([*argv, "--task", "SST-2", "--data-dir", str(data), *flags]) == 0
    monkeypatch.setattr(fq, "model_dir", lambda: str(tiny_model))
    task = fq.glue_examples("SST-2", tmp_path, None, None)
    metrics, out = fq.bertkit_run(task, [1e-3], 1, 3, argparse.Namespace(**RUN))
    try:
        assert metrics == json.loads((out / "metrics.json").read_text())
        assert metrics["task"] == {"family": "glue", "name": "SST-2"}
        assert metrics["train_examples"] == 48 and len(metrics["runs"]) == 1
        assert _comparable(metrics) == _comparable(json.loads((cli / "metrics.json").read_text()))
        weights = "model.safetensors"
        assert (out / weights).read_bytes() == (cli / weights).read_bytes()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_head_init_is_where_every_run_starts(tiny_model: Path, tmp_path: Path, monkeypatch) -> None:
    """A zero classifier, one update at lr 1e-9: the saved head is still zero to 1e-6 (the
    seed's own draw has std 0.02)."""
    import benchmarks.finetune_quality as fq

    monkeypatch.setattr(fq, "model_dir", lambda: str(tiny_model))
    task = fq.glue_examples("SST-2", write_sentiment(tmp_path / "glue").parent, 8, 4)
    zero = {"weight": torch.zeros(2, 32), "bias": torch.zeros(2)}
    run = argparse.Namespace(**{**RUN, "max_steps": 1})
    _, out = fq.bertkit_run(task, [1e-9], 1, 3, run, head_init=zero)
    try:
        head = load_pretrained(out, "BertForSequenceClassification").classifier
        assert float(head.weight.detach().abs().max()) < 1e-6
        assert float(head.bias.detach().abs().max()) < 1e-6
    finally:
        shutil.rmtree(out, ignore_errors=True)
