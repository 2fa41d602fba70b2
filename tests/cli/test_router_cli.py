"""A dense sentence-transformers ``Router`` folder (a query BERT and a document BERT) through
the CLI: ``bertkit embed --task`` gives encode_query / encode_document / encode's vectors (a
file, and a folder whose manifest names the Router folder and the task), and ``bertkit search``
embeds its queries through the query route: the hits of ``util.semantic_search`` over
encode_query and encode_document; ``bertkit evaluate`` scores a BEIR folder as
InformationRetrievalEvaluator does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.retrieval import RetrievalSet, write_beir
from bertkit.inference.sharded import MANIFEST
from support.cli_runs import evaluate
from support.tiny_router import saved_dense_router

LINES = [
    "the cat sat on the mat",
    "a big dog ran on the road",
    "the small red house by the river",
    "a blue tree on the road",
    "the big river ran",
    "a small cat , a big dog",
    "red house . blue house .",
    "the dog sat on a big mat by the tree on the road by the river",
]
QUERIES = ["cat on the mat", "big dog", "the road by the river , a small red house and a tree"]


@pytest.mark.parametrize("task", [None, "query", "document"])
def test_embed_takes_the_tasks_route(tmp_path: Path, task: str | None) -> None:
    pytest.importorskip("sentence_transformers")
    folder, st = saved_dense_router(tmp_path)
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    args = ["embed", "--model", str(folder), "--input", str(tmp_path / "in.txt")]
    flags = ["--output", str(out), "--precision", "fp32", "--truncate"]
    assert main([*args, *flags, *(["--task", task] if task else [])]) == 0
    encode = {None: st.encode, "query": st.encode_query, "document": st.encode_document}[task]  # type: ignore[attr-defined]
    np.testing.assert_allclose(np.load(out), encode(LINES), atol=1e-5, rtol=0)


def test_search_embeds_queries_through_the_query_route(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import util

    folder, st = saved_dense_router(tmp_path)
    corpus, queries = tmp_path / "corpus.txt", tmp_path / "queries.txt"
    corpus.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    queries.write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    index = tmp_path / "index"
    embed = ["embed", "--model", str(folder), "--input", str(corpus), "--output", f"{index}/"]
    assert main([*embed, "--precision", "fp32", "--truncate", "--task", "document"]) == 0
    manifest = json.loads((index / MANIFEST).read_text())
    assert manifest["model"]["path"] == str(folder.absolute())  # the Router, not a route
    assert manifest["settings"]["task"] == "document"
    out = tmp_path / "hits.jsonl"
    search = ["search", "--index", str(index), "--queries", str(queries), "--output", str(out)]
    assert main([*search, "--top-k", "5"]) == 0
    hits = [json.loads(line) for line in out.read_text().splitlines()]
    ref = util.semantic_search(
        st.encode_query(QUERIES, convert_to_tensor=True),  # type: ignore[attr-defined]
        st.encode_document(LINES, convert_to_tensor=True),  # type: ignore[attr-defined]
        top_k=5,
    )
    assert [[h["line"] - 1 for h in r["hits"]] for r in hits] == [
        [h["corpus_id"] for h in row] for row in ref
    ]
    for r, row in zip(hits, ref, strict=True):
        np.testing.assert_allclose(
            [h["score"] for h in r["hits"]], [h["score"] for h in row], atol=1e-5
        )


def test_evaluate_takes_each_tasks_route(tmp_path: Path) -> None:
    """`bertkit evaluate` on a BEIR folder: queries through the query route, the corpus through
    the document route, the metrics of sentence-transformers' InformationRetrievalEvaluator."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    folder, st = saved_dense_router(tmp_path)
    docs = {f"d{i}": line for i, line in enumerate(LINES)}
    queries = {f"q{i}": q for i, q in enumerate(QUERIES)}
    qrels = {"q0": {"d0": 1}, "q1": {"d1": 1, "d5": 1}, "q2": {"d2": 1, "d7": 1}}
    write_beir(tmp_path / "beir", RetrievalSet(docs, queries, qrels))
    got = evaluate(folder, tmp_path / "beir", tmp_path, "--precision", "fp32", "--device", "cpu")
    ev = InformationRetrievalEvaluator(
        queries,
        docs,
        {q: set(r) for q, r in qrels.items()},
        mrr_at_k=[10],
        ndcg_at_k=[10],
        name="t",
        write_csv=False,
    )
    ref = ev(st)
    for ours, theirs in (("MRR@10", "mrr@10"), ("NDCG@10", "ndcg@10")):
        assert got["retrieval"][ours] == pytest.approx(ref[f"t_cosine_{theirs}"], abs=1e-6)
    assert 0 < got["retrieval"]["NDCG@10"] < 1  # not a vacuous match


def test_search_warns_when_the_documents_took_the_query_route(tmp_path: Path, capsys) -> None:
    """Lines embedded with --task query went through the Router's query route: search says so
    in one line on stderr (and does not for --task document)."""
    pytest.importorskip("sentence_transformers")
    folder, _ = saved_dense_router(tmp_path)
    corpus, queries = tmp_path / "corpus.txt", tmp_path / "queries.txt"
    corpus.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    queries.write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    for task in ("query", "document"):
        index = tmp_path / f"index-{task}"
        embed = ["embed", "--model", str(folder), "--input", str(corpus), "--output", f"{index}/"]
        assert main([*embed, "--precision", "fp32", "--truncate", "--task", task]) == 0
        capsys.readouterr()
        search = ["search", "--index", str(index), "--queries", str(queries)]
        assert main([*search, "--output", str(tmp_path / f"{task}.jsonl")]) == 0
        warned = [x for x in capsys.readouterr().err.splitlines() if x.startswith("warning:")]
        if task == "query":
            assert len(warned) == 1 and "--task query" in warned[0], warned
            assert "document route" in warned[0]
        else:
            assert warned == []
