"""Atomic checkpoints: round trip, sha256 verification with fallback, keep-last, no pickle."""

from __future__ import annotations

import errno
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.errors import CheckpointError
from bertkit.training import checkpoint as ckpt
from bertkit.training import rng_state


def _save(root, step, keep_last=3, **kw):
    return ckpt.save_checkpoint(
        root,
        step,
        model={"w": torch.full((2, 3), float(step))},
        optimizer={"state.0.exp_avg": torch.ones(2)},
        rng=rng_state.capture_rng(),
        state={"cursor": {"position": step}},
        keep_last=keep_last,
        **kw,
    )


def test_round_trip_and_keep_last(tmp_path):
    for step in (1, 2, 3, 4):
        _save(tmp_path, step)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [
        "step-000000004",
        "step-000000003",
        "step-000000002",
    ]
    c = ckpt.load_latest(tmp_path)
    assert c.step == 4 and torch.equal(c.model["w"], torch.full((2, 3), 4.0))
    assert c.state["cursor"] == {"position": 4}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("damage", ["flip", "truncate", "no_manifest", "missing_file"])
def test_corrupt_latest_falls_back_with_warning(tmp_path, damage):
    _save(tmp_path, 1)
    latest = _save(tmp_path, 2)
    target = latest / "model.safetensors"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[-1] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-7])
    elif damage == "no_manifest":
        (latest / "manifest.json").unlink()
    else:
        (latest / "optimizer.safetensors").unlink()
    with pytest.warns(ckpt.CheckpointWarning, match="step-000000002"):
        c = ckpt.load_latest(tmp_path)
    assert c.step == 1


def test_interrupted_write_leaves_no_checkpoint(tmp_path, monkeypatch):
    _save(tmp_path, 1)

    def boom(*a, **k):
        raise KeyboardInterrupt  # a kill between the files and the manifest

    monkeypatch.setattr(ckpt, "sha256_file", boom)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, 2)
    monkeypatch.undo()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-000000001"]
    ckpt.clean_stale(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["step-000000001"]


def test_loading_never_unpickles(tmp_path, monkeypatch):
    _save(tmp_path, 1)
    for p in (tmp_path / "step-000000001").iterdir():
        assert p.suffix in (".safetensors", ".json")

    def refuse(*a, **k):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert ckpt.load_latest(tmp_path).step == 1


def test_rng_capture_restore_round_trip():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # leaves a cached gaussian in Python's state
    np.random.standard_normal()
    state = rng_state.capture_rng()
    expected = (
        random.random(),
        random.gauss(0, 1),
        np.random.rand(),
        np.random.standard_normal(),
        torch.rand(3),
    )
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    rng_state.restore_rng(state)
    got = (
        random.random(),
        random.gauss(0, 1),
        np.random.rand(),
        np.random.standard_normal(),
        torch.rand(3),
    )
    assert got[:4] == expected[:4] and torch.equal(got[4], expected[4])


def test_rng_capture_leaves_cuda_alone_until_the_run_has_used_it(monkeypatch):
    """On a CUDA machine, a run that never touched CUDA (a CPU run) stores no CUDA streams: reading
    them would create a CUDA context (GPU memory, a slow start) for nothing."""
    read: list[str] = []

    def get_rng_state_all():
        read.append("cuda")
        return [torch.zeros(16, dtype=torch.uint8)]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", get_rng_state_all)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert not any(k.startswith("cuda_") for k in rng_state.capture_rng())
    assert read == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert "cuda_0" in rng_state.capture_rng()
    assert read == ["cuda"]


def test_resaving_a_step_keeps_the_old_one_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    first = _save(tmp_path, 1)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    real = os.replace

    def replace(src, dst):  # the new folder's rename fails (an I/O error, a kill just before)
        if Path(src).name.startswith(".tmp-"):
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace)
    with pytest.raises(CheckpointError, match="step-000000001: cannot write the checkpoint"):
        _save(tmp_path, 1)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["step-000000001"]
    assert ckpt.load_latest(tmp_path).step == 1
