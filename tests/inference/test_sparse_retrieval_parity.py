"""Retrieval with a SPLADE model (bertkit.inference.retrieval.sparse_search through
evaluate_retrieval) scores what sentence-transformers' SparseInformationRetrievalEvaluator scores
with the same SparseEncoder folder: every shared metric and the sparsity figures within 1e-6,
with the folder's max_active_dims, with query and document prompts, and with exact ties between
documents whose ids sort differently from their positions; and for a Router folder (queries by
static weights or by their own SPLADE encoder, documents by SPLADE)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.data.tasks.retrieval import RetrievalSet
from bertkit.inference.retrieval import evaluate_retrieval
from bertkit.inference.sparse import SparseEmbedder
from bertkit.tasks.windows import WindowConfig
from support.tiny_splade import saved_router_encoder, saved_sparse_encoder

DOCS = {
    "d0": "the cat sat on the mat",
    "d7": "a big dog ran on the road",
    "d10": "the small red house by the river",
    "d2": "a blue tree on the road",
    "d11": "the cat sat on the mat",  # the same text as d0: an exact tie, d0 sorts first
    "d3": "the big river ran",
    "d9": "a small cat , a big dog",
    "d1": "red house . blue house .",
    "d12": "the dog sat on a big mat by the tree on the road by the river",  # cut at 12
    "d4": "tree",
    "d20": "a big dog ran on the road",  # the same text as d7: "d20" sorts before "d7"
    "d5": "the road by the river",
}
QUERIES = {
    "q1": "cat on the mat",
    "q2": "big dog",
    "q3": "river house",
    "q4": "blue tree",
    "q5": "road",
    "q6": "small cat",
    "q7": "nothing judged",  # no qrels: not counted, not embedded
}
QRELS = {
    "q1": {"d11": 1},
    "q2": {"d20": 1, "d9": 1},
    "q3": {"d10": 1, "d1": 1, "d5": 1},
    "q4": {"d2": 1},
    "q5": {"d4": 1, "d12": 1},
    "q6": {"d9": 1, "d3": 0},  # a judged non-relevant document counts for nothing
}
KS = [1, 3, 10, 100]


def reference(folder: Path, data: RetrievalSet, max_active_dims: int | None) -> dict:
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.evaluation import (
        SparseInformationRetrievalEvaluator,
    )

    ev = SparseInformationRetrievalEvaluator(
        data.queries,
        data.corpus,
        {q: {d for d, v in rel.items() if v > 0} for q, rel in data.qrels.items()},
        mrr_at_k=[10],
        ndcg_at_k=[10],
        accuracy_at_k=KS,
        precision_recall_at_k=KS,
        map_at_k=[100],
        corpus_chunk_size=5,  # several chunks: the corpus figures are their weighted mean
        max_active_dims=max_active_dims,
        name="t",
        write_csv=False,
    )
    return ev(SparseEncoder(str(folder), device="cpu"))


@pytest.mark.parametrize(
    ("pooling", "prompts", "max_active_dims"),
    [
        ({}, None, None),
        ({"pooling_strategy": "sum", "max_active_dims": 6}, None, None),
        ({}, {"query": "a big ", "document": "the red ", "passage": "tree "}, None),
        # neither "passage" nor the default prompt reaches encode_document (sentence-transformers
        # 6 fills "document" with "")
        ({}, {"other": "blue ", "passage": "tree "}, 5),
    ],
    ids=["max", "sum-capped", "prompts", "unused-prompts-evaluator-cap"],
)
def test_metrics_and_sparsity_equal_sentence_transformers(
    tmp_path: Path, pooling: dict, prompts: dict | None, max_active_dims: int | None
) -> None:
    pytest.importorskip("sentence_transformers")
    folder, _ = saved_sparse_encoder(tmp_path, **pooling)
    if prompts is not None:
        config_path = folder / "config_sentence_transformers.json"
        config = json.loads(config_path.read_text())
        config["prompts"] = prompts
        config["default_prompt_name"] = "other" if "other" in prompts else None
        config_path.write_text(json.dumps(config))
    data = RetrievalSet(DOCS, QUERIES, QRELS)
    model = SparseEmbedder.load(
        folder,
        max_active_dims=max_active_dims,
        precision="fp32",
        device="cpu",
        windows=WindowConfig(truncate=True),
    )
    ours = evaluate_retrieval(model, data)
    ref = reference(folder, data, max_active_dims)
    got = ours["retrieval"]
    assert got["queries"] == 6
    pairs = {"MRR@10": "t_dot_mrr@10", "NDCG@10": "t_dot_ndcg@10"}
    for k in KS:
        pairs[f"Recall@{k}"] = f"t_dot_recall@{k}"
        pairs[f"Accuracy@{k}"] = f"t_dot_accuracy@{k}"
    assert set(got) >= set(pairs) - {"Recall@3", "Accuracy@3"}
    for ours_key, ref_key in pairs.items():
        if ours_key in got:
            assert got[ours_key] == pytest.approx(ref[ref_key], abs=1e-6), ours_key
    for key, value in ours["sparsity"].items():
        assert value == pytest.approx(ref[f"t_{key}"], rel=1e-6, abs=1e-6), key
    assert set(ours["sparsity"]) == {
        "query_active_dims",
        "query_sparsity_ratio",
        "corpus_active_dims",
        "corpus_sparsity_ratio",
        "avg_flops",
    }
    # not a vacuous match: the model ranks some relevant documents below the first
    assert 0 < got["Recall@1"] < 1
    cap = max_active_dims or pooling.get("max_active_dims")
    if cap:
        assert ours["sparsity"]["corpus_active_dims"] <= cap


@pytest.mark.parametrize(
    ("query", "max_active_dims"), [("static", None), ("static", 4), ("splade", None)]
)
def test_router_folder_metrics_equal_sentence_transformers(
    tmp_path: Path, query: str, max_active_dims: int | None
) -> None:
    pytest.importorskip("sentence_transformers")
    folder, _ = saved_router_encoder(tmp_path, query, max_active_dims=max_active_dims)
    data = RetrievalSet(DOCS, QUERIES, QRELS)
    model = SparseEmbedder.load(
        folder, precision="fp32", device="cpu", windows=WindowConfig(truncate=True)
    )
    ours = evaluate_retrieval(model, data)
    ref = reference(folder, data, None)
    got = ours["retrieval"]
    pairs = {"MRR@10": "t_dot_mrr@10", "NDCG@10": "t_dot_ndcg@10", "MAP@100": "t_dot_map@100"}
    for k in KS:
        pairs[f"Recall@{k}"] = f"t_dot_recall@{k}"
    for ours_key, ref_key in pairs.items():
        if ours_key in got:
            assert got[ours_key] == pytest.approx(ref[ref_key], abs=1e-6), ours_key
    for key, value in ours["sparsity"].items():
        assert value == pytest.approx(ref[f"t_{key}"], rel=1e-6, abs=1e-6), key
    if query == "static":  # no more active entries than the queries' distinct tokens
        assert ours["sparsity"]["query_active_dims"] <= 3
    assert 0 < got["MRR@10"] < 1  # not a vacuous match
