"""Fine-tuning under torchrun: 2 gloo processes (the launcher pre-training uses) reach the dev
metric of 1 process, every training example is used exactly once per epoch, rank 0 alone selects
and saves; with --grad-accum 2 as well (each rank's share in 2 micro-batches: the same updates),
and with layer-wise learning-rate decay on top (the groups' rates are the same on every rank);
and distilling a teacher (each rank's teacher reads half the examples, the rows gathered)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.cli.main import main
from support.tiny_glue import write_sentiment

N_TRAIN, N_DEV = 81, 16  # batch 8: the last batch holds 1 example, so rank 1's share is empty
ARGS = [
    "--task",
    "SST-2",
    "--epochs",
    "4",
    "--batch-size",
    "8",
    "--learning-rate",
    "1e-2",
    "--dropout",
    "0",
    "--seed",
    "5",
    "--device",
    "cpu",
]


def _check_exactly_once(metrics: dict) -> None:
    for epoch in metrics["runs"][0]["epochs"]:
        seen = epoch["seen"]
        assert seen["examples"] == N_TRAIN, epoch
        assert seen["index_sum"] == sum(range(N_TRAIN))
        assert seen["index_squares"] == sum(i * i for i in range(N_TRAIN))


def _one_and_two(
    tiny_model: Path, tmp_path: Path, accum: int, extra: list[str]
) -> tuple[dict, dict, str]:
    """metrics.json of the job alone and under torchrun with 2 gloo processes, and the
    torchrun job's stderr."""
    data = write_sentiment(tmp_path / "data", n_train=N_TRAIN, n_dev=N_DEV)
    common = ["finetune", "glue", "--model", str(tiny_model), "--data-dir", str(data), *ARGS]
    common += [*extra, "--precision", "fp32"]  # auto is bf16 where faster; in-process is fp32
    one = tmp_path / "one"
    assert main([*common, "--output", str(one)]) == 0
    two = tmp_path / "two"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "BERTKIT_PROGRESS": "0",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "bertkit",
            *common,
            "--grad-accum",
            str(accum),  # the last batch's 1 example: 3 of the 4 micro-batches are empty
            "--output",
            str(two),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (two / "config.json").is_file() and (two / "model.safetensors").is_file()
    m1 = json.loads((one / "metrics.json").read_text())
    m2 = json.loads((two / "metrics.json").read_text())
    return m1, m2, run.stderr


def _check_same_training(m1: dict, m2: dict, stderr: str) -> None:
    """The same global batches, gradients averaged over ranks: the one-process run's updates,
    up to float summation order."""
    assert "2 process(es) on cpu" in stderr and stderr.count("wrote the selected") == 1
    for m in (m1, m2):
        _check_exactly_once(m)
    acc1, acc2 = (m["selected"]["dev"]["dev"]["accuracy"] for m in (m1, m2))
    assert abs(acc1 - acc2) <= 1 / N_DEV, (acc1, acc2)
    losses1 = [e["train_loss"] for e in m1["runs"][0]["epochs"]]
    losses2 = [e["train_loss"] for e in m2["runs"][0]["epochs"]]
    assert all(abs(a - b) < 1e-3 for a, b in zip(losses1, losses2, strict=True)), (losses1, losses2)
    assert losses1[-1] < 0.5 * losses1[0] and acc1 > 0.9  # it learnt: not two no-ops compared
    dev1, dev2 = ([e["dev"]["dev"]["accuracy"] for e in m["runs"][0]["epochs"]] for m in (m1, m2))
    assert all(abs(a - b) <= 1 / N_DEV for a, b in zip(dev1, dev2, strict=True)), (dev1, dev2)


@pytest.mark.slow
@pytest.mark.parametrize("accum, layer_decay", [(1, "1.0"), (2, "1.0"), (2, "0.8")])
def test_two_gloo_processes_match_one(
    tiny_model: Path, tmp_path: Path, accum: int, layer_decay: str
) -> None:
    extra = ["--layerwise-lr-decay", layer_decay]
    _check_same_training(*_one_and_two(tiny_model, tmp_path, accum, extra))


@pytest.mark.slow
def test_distillation_under_two_gloo_processes_matches_one(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Each rank's teacher reads half the training set and the rows are gathered
    (test_distill_ddp.py checks the rows): the student trains as it does alone."""
    teacher = tmp_path / "teacher"  # fine-tuned on the same data alone: a teacher that knows
    data = write_sentiment(tmp_path / "teacher-data", n_train=N_TRAIN, n_dev=N_DEV)
    plain = ["finetune", "glue", "--model", str(tiny_model), "--data-dir", str(data), *ARGS]
    assert main([*plain, "--precision", "fp32", "--output", str(teacher)]) == 0
    extra = ["--teacher", str(teacher), "--distill-alpha", "0.5", "--distill-temperature", "2"]
    m1, m2, stderr = _one_and_two(tiny_model, tmp_path, 1, extra)
    _check_same_training(m1, m2, stderr)
    assert m1["teacher"] == m2["teacher"] == str(teacher)
    assert stderr.count(f"teacher {teacher}: logits of {N_TRAIN} training examples") == 1
