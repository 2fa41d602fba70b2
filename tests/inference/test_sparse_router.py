"""Inference-free SPLADE (a sentence-transformers SparseEncoder ``Router``: static query weights,
SPLADE documents) against sentence-transformers' encode_query / encode_document / encode on tiny
random folders it saved: the same non-zero entries and values within 1e-5, max_active_dims
included; and the Router layouts bertkit refuses, by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import CheckpointError, ConfigError
from bertkit.inference.sparse import SparseEmbedder
from bertkit.inference.token_ids import TokenIds
from bertkit.interop.sentence_folder import splade_spec
from bertkit.tasks.windows import WindowConfig
from support.tiny_splade import QUERY_MAX_SEQ_LENGTH, saved_router_encoder

TEXTS = [
    "the cat cat sat on the mat",  # "cat" twice: counted once; "the", "on": weight 0
    "dog",
    "big",  # only a weight-0 token: an empty query vector
    "a big red house by the river , a small blue tree on the road .",  # 15 tokens: cut at 12
    "",
]
FP32 = {"precision": "fp32", "device": "cpu", "windows": WindowConfig(truncate=True)}


def assert_same(got: list, want: np.ndarray) -> None:
    for vec, row in zip(got, want, strict=True):
        nz = np.flatnonzero(row)
        assert vec.indices.tolist() == nz.tolist()
        assert vec.indices.dtype == np.int64 and vec.values.dtype == np.float32
        np.testing.assert_allclose(vec.values, row[nz], atol=1e-5, rtol=0)


def dense(vectors: object) -> np.ndarray:
    return vectors.to_dense().cpu().numpy()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("query", "cap"),
    [("static", None), ("static", 3), ("shared", None), ("copy", None), ("splade", None)],
    ids=str,
)
def test_tasks_equal_sentence_transformers(tmp_path: Path, query: str, cap: int | None) -> None:
    pytest.importorskip("sentence_transformers")
    folder, st = saved_router_encoder(tmp_path, query, max_active_dims=cap)
    model = SparseEmbedder.load(folder, **FP32)
    assert (model.query_route is not None) == (query in ("static", "splade"))
    assert model.spec.max_active_dims == cap
    ref = {
        "query": st.encode_query,  # type: ignore[attr-defined]
        "document": st.encode_document,  # type: ignore[attr-defined]
        None: st.encode,  # type: ignore[attr-defined]
    }
    for task, encode in ref.items():
        assert_same(model.encode(TEXTS, task), dense(encode(TEXTS, convert_to_tensor=True)))
    if query == "static":  # not a vacuous match: the routes differ, weights 0 and < 0 seen
        q, d = model.encode(TEXTS[:1], "query")[0], model.encode(TEXTS[:1], "document")[0]
        assert q.indices.tolist() != d.indices.tolist()
        assert 5 not in q.indices and 6 in q.indices
        assert model.encode(["big"], "query")[0].indices.size == 0
        every = model.query_route.embed(TEXTS[3:4])  # type: ignore[union-attr]
        assert every[1].truncated == 1
        if cap is None:
            assert (model.query_route.weight < 0).any()  # type: ignore[union-attr]
    if query == "splade":  # a second encoder: its own weights, sum pooling and length
        route = model.query_route
        assert isinstance(route, SparseEmbedder) and route.model is not model.model
        assert route.spec.pooling_strategy == "sum" and model.spec.pooling_strategy == "max"
        assert route.embedder.max_length == QUERY_MAX_SEQ_LENGTH
        q, d = model.encode(TEXTS[:1], "query")[0], model.encode(TEXTS[:1], "document")[0]
        assert not np.allclose(q.values[: len(d.values)], d.values[: len(q.values)], atol=1e-2)


def test_query_route_takes_token_ids_and_the_prompt(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    folder, st = saved_router_encoder(tmp_path)
    config_path = folder / "config_sentence_transformers.json"
    config = json.loads(config_path.read_text())
    config["prompts"] = {"query": "red river ", "document": "blue "}
    config_path.write_text(json.dumps(config))
    model = SparseEmbedder.load(folder, **FP32)
    from sentence_transformers import SparseEncoder

    st = SparseEncoder(str(folder), device="cpu")
    assert_same(model.encode(TEXTS, "query"), dense(st.encode_query(TEXTS, convert_to_tensor=True)))
    ids = model.tokenizer.encode("cat dog", add_special_tokens=False).input_ids
    (by_ids,), _ = model.embed([TokenIds(ids)], "query")
    assert by_ids.indices.tolist() == sorted(ids)
    with pytest.raises(ConfigError, match="task must be one of query, document"):
        model.encode(TEXTS, "passage")


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("dense", r"document route is Transformer -> Pooling \(document_0_Transformer"),
    ],
)
def test_routers_bertkit_cannot_serve_are_refused_by_name(
    tmp_path: Path, query: str, match: str
) -> None:
    pytest.importorskip("sentence_transformers")
    folder, _ = saved_router_encoder(tmp_path, query)
    with pytest.raises(CheckpointError, match=match) as err:
        SparseEmbedder.load(folder, **FP32)
    assert str(folder) in str(err.value)
    assert splade_spec(folder) is None  # a dense Router: `bertkit embed` reads it dense


def test_unknown_modules_beside_the_router_are_refused(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    folder, _ = saved_router_encoder(tmp_path)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 1, "name": "1", "path": "1_X", "type": "my_pkg.SparseMagic"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(CheckpointError, match=r"the Router and other modules \(SparseMagic\)"):
        SparseEmbedder.load(folder, **FP32)
