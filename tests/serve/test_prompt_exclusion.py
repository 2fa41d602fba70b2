"""A served folder whose Pooling leaves prompt tokens out (``include_prompt: false``): a named
prompt is a 422 with the reason, plain requests are served as sentence-transformers encodes
them, and a folder whose default prompt would go before every text is refused at load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import CheckpointError
from bertkit.serve.engine import Engine
from bertkit.serve.metrics import Metrics
from bertkit.serve.settings import ServeSettings

from .conftest import serve

st = pytest.importorskip("sentence_transformers")

TEXTS = ["the cat sat", "a dog"]


def _excluding(tiny_mlm: Path, out: Path, default: str | None) -> Path:
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    t = Transformer(str(tiny_mlm))
    pooling = Pooling(t.get_embedding_dimension(), "mean", include_prompt=False)
    prompts = {"query": "the cat "}
    model = st.SentenceTransformer(
        modules=[t, pooling], device="cpu", prompts=prompts, default_prompt_name=default
    )
    model.save(str(out))
    return out


def test_a_named_prompt_is_a_422(tiny_mlm: Path, tmp_path: Path) -> None:
    folder = _excluding(tiny_mlm, tmp_path / "m", None)
    theirs = st.SentenceTransformer(str(folder), device="cpu")
    want = theirs.encode(TEXTS, normalize_embeddings=True)  # /embed normalises by default
    with serve(models=[str(folder)]) as client:
        plain = client.post("/embed", json={"inputs": TEXTS})
        assert plain.status_code == 200
        np.testing.assert_allclose(np.array(plain.json()), want, rtol=0, atol=1e-5)
        named = client.post("/embed", json={"inputs": TEXTS, "prompt_name": "query"})
        assert named.status_code == 422
        assert "include_prompt false" in json.dumps(named.json())


def test_a_default_prompt_is_refused_at_load(tiny_mlm: Path, tmp_path: Path) -> None:
    folder = _excluding(tiny_mlm, tmp_path / "m", "query")
    settings = ServeSettings(models=[f"m={folder}"], device="cpu")
    engine = Engine("m", settings.named_models()["m"], settings, Metrics())
    with pytest.raises(CheckpointError, match="include_prompt is false"):
        engine.load()
