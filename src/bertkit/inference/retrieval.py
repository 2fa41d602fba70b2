"""Retrieval with a bi-encoder, optionally reranked by a cross-encoder, scored on judgements.

``search``: embed the corpus and the judged queries (behind the folder's query and document
prompts), exact search by cosine similarity (the vectors are normalised here whatever the
model's own setting), or by the similarity a folder declares (the dot product, a negated
euclidean or manhattan distance: :mod:`bertkit.evaluation.dense_scoring`), best ``k`` per
query, ties by the document id.
``rerank``: score each query's top ``top_k`` hits with a cross-encoder (one output per
(query, passage) pair, cut longest-first to its limit) and reorder them; hits below ``top_k``
keep their order after. ``relevance``: a cross-encoder's scores of pairs through the activation
its folder names, as sentence-transformers' ``CrossEncoder.predict`` gives them (mining's
rescoring). ``evaluate_retrieval`` runs both and returns the metrics of
:func:`bertkit.evaluation.retrieval.retrieval_metrics` for each stage.

``sparse_search``: the same with a SPLADE model (:class:`SparseEmbedder`), as
sentence-transformers' ``SparseInformationRetrievalEvaluator`` ranks with a ``SparseEncoder``:
queries and documents behind the folder's query and document prompts, exact search by the
sparse dot product (cosine for a folder that declares it) over an inverted index, ties by the
document id; ``evaluate_retrieval`` adds its sparsity figures.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks.retrieval import RetrievalSet
from bertkit.errors import CheckpointError, ConfigError
from bertkit.evaluation.dense_scoring import dense_scoring
from bertkit.evaluation.retrieval import (
    DEFAULT_KS,
    RERANK_TOP_K,
    exact_search,
    exact_sparse_search,
    id_ties,
    rank_by_scores,
    rerank_order,
    retrieval_metrics,
    sparsity_stats,
)
from bertkit.inference.embedder import Embedder
from bertkit.inference.sparse import SparseEmbedder, as_rows
from bertkit.inference.task_model import Classifier
from bertkit.interop.sentence_folder import similarity_of
from bertkit.interop.sentence_prompts import task_prompt
from bertkit.tasks.rerank import SIGMOID, sigmoid


@dataclass
class Ranked:
    """Rankings (query id -> document ids, best first) and the seconds each part took."""

    rankings: dict[str, list[str]]
    seconds: dict[str, float]
    sparsity: dict[str, float] | None = None
    """A sparse search's :func:`bertkit.evaluation.retrieval.sparsity_stats`."""


def search(embedder: Embedder, data: RetrievalSet, k: int = max(DEFAULT_KS)) -> Ranked:
    """The top ``k`` documents of each judged query by the folder's ``similarity_fn_name``
    (:func:`dense_scoring`: cosine without one; "dot" for a model trained on dot products, such
    as one distilled without normalising; a negated euclidean or manhattan distance), as
    sentence-transformers' evaluator ranks by ``model.similarity``, each text behind its task's
    prompt (:func:`task_prompt`: sentence-transformers' evaluator encodes with ``encode_query``
    and ``encode_document``, and a Router folder's query and document routes:
    :meth:`Embedder.for_task`); ties by the document id, as :func:`sparse_search`."""
    folder = embedder.folder
    prompt = {t: task_prompt(folder, t) if folder else "" for t in ("query", "document")}
    prepare, score = dense_scoring(similarity_of(folder) if folder else None)
    # documents in id order: exact_search breaks a tie by the lower position
    doc_ids, query_ids = sorted(data.corpus), data.judged()
    t0 = time.perf_counter()
    docs = prepare(
        embedder.for_task("document")([prompt["document"] + data.corpus[d] for d in doc_ids])
    )
    t1 = time.perf_counter()
    queries = prepare(
        embedder.for_task("query")([prompt["query"] + data.queries[q] for q in query_ids])
    )
    t2 = time.perf_counter()
    found, _ = exact_search(queries, docs, k, score=score)
    t3 = time.perf_counter()
    return Ranked(
        rank_by_scores(doc_ids, found, query_ids),
        {"embed_corpus": t1 - t0, "embed_queries": t2 - t1, "search": t3 - t2},
    )


