"""Malicious pickles never run: every loading path, API and CLI, refuses them by default, and with
``allow_pickle`` / ``--allow-pickle`` torch.load(weights_only=True) still refuses them.

Payloads (see payloads.py): a bare pickle, torch.save zip and legacy formats, and the nested
``torch.storage._load_from_bytes`` variant; each would create a canary file if unpickled (checked
by a positive control). Paths: ``load_pretrained`` / ``load_with_report``, ``bertkit embed``,
``fill-mask``, ``finetune --model``, ``evaluate``, ``predict``, ``pretrain --init-from`` and
``pretrain`` resume with malicious ``.pt``/``.bin`` files planted in the run and checkpoint folders
and a pickle disguised as a checkpoint's ``optimizer.safetensors`` (with a matching manifest).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.errors import CheckpointError
from bertkit.interop import load_pretrained, load_with_report, save_pretrained
from bertkit.io import sha256_file
from bertkit.model import BertForMaskedLM
from bertkit.tokenizer import BertTokenizer
from training.helpers import prepare_tiny_corpus

from .payloads import KINDS, payload_works, write_payload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _model_dir(root: Path, kind: str, canary: Path, task: bool = False) -> Path:
    """A tiny model folder (config + vocab) whose only weights are a malicious pytorch_model.bin."""
    d = root / f"model-{kind}"
    tok = BertTokenizer(FIXTURES / "tok_vocab.txt")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    save_pretrained(BertForMaskedLM(config), d, tok)
    (d / "model.safetensors").unlink()
    write_payload(d / "pytorch_model.bin", kind, canary)
    if task:  # what `bertkit finetune` saves next to the model, for evaluate/predict
        from bertkit.tasks import ClassificationAdapter

        ClassificationAdapter("glue", "SST-2", 32, labels=["0", "1"], metric="accuracy").save(d)
    return d


def _one_line_error(capsys, *needles: str) -> str:
    """The command ended with one ``bertkit CMD: error: ...`` line (progress lines may precede it)."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]
    assert last.startswith("bertkit ") and ": error: " in last and err.count(": error: ") == 1, err
    for needle in needles:
        assert needle in last, err
    return last


@pytest.mark.parametrize("kind", KINDS)
def test_payloads_are_live(tmp_path, kind):
    """Positive control: unpickled unsafely, every payload does create its canary."""
    assert payload_works(kind, tmp_path)


@pytest.mark.parametrize("kind", KINDS)
def test_api_refuses_by_default_and_weights_only_refuses_when_allowed(tmp_path, kind):
    canary = tmp_path / "canary"
    d = _model_dir(tmp_path, kind, canary)
    for load in (load_pretrained, load_with_report):
        with pytest.raises(CheckpointError, match=r"pickle file.*allow_pickle=True"):
            load(d)
        with pytest.raises(CheckpointError, match=r"weights_only=True\): it references \S+"):
            load(d, allow_pickle=True)
    assert not canary.exists()


@pytest.mark.parametrize("kind", ["torch", "nested"])
def test_pickle_disguised_as_safetensors_is_refused(tmp_path, kind):
    canary = tmp_path / "canary"
    d = _model_dir(tmp_path, kind, canary)
    (d / "pytorch_model.bin").rename(d / "model.safetensors")
    with pytest.raises(CheckpointError, match="cannot read safetensors weights"):
        load_pretrained(d, allow_pickle=True)
    assert not canary.exists()


def _inference_commands(d: Path, tmp_path: Path) -> dict[str, list[str]]:
    text = tmp_path / "in.txt"
    text.write_text("a warm film\n")
    data = FIXTURES / "task_glue" / "SST-2"
    out = tmp_path / "out"
    return {
        "embed": ["embed", "--model", str(d), "--input", str(text), "--output", str(out / "v.npy")],
        "fill-mask": ["fill-mask", "--model", str(d), "--input", str(text)],
        "finetune": [
            "finetune",
            "glue",
            "--task",
            "SST-2",
            "--data-dir",
            str(data),
            "--model",
            str(d),
            "--output",
            str(out / "ft"),
            "--epochs",
            "1",
            "--max-seq-length",
            "32",
        ],
        "evaluate": [
            "evaluate",
            "--model",
            str(d),
            "--data",
            str(data / "dev.tsv"),
            "--output",
            str(out / "metrics.json"),
        ],
        "predict": [
            "predict",
            "--model",
            str(d),
            "--input",
            str(data / "test.tsv"),
            "--output",
            str(out / "pred.jsonl"),
        ],
    }


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["embed", "fill-mask", "finetune", "evaluate", "predict"])
def test_cli_commands_refuse(tmp_path, capsys, kind, command):
    canary = tmp_path / "canary"
    d = _model_dir(tmp_path, kind, canary, task=command in ("evaluate", "predict"))
    argv = _inference_commands(d, tmp_path)[command]
    assert main(argv) == 1
    _one_line_error(capsys, "pytorch_model.bin", "pickle")
    if command in ("embed", "fill-mask", "finetune"):  # the commands with --allow-pickle
        assert main([*argv, "--allow-pickle"]) == 1
        _one_line_error(capsys, "pytorch_model.bin", "weights_only=True")
    assert not canary.exists()
    out = tmp_path / "out"
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return prepare_tiny_corpus(tmp_path_factory.mktemp("corpus"), docs=12, holdout=0.0)


