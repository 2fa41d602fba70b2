"""save_token_features: the vectors and their index are one output; a write that fails between
them leaves the previous pair, never new vectors with the old index."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.inference import token_features
from bertkit.inference.token_features import TokenFeatures, save_token_features


def features(value: float, n: int) -> list[TokenFeatures]:
    return [TokenFeatures(np.full((n, 4), value), ["a"] * n, [(i, i + 1) for i in range(n)])]


def test_the_pair_is_written_and_a_failed_index_keeps_the_previous_pair(
    tmp_path: Path, monkeypatch
):
    path = tmp_path / "tokens.npy"
    index = save_token_features(path, features(1.0, 2))
    assert index == tmp_path / "tokens.jsonl"
    assert np.load(path).shape == (2, 4)
    assert json.loads(index.read_text())["tokens"] == ["a", "a"]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(token_features, "json", SimpleNamespace(dumps=full_disk))
    with pytest.raises(BertkitError, match="No space left"):
        save_token_features(path, features(2.0, 3))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
