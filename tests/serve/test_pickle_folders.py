"""A folder whose weights are only a ``pytorch_model.bin`` (older Hub checkpoints): refused at
start-up unless the server was started with --allow-pickle, then served with the same vectors as
its safetensors twin; a pickle that would run code is refused even then (weights_only)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertkit.errors import ConfigError
from bertkit.serve.settings import ServeSettings
from serve.conftest import serve


class _Payload:
    """Unpickling this would create the file ``canary`` (torch.load weights_only refuses it)."""

    def __init__(self, canary: str) -> None:
        self.canary = canary

    def __reduce__(self):
        return (open, (self.canary, "w"))


def _bin_only(src: Path, dst: Path) -> Path:
    """A copy of the folder ``src`` with its weights in pytorch_model.bin (plain tensors)."""
    shutil.copytree(src, dst)
    torch.save(load_file(dst / "model.safetensors"), dst / "pytorch_model.bin")
    (dst / "model.safetensors").unlink()
    return dst


def test_a_bin_folder_is_served_only_with_allow_pickle(tiny_mlm: Path, tmp_path: Path) -> None:
    folder = _bin_only(tiny_mlm, tmp_path / "bin")
    with pytest.raises(ConfigError, match="--allow-pickle"):
        ServeSettings(models=[str(folder)])
    body = {"inputs": ["the cat sat", "a dog"]}
    with serve(models=[str(tiny_mlm)]) as client:
        want = np.array(client.post("/embed", json=body).json())
    with serve(models=[str(folder)], allow_pickle=True) as client:
        got = client.post("/embed", json=body)
        assert got.status_code == 200
        np.testing.assert_allclose(np.array(got.json()), want, rtol=1e-5, atol=1e-6)
        fill = client.post("/fill-mask", json={"inputs": "the [MASK] sat"})
        assert fill.status_code == 200 and len(fill.json()[0][0]) > 0


def test_allow_pickle_still_refuses_code_in_the_pickle(tiny_mlm: Path, tmp_path: Path) -> None:
    folder = _bin_only(tiny_mlm, tmp_path / "evil")
    canary = tmp_path / "canary"
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump({"bert.embeddings.word_embeddings.weight": _Payload(str(canary))}, f)
    settings = ServeSettings(models=[str(folder)], allow_pickle=True)
    from bertkit.serve.engine import Engine
    from bertkit.serve.metrics import Metrics

    engine = Engine("evil", settings.named_models()["evil"], settings, Metrics())
    with pytest.raises(Exception, match="weights_only"):
        engine.load()
    assert not canary.exists()
