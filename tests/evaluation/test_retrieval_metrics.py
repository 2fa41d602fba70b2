"""Retrieval metrics: the worked examples, the same numbers as sentence-transformers'
InformationRetrievalEvaluator computes from the same ranked lists, and graded NDCG as trec_eval
(pytrec_eval, which BEIR and MTEB call) computes it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from bertkit.evaluation.retrieval import (
    exact_search,
    exact_search_blocks,
    rank_by_scores,
    rerank_order,
    retrieval_metrics,
)


def test_worked_example_of_the_docstring():
    m = retrieval_metrics({"q": ["d1", "d2", "d3"]}, {"q": {"d2": 1, "d9": 1}})
    assert m["MRR@10"] == 0.5
    assert m["Recall@1"] == 0.0 and m["Recall@10"] == 0.5 and m["Accuracy@10"] == 1.0
    ideal = 1 + 1 / math.log2(3)
    assert m["NDCG@10"] == pytest.approx((1 / math.log2(3)) / ideal)
    assert round(m["NDCG@10"], 4) == 0.3869
    assert m["Precision@3"] == pytest.approx(1 / 3) and m["MAP@100"] == 0.25
    assert m["queries"] == 1


def test_graded_judgements_add_trec_evals_linear_gain_ndcg():
    """qrels {d2: 3, d9: 1, d5: 0}, ranking d1 d2 d5 d9: DCG = 3/log2 3 + 1/log2 5 against the
    ideal 3 + 1/log2 3; the binary NDCG@10 counts d2 and d9 alike."""
    m = retrieval_metrics({"q": ["d1", "d2", "d5", "d9"]}, {"q": {"d2": 3, "d9": 1, "d5": 0}})
    dcg = 3 / math.log2(3) + 1 / math.log2(5)
    assert m["NDCG@10 (graded)"] == pytest.approx(dcg / (3 + 1 / math.log2(3)), abs=1e-15)
    binary = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert m["NDCG@10"] == pytest.approx(binary, abs=1e-15)
    assert round(m["NDCG@10 (graded)"], 4) == 0.6399 and round(m["NDCG@10"], 4) == 0.6509
    ones = retrieval_metrics({"q": ["d1", "d2"]}, {"q": {"d2": 1, "d9": 1}})
    assert "NDCG@10 (graded)" not in ones  # binary qrels: the two would be equal


def test_graded_ndcg_equals_pytrec_eval_as_beir_and_mteb_score_it():
    """trec_eval's ndcg_cut_10 (through pytrec_eval, which BEIR and MTEB call) on random graded
    qrels (0-3, some judged documents never ranked, some queries with no relevant one)."""
    import pytrec_eval

    rng = np.random.default_rng(1)
    docs = [f"d{i}" for i in range(50)]
    qrels, rankings, run = {}, {}, {}
    for q in range(60):
        judged = rng.choice(docs, size=int(rng.integers(1, 8)), replace=False).tolist()
        qrels[f"q{q}"] = {d: int(rng.integers(0, 4)) for d in judged}
        order = [docs[j] for j in rng.permutation(len(docs))[:30]]  # a top 30
        rankings[f"q{q}"] = order
        run[f"q{q}"] = {d: float(len(order) - r) for r, d in enumerate(order)}
    ours = retrieval_metrics(rankings, qrels)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    counted = [q for q, rel in qrels.items() if max(rel.values()) > 0]
    assert ours["queries"] == len(counted) < len(qrels)
    expected = sum(ref[q]["ndcg_cut_10"] for q in counted) / len(counted)
    assert ours["NDCG@10 (graded)"] == pytest.approx(expected, abs=1e-12)
    assert abs(ours["NDCG@10 (graded)"] - ours["NDCG@10"]) > 1e-3  # grades count here


def test_unjudged_queries_do_not_count_and_missing_rankings_are_misses():
    qrels = {"a": {"x": 1}, "b": {"y": 0}, "c": {"z": 2}}
    m = retrieval_metrics({"a": ["x"]}, qrels)  # c has no ranking, b no relevant document
    assert m["queries"] == 2 and m["MRR@10"] == 0.5 and m["Recall@1"] == 0.5
    with pytest.raises(ValueError, match="no query"):
        retrieval_metrics({"b": ["y"]}, {"b": {"y": 0}})


def test_mrr_stops_at_its_cut_off():
    ranking = [f"d{i}" for i in range(20)]
    m = retrieval_metrics({"q": ranking}, {"q": {"d10": 1}})
    assert m["MRR@10"] == 0.0 and m["Recall@100"] == 1.0 and m["Recall@10"] == 0.0


def test_same_numbers_as_sentence_transformers_evaluator():
    st = pytest.importorskip("sentence_transformers.evaluation")
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(60)]
    qrels, rankings, results = {}, {}, []
    for q in range(40):
        rel = set(rng.choice(docs, size=int(rng.integers(1, 4)), replace=False).tolist())
        order = rng.permutation(len(docs)).tolist()
        qrels[f"q{q}"] = dict.fromkeys(rel, 1)
        rankings[f"q{q}"] = [docs[j] for j in order]
        results.append(
            [{"corpus_id": docs[j], "score": float(len(docs) - r)} for r, j in enumerate(order)]
        )
    ev = st.InformationRetrievalEvaluator(
        {f"q{q}": "x" for q in range(40)},
        dict.fromkeys(docs, "x"),
        {q: set(r) for q, r in qrels.items()},
        mrr_at_k=[10],
        ndcg_at_k=[10],
        accuracy_at_k=[1, 10, 50],
        precision_recall_at_k=[1, 10, 50],
        map_at_k=[10, 100],
    )
    ref = ev.compute_metrics(results)
    ours = retrieval_metrics(rankings, qrels, (1, 10, 50))
    assert ours["MRR@10"] == pytest.approx(ref["mrr@k"][10], abs=1e-12)
    assert ours["NDCG@10"] == pytest.approx(ref["ndcg@k"][10], abs=1e-12)
    assert ours["MAP@100"] == pytest.approx(ref["map@k"][100], abs=1e-12)
    assert retrieval_metrics(rankings, qrels, map_k=10)["MAP@10"] == pytest.approx(
        ref["map@k"][10], abs=1e-12
    )
    for k in (1, 10, 50):
        assert ours[f"Recall@{k}"] == pytest.approx(ref["recall@k"][k], abs=1e-12)
        assert ours[f"Accuracy@{k}"] == pytest.approx(ref["accuracy@k"][k], abs=1e-12)
        assert ours[f"Precision@{k}"] == pytest.approx(ref["precision@k"][k], abs=1e-12)
    assert {f"{m}@{k}" for m in ("Recall", "Accuracy", "Precision") for k in (1, 3, 5, 10)} <= set(
        retrieval_metrics(rankings, qrels)
    )  # the evaluator's default cut-offs


def test_exact_search_orders_best_first_and_breaks_ties_by_position():
    docs = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    ids, scores = exact_search(queries, docs, 3, chunk=1)
    assert ids.tolist() == [[0, 2, 3], [1, 3, 0]]
    assert scores[0].tolist() == pytest.approx([1.0, 1.0, 0.6])
    assert exact_search(queries, docs, 10)[0].shape == (2, 4)  # k capped at the corpus
    assert rank_by_scores(["a", "b", "c", "d"], ids, ["x", "y"]) == {
        "x": ["a", "c", "d"],
        "y": ["b", "d", "a"],
    }


def test_exact_search_matches_a_full_sort():
    rng = np.random.default_rng(1)
    q, d = rng.normal(size=(7, 16)), rng.normal(size=(300, 16))
    ids, _ = exact_search(q, d, 25, chunk=3)
    full = np.argsort(-(q.astype(np.float32) @ d.astype(np.float32).T), axis=1, kind="stable")[
        :, :25
    ]
    assert ids.tolist() == full.tolist()


def test_rerank_order_keeps_first_stage_order_on_ties():
    assert rerank_order([0.1, 0.9, 0.9, 0.5]) == [1, 2, 3, 0]


@pytest.mark.parametrize("doc_chunk", [1, 7, 25, 26, 299, 300, 1000])
def test_exact_search_in_document_blocks_equals_the_whole_matrix(doc_chunk: int) -> None:
    """Top k merged over blocks of documents is the top k of the whole row, for blocks smaller
    than k, equal to it, and larger, and a corpus that does not divide into blocks."""
    rng = np.random.default_rng(2)
    q, d = rng.normal(size=(9, 16)), rng.normal(size=(300, 16))
    whole_ids, whole = exact_search(q, d, 25, chunk=4, doc_chunk=10_000)
    ids, scores = exact_search(q, d, 25, chunk=4, doc_chunk=doc_chunk)
    assert ids.tolist() == whole_ids.tolist()
    np.testing.assert_allclose(scores, whole, rtol=1e-6)  # BLAS may round a narrow block apart
    full = np.argsort(-(q.astype(np.float32) @ d.astype(np.float32).T), axis=1, kind="stable")
    assert ids.tolist() == full[:, :25].tolist()


def test_exact_search_blocks_keep_ties_by_position() -> None:
    docs = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8], [1.0, 0.0]], np.float32)
    ids, _ = exact_search(np.array([[1.0, 0.0]], np.float32), docs, 3, doc_chunk=2)
    assert ids.tolist() == [[0, 2, 4]]


def test_exact_search_ties_at_the_kth_place_go_to_the_lowest_index_within_a_block() -> None:
    """Many documents share the k-th score inside one block: the lowest-indexed of them are
    kept (``argpartition`` alone keeps an arbitrary subset of the tied ones)."""
    rng = np.random.default_rng(3)
    docs = np.repeat(np.array([[1.0, 0.0]], np.float32), 400, axis=0)
    docs[rng.choice(400, 150, replace=False)] = [0.0, 1.0]
    docs[[17, 305]] = [2.0, 0.0]  # two strictly better documents, late and early
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    ids, _ = exact_search(queries, docs, 10)
    full = np.argsort(-(queries @ docs.T), axis=1, kind="stable")[:, :10]
    assert ids.tolist() == full.tolist()
    assert ids[0, :2].tolist() == [17, 305]


@pytest.mark.parametrize("sizes", [(300,), (1, 299), (24, 1, 100, 175), (7,) * 42 + (6,)])
def test_exact_search_over_uneven_blocks_equals_the_whole_matrix(sizes, tmp_path) -> None:
    """Shards of any sizes (smaller than k, one row, uneven), memory-mapped as ``bertkit
    search`` reads them, give the whole matrix's top k: the same indices, positions running
    on across blocks, and the same scores."""
    rng = np.random.default_rng(4)
    q, d = (
        rng.normal(size=(9, 16)).astype(np.float32),
        rng.normal(size=(300, 16)).astype(np.float32),
    )
    d[[40, 41, 250]] = d[3]  # ties across blocks: the lower position first
    cuts = np.cumsum((0, *sizes))
    paths = []
    for n, (a, b) in enumerate(itertools.pairwise(cuts)):
        paths.append(tmp_path / f"b{n}.npy")
        np.save(paths[-1], d[a:b])
    blocks = (np.load(p, mmap_mode="r") for p in paths)
    ids, scores = exact_search_blocks(q, blocks, 25, chunk=4, doc_chunk=64)
    whole_ids, whole = exact_search(q, d, 25, doc_chunk=10_000)
    assert ids.tolist() == whole_ids.tolist()
    np.testing.assert_allclose(scores, whole, rtol=1e-5, atol=1e-6)
    full = np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :25]
    assert ids.tolist() == full.tolist()


def test_exact_search_blocks_caps_k_at_the_documents_and_checks_widths() -> None:
    q = np.eye(2, dtype=np.float32)
    ids, scores = exact_search_blocks(q, iter([np.eye(2), np.ones((1, 2))]), 10)
    assert ids.tolist() == [[0, 2, 1], [1, 2, 0]]
    assert scores.shape == (2, 3)
    assert exact_search_blocks(q, iter([]), 10)[0].shape == (2, 0)
    with pytest.raises(ValueError, match="do not match"):
        exact_search_blocks(q, iter([np.ones((3, 5))]), 2)


def test_exact_search_blocks_holds_one_pieces_temporaries_whatever_the_blocks() -> None:
    """Peak memory (numpy's allocations, traced) over eight blocks stays that of one: a piece's
    scores and partition are freed before the next piece is scored."""
    import tracemalloc

    rng = np.random.default_rng(5)
    q = rng.normal(size=(400, 8)).astype(np.float32)
    block = rng.normal(size=(2000, 8)).astype(np.float32)

    def peak(blocks: int) -> int:
        tracemalloc.start()
        exact_search_blocks(q, (block for _ in range(blocks)), 10)
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top

    one = peak(1)
    assert one > 400 * 2000 * 4  # at least the piece's scores were traced
    assert peak(8) < 1.15 * one
