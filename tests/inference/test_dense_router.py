"""Dense sentence-transformers ``Router`` folders (an asymmetric bi-encoder: a query BERT and a
document BERT) against sentence-transformers' encode_query / encode_document / encode on tiny
random folders it saved: vectors within 1e-5 (the query route cut at its own max_seq_length),
one encoder in memory when the routes are the same modules or copies, the retrieval metrics of
its InformationRetrievalEvaluator within 1e-6; and the modules bertkit refuses, by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertkit.data.tasks.retrieval import RetrievalSet
from bertkit.errors import CheckpointError, ConfigError
from bertkit.inference import Embedder
from bertkit.inference.retrieval import evaluate_retrieval
from bertkit.tasks.windows import WindowConfig
from support.tiny_router import QUERY_MAX_LENGTH, saved_dense_router

TEXTS = [
    "the cat sat on the mat",
    "dog",
    # 17 tokens: the query route cuts it at 10, the document route reads it whole
    "a big red house by the river , a small blue tree on the road . the dog ran",
]
FP32 = {"precision": "fp32", "device": "cpu", "windows": WindowConfig(truncate=True)}


@pytest.mark.parametrize("query", ["other", "shared", "copy", "dense"])
def test_tasks_equal_sentence_transformers(tmp_path: Path, query: str) -> None:
    pytest.importorskip("sentence_transformers")
    folder, st = saved_dense_router(tmp_path, query)
    model = Embedder.load(folder, **FP32)
    ref = {
        "query": st.encode_query,  # type: ignore[attr-defined]
        "document": st.encode_document,  # type: ignore[attr-defined]
        None: st.encode,  # type: ignore[attr-defined]
    }
    for task, encode in ref.items():
        np.testing.assert_allclose(model.for_task(task)(TEXTS), encode(TEXTS), atol=1e-5, rtol=0)
    queries, documents = model.for_task("query"), model.for_task("document")
    assert model is documents and model.folder == folder  # default_route: document
    if query == "dense":  # the query route's projection (tanh) after its [CLS] pooling
        assert [m.path.name for m in queries.spec.dense] == ["query_2_Dense"]
        assert not documents.spec.dense and queries.dim == documents.dim == 32
    if query in ("other", "dense"):  # two encoders, their own pooling, normalisation and length
        assert queries.model is not documents.model
        assert (queries.spec.pooling, queries.spec.normalize) == ("cls", False)
        assert (documents.spec.pooling, documents.spec.normalize) == ("mean", True)
        assert queries.max_length == QUERY_MAX_LENGTH < documents.max_length
        assert not np.allclose(queries(TEXTS), documents(TEXTS), atol=1e-2)
    else:  # one encoder in memory
        assert queries is documents


@pytest.mark.parametrize(
    ("query", "match"),
    [
        (
            "layernorm",
            r"query route is Transformer -> Pooling -> LayerNorm .*does not compute LayerNorm "
            r"\(query_2_LayerNorm\)",
        ),
        ("static", r"does not compute StaticEmbedding \(query_0_StaticEmbedding\)"),
    ],
)
def test_modules_bertkit_cannot_compute_are_refused_by_name(
    tmp_path: Path, query: str, match: str
) -> None:
    pytest.importorskip("sentence_transformers")
    folder, _ = saved_dense_router(tmp_path, query)
    with pytest.raises(CheckpointError, match=match) as err:
        Embedder.load(folder, **FP32)
    assert str(folder) in str(err.value)


def test_a_pooling_forced_on_every_route_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    folder, _ = saved_dense_router(tmp_path)
    with pytest.raises(ConfigError, match=r"routes declare their own pooling, max_length"):
        Embedder.load(folder, pooling="cls", max_length=8, **FP32)


DOCS = {
    "d0": "the cat sat on the mat",
    "d1": "a big dog ran on the road",
    "d2": "the small red house by the river",
    "d3": "a blue tree on the road",
    "d4": "the big river ran",
    "d5": "a small cat , a big dog",
    "d6": "red house . blue house .",
    "d7": "the dog sat on a big mat by the tree on the road by the river",
}
QUERIES = {
    "q1": "cat on the mat",
    "q2": "big dog",
    "q3": "river house",
    "q4": "blue tree",
    "q5": "the road by the river , a small red house and a big blue tree",  # cut at 10
}
QRELS = {
    "q1": {"d0": 1},
    "q2": {"d1": 1, "d5": 1},
    "q3": {"d2": 1, "d6": 1},
    "q4": {"d3": 1},
    "q5": {"d7": 1, "d2": 1},
}
KS = [1, 3, 10]


def test_retrieval_metrics_equal_information_retrieval_evaluator(tmp_path: Path) -> None:
    """The evaluator encodes queries with encode_query and the corpus with encode_document:
    each through its own route."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    folder, st = saved_dense_router(tmp_path)
    ev = InformationRetrievalEvaluator(
        QUERIES,
        DOCS,
        {q: set(r) for q, r in QRELS.items()},
        mrr_at_k=[10],
        ndcg_at_k=[10],
        accuracy_at_k=KS,
        precision_recall_at_k=KS,
        map_at_k=[100],
        name="t",
        write_csv=False,
    )
    ref = ev(st)
    data = RetrievalSet(DOCS, QUERIES, QRELS)
    got = evaluate_retrieval(Embedder.load(folder, **FP32), data)["retrieval"]
    pairs = {"MRR@10": "mrr@10", "NDCG@10": "ndcg@10", "MAP@100": "map@100"}
    for k in KS:
        for name in ("Recall", "Accuracy", "Precision"):
            pairs[f"{name}@{k}"] = f"{name.lower()}@{k}"
    for ours, theirs in pairs.items():
        assert got[ours] == pytest.approx(ref[f"t_cosine_{theirs}"], abs=1e-6), ours
    assert 0 < got["Recall@1"] < 1  # not a vacuous match