def _pretrain(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "pretrain",
        "--data",
        str(data),
        "--output",
        str(out),
        "--max-steps",
        "4",
        "--batch-size",
        "4",
        "--save-every",
        "2",
        "--log-every",
        "1",
        "--warmup-steps",
        "1",
        "--threads",
        "1",
        "--peak-tflops",
        "1",
        "--no-progress",
        *extra,
    ]


@pytest.mark.parametrize("kind", ["torch", "nested"])
def test_pretrain_init_from_refuses(tmp_path, capsys, data, kind):
    canary = tmp_path / "canary"
    d = _model_dir(tmp_path, kind, canary)
    assert main(_pretrain(data, tmp_path / "run", "--init-from", str(d))) == 1
    _one_line_error(capsys, "pytorch_model.bin", "pickle")
    assert not canary.exists()


def test_pretrain_resume_ignores_planted_pickles(tmp_path, capsys, data):
    canary = tmp_path / "canary"
    run = tmp_path / "run"
    assert main(_pretrain(data, run)) == 0
    reference = (run / "model" / "model.safetensors").read_bytes()
    ckpts = run / "checkpoints"
    newest, previous = ckpts / "step-000000004", ckpts / "step-000000002"
    # files a torch-based trainer would load on resume, all malicious
    for folder in (run, newest, previous):
        for name in (
            "optimizer.pt",
            "scheduler.pt",
            "rng_state.pth",
            "training_args.bin",
            "pytorch_model.bin",
            "trainer_state.pt",
        ):
            write_payload(folder / name, "nested", canary)
    # a pickle disguised as the newest checkpoint's optimizer state, with a matching manifest
    fake = write_payload(newest / "optimizer.safetensors", "torch", canary)
    manifest = json.loads((newest / "manifest.json").read_text())
    manifest["files"]["optimizer.safetensors"] = {
        "sha256": sha256_file(fake),
        "bytes": fake.stat().st_size,
    }
    (newest / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(_pretrain(data, run)) == 0
    err = capsys.readouterr().err
    assert "skipping checkpoint step-000000004" in err and "optimizer.safetensors" in err, err
    assert f"resumed from {previous}" in err, err
    assert not canary.exists()
    # steps 3-4 retrained from step 2 give the same final weights as the uninterrupted run
    assert (run / "model" / "model.safetensors").read_bytes() == reference
    # the malicious optimizer file also never reaches the loader directly
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(previous / "optimizer.pt", weights_only=True)
    assert not canary.exists()


def test_pretrain_and_resume_never_pickle(tmp_path, data, monkeypatch):
    """Training state goes to safetensors + JSON only: a whole pretrain run and its resume work
    with every pickle and torch.save/torch.load entry point disabled."""
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("dump", "dumps", "load", "loads"):  # (torch subclasses the classes on import)
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "save", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    run = tmp_path / "run"
    assert main(_pretrain(data, run)) == 0
    checkpoints = sorted((run / "checkpoints").iterdir())
    assert [p.name for p in checkpoints] == ["step-000000002", "step-000000004"]
    shutil.rmtree(checkpoints[-1])  # lose the last checkpoint: the rerun resumes from step 2
    assert main(_pretrain(data, run)) == 0
    assert (run / "checkpoints" / "step-000000004" / "manifest.json").is_file()
    for p in run.rglob("*"):
        if p.is_file():
            assert p.suffix in (".safetensors", ".json", ".jsonl", ".txt", ".png"), p