def sparse_search(model: SparseEmbedder, data: RetrievalSet, k: int = max(DEFAULT_KS)) -> Ranked:
    """The top ``k`` documents of each judged query by the SPLADE vectors' dot product (cosine
    for a folder whose ``similarity_fn_name`` says so), each text through its task
    (:meth:`SparseEmbedder.encode`: the task's prompt, and a Router's query or document route);
    ties by the document id (sentence-transformers' order)."""
    folder = model.folder
    cosine = (similarity_of(folder) if folder else None) == "cosine"
    doc_ids, query_ids = list(data.corpus), data.judged()
    t0 = time.perf_counter()
    docs = as_rows(model.encode([data.corpus[d] for d in doc_ids], "document"), model.vocab_size)
    t1 = time.perf_counter()
    queries = as_rows(model.encode([data.queries[q] for q in query_ids], "query"), docs.size)
    t2 = time.perf_counter()
    ties = id_ties(doc_ids)
    unit = (lambda r: r.unit()) if cosine else (lambda r: r)
    found, _ = exact_sparse_search(unit(queries), unit(docs), k, ties=ties)
    t3 = time.perf_counter()
    return Ranked(
        rank_by_scores(doc_ids, found, query_ids),
        {"embed_corpus": t1 - t0, "embed_queries": t2 - t1, "search": t3 - t2},
        sparsity_stats(queries, docs),
    )


def rerank(reranker: Classifier, data: RetrievalSet, first: Ranked, top_k: int) -> Ranked:
    """``first``'s rankings with each query's top ``top_k`` reordered by ``reranker``'s score
    (ties keep the first-stage order)."""
    queries = list(first.rankings)
    pairs = [(data.queries[q], data.corpus[d]) for q in queries for d in first.rankings[q][:top_k]]
    t0 = time.perf_counter()
    scores = (
        [float(p["score"]) for p in reranker.with_windows(truncate=True)(pairs)] if pairs else []
    )
    out, at = {}, 0
    for q in queries:
        head = first.rankings[q][:top_k]
        order = rerank_order(scores[at : at + len(head)])
        out[q] = [head[i] for i in order] + first.rankings[q][top_k:]
        at += len(head)
    seconds = {**first.seconds, "rerank": time.perf_counter() - t0, "pairs": len(pairs)}
    return Ranked(out, seconds, first.sparsity)


ACTIVATIONS = {
    SIGMOID: "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
}


def activation_of(folder: str | Path | None) -> str:
    """The activation sentence-transformers' ``CrossEncoder`` puts on a one-output folder's
    logit: ``activation_fn`` of config_sentence_transformers.json (sentence-transformers >= 5),
    else of config.json's ``sentence_transformers`` (4.x), else its older
    ``sbert_ce_default_activation_function``, else sigmoid (its default for one output).
    ``sigmoid`` or ``identity``; another one is a ConfigError."""
    named = None
    if folder is not None:
        root = Path(folder)
        st = root / "config_sentence_transformers.json"
        if st.is_file():
            named = _json_object(st).get("activation_fn")
        if named is None and (root / "config.json").is_file():
            config = _json_object(root / "config.json")
            named = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
                "sbert_ce_default_activation_function"
            )
    if named is None:
        return "sigmoid"
    if named not in ACTIVATIONS:
        raise ConfigError(
            f"{folder}: the cross-encoder's activation {named!r} is not one of "
            f"{', '.join(ACTIVATIONS)}"
        )
    return ACTIVATIONS[named]


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; a CheckpointError naming it when it holds none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def relevance(reranker: Classifier, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """(N,) float32: the score of each (query, passage) pair (cut longest-first to the model's
    limit) through :func:`activation_of` the reranker's folder, as ``CrossEncoder.predict``."""
    if not pairs:
        return np.zeros(0, dtype=np.float32)
    raw = np.array(
        [float(p["score"]) for p in reranker.with_windows(truncate=True)(list(pairs))],
        dtype=np.float64,
    )
    if activation_of(reranker.source) == "sigmoid":
        raw = sigmoid(raw)
    return raw.astype(np.float32)


def evaluate_retrieval(
    embedder: Embedder | SparseEmbedder,
    data: RetrievalSet,
    *,
    reranker: Classifier | None = None,
    top_k: int = RERANK_TOP_K,
    k: int = max(DEFAULT_KS),
) -> dict[str, Any]:
    """``{"retrieval": metrics, "seconds": ...}``, plus ``"reranked"`` (metrics after reranking
    the top ``top_k``) with a reranker, and ``"sparsity"`` (:func:`sparsity_stats`) for a
    :class:`SparseEmbedder`, searched by :func:`sparse_search`."""
    if isinstance(embedder, SparseEmbedder):
        first = sparse_search(embedder, data, k)
    else:
        first = search(embedder, data, k)
    out: dict[str, Any] = {
        "corpus": len(data.corpus),
        "retrieval": retrieval_metrics(first.rankings, data.qrels),
        "seconds": first.seconds,
    }
    if reranker is not None:
        second = rerank(reranker, data, first, top_k)
        out["reranked"] = {"top_k": top_k, **retrieval_metrics(second.rankings, data.qrels)}
        out["seconds"] = second.seconds
    if first.sparsity is not None:
        out["sparsity"] = first.sparsity
    return out
