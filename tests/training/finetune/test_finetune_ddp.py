"""Fine-tuning under torchrun: 2 gloo processes (the launcher pre-training uses) reach the dev
metric of 1 process, every training example is used exactly once per epoch, rank 0 alone selects
and saves; with --grad-accum 2 as well (each rank's share in 2 micro-batches: the same updates),
and with layer-wise learning-rate decay on top (the groups' rates are the same on every rank)."""

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


@pytest.mark.slow
@pytest.mark.parametrize("accum, layer_decay", [(1, "1.0"), (2, "1.0"), (2, "0.8")])
def test_two_gloo_processes_match_one(
    tiny_model: Path, tmp_path: Path, accum: int, layer_decay: str
) -> None:
    data = write_sentiment(tmp_path / "data", n_train=N_TRAIN, n_dev=N_DEV)
    common = ["finetune", "glue", "--model", str(tiny_model), "--data-dir", str(data), *ARGS]
    common += ["--layerwise-lr-decay", layer_decay]
    common += ["--precision", "fp32"]  # auto is bf16 where faster; the in-process run's is fp32
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
    m1 = json.loads((one / "metrics.json").read_text())
    m2 = json.loads((two / "metrics.json").read_text())
    assert "2 process(es) on cpu" in run.stderr and run.stderr.count("wrote the selected") == 1
    for m in (m1, m2):
        _check_exactly_once(m)
    # the same global batches, gradients averaged over ranks: the one-process run's updates, up
    # to float summation order
    acc1, acc2 = (m["selected"]["dev"]["dev"]["accuracy"] for m in (m1, m2))
    assert abs(acc1 - acc2) <= 1 / N_DEV, (acc1, acc2)
    losses1 = [e["train_loss"] for e in m1["runs"][0]["epochs"]]
    losses2 = [e["train_loss"] for e in m2["runs"][0]["epochs"]]
    assert all(abs(a - b) < 1e-3 for a, b in zip(losses1, losses2, strict=True)), (losses1, losses2)
    assert losses1[-1] < 0.5 * losses1[0] and acc1 > 0.9  # it learnt: not two no-ops compared
    dev1, dev2 = ([e["dev"]["dev"]["accuracy"] for e in m["runs"][0]["epochs"]] for m in (m1, m2))
    assert all(abs(a - b) <= 1 / N_DEV for a, b in zip(dev1, dev2, strict=True)), (dev1, dev2)
    assert (two / "config.json").is_file() and (two / "model.safetensors").is_file()
