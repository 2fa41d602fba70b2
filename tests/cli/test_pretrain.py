"""``bertkit pretrain`` end to end: SIGKILL + rerun is bit-identical; final model loads in transformers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training.helpers import prepare_tiny_corpus

STEPS = 24
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "BERTKIT_PROGRESS": "0", "HF_HUB_OFFLINE": "1"}


def _cmd(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bertkit",
        "pretrain",
        "--data",
        str(data),
        "--output",
        str(out),
        "--max-steps",
        str(STEPS),
        "--batch-size",
        "8",
        "--save-every",
        "5",
        "--log-every",
        "1",
        "--warmup-steps",
        "4",
        "--learning-rate",
        "1e-3",
        "--threads",
        "1",
        "--peak-tflops",
        "1",
        "--dropout",
        "0.1",
        *extra,
    ]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def _kill_after_checkpoint(cmd: list[str], out: Path, step: int) -> None:
    """Start ``cmd``, SIGKILL it once checkpoint ``step`` exists, assert it was still running."""
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    target = out / "checkpoints" / f"step-{step:09d}" / "manifest.json"
    deadline = time.monotonic() + 240
    while not target.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL


def _train_log(out: Path) -> list[tuple[int, float, float]]:
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"], r["lr"]) for r in recs if r["type"] == "train"]


def _final(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model" / "model.safetensors"))


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return prepare_tiny_corpus(tmp_path_factory.mktemp("corpus"), dynamic=True)


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    _run(_cmd(data, out))
    return out


def test_sigkill_and_rerun_is_bit_identical(data, reference, tmp_path):
    out = tmp_path / "run"
    _kill_after_checkpoint(_cmd(data, out), out, 10)
    assert len(_train_log(out)) < STEPS
    # also damage the newest checkpoint: the rerun must notice and fall back to the previous one
    newest = max((out / "checkpoints").glob("step-*"))
    blob = newest / "model.safetensors"
    blob.write_bytes(blob.read_bytes()[:-100])
    p = _run(_cmd(data, out))
    assert f"skipping checkpoint {newest.name}" in p.stderr and "truncated" in p.stderr
    assert "resumed from" in p.stderr
    resumed = int(p.stderr.split("resumed from ")[1].split("(step ")[1].split(")")[0])
    assert (
        f"done: {STEPS} steps (0 skipped, {STEPS - resumed} this run from step {resumed})"
        in p.stdout
    )
    assert _train_log(out) == _train_log(reference)
    assert [s for s, _, _ in _train_log(out)] == list(range(1, STEPS + 1))
    assert _same(_final(out), _final(reference))
    last = f"checkpoints/step-{STEPS:09d}"
    for name in ("optimizer.safetensors", "rng.safetensors"):
        assert _same(load_file(str(out / last / name)), load_file(str(reference / last / name)))
    state = json.loads((out / last / "state.json").read_text())
    assert state == json.loads((reference / last / "state.json").read_text())
    # rerunning a finished run trains nothing, says so, and leaves the result as it is
    again = _run(_cmd(data, out))
    assert f"done: nothing to train: the run had finished its {STEPS} steps" in again.stdout
    assert _train_log(out) == _train_log(reference)


def test_resume_without_cursor_and_rng_differs(data, reference, tmp_path):
    out = tmp_path / "run"
    cmd = _cmd(data, out, "--debug-no-restore", "both")
    _kill_after_checkpoint(cmd, out, 10)
    _run(cmd)
    log, ref = _train_log(out), _train_log(reference)
    assert log[:10] == ref[:10]
    assert [x[1] for x in log[10:]] != [x[1] for x in ref[10:]]
    assert not _same(_final(out), _final(reference))


def test_final_model_loads_in_transformers(reference):
    from transformers import BertForPreTraining

    model = BertForPreTraining.from_pretrained(str(reference / "model"))
    ours = _final(reference)
    hf = {k: v for k, v in model.state_dict().items()}
    assert torch.equal(
        hf["bert.embeddings.word_embeddings.weight"], ours["bert.embeddings.word_embeddings.weight"]
    )
    assert (reference / "curves.png").stat().st_size > 0


@pytest.mark.slow
def test_torchrun_two_processes_match_one(data, tmp_path):
    """The same command under ``torchrun --nproc-per-node 2`` (gloo) gives the 1-process losses."""
    # fp32 on both sides: auto is bf16 where bf16 is faster, and the in-process run's auto is fp32
    base = ["--dropout", "0.0", "--max-steps", "6", "--precision", "fp32"]
    one, two = tmp_path / "one", tmp_path / "two"
    _run([*_cmd(data, one), *base])
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "bertkit",
        *_cmd(data, two)[3:],
        *base,
    ]
    out = _run(torchrun).stdout
    assert out.count("done: 6 steps") == 1 and out.count("held-out") <= 1  # rank 0 reports
    a, b = _train_log(one), _train_log(two)
    assert len(a) == len(b) == 6
    assert all(x[0] == y[0] and abs(x[1] - y[1]) < 1e-5 for x, y in zip(a, b))


def test_init_from_warm_starts_weights_only(data, reference, tmp_path):
    out = tmp_path / "warm"
    p = _run([*_cmd(data, out), "--max-steps", "6", "--init-from", str(reference / "model")])
    assert "warm start" in p.stderr
    warm, fresh = _train_log(out), _train_log(reference)
    assert warm[0][1] < fresh[0][1] - 0.05  # starts from the trained weights ...
    assert warm[0][2] == 0.0  # ... with a fresh schedule (warmup from lr 0)
