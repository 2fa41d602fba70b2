"""Retrieval metrics over ranked lists, and exact nearest-neighbour search.

The definitions are sentence-transformers' ``InformationRetrievalEvaluator``'s, so a model
scores the same digits here and there:

- a query counts only if it has at least one relevant document (qrels score > 0);
- relevance is binary (a graded qrels score > 0 counts as 1), as there;
- ``MRR@k``: 1 / rank of the first relevant document within the top k, else 0;
- ``NDCG@k``: sum over the top k of rel_i / log2(i + 2), divided by the same sum for an ideal
  list of min(k, |relevant|) relevant documents;
- ``Recall@k``: relevant documents in the top k / |relevant|; ``Accuracy@k``: 1 if any;
  ``Precision@k``: relevant documents in the top k / k;
- ``MAP@k``: the sum, over each relevant document at rank r within the top k, of the precision
  at r, divided by min(k, |relevant|);
- every metric is the mean over the counted queries. The cut-offs are the evaluator's defaults:
  Accuracy, Precision and Recall at 1, 3, 5 and 10 (and 100), MRR and NDCG at 10, MAP at 100.

Graded judgements (a qrels score above 1, as in TREC-COVID, NFCorpus or TREC DL's 0-3) add
``NDCG@k (graded)``: the gain of a document is its qrels score (0 if unjudged or below 0), the
ideal list the query's scores sorted, best first: trec_eval's ``ndcg_cut_k`` (linear gains), the
NDCG@10 that BEIR and MTEB report through pytrec_eval. ``NDCG@k`` stays binary, as
sentence-transformers scores it; on binary qrels the two are equal, so the key is left out.

Ties in :func:`exact_search` are broken by document position (the lower first); of documents
tied exactly at the k-th score, which ones make the cut is deterministic but not by position
(it may depend on the block size). :func:`exact_sparse_search` (sparse vectors as
:class:`SparseRows`, by an inverted index) breaks every tie, the k-th included, by a key per
document (sentence-transformers' is the document id); :func:`sparsity_stats` gives the figures
sentence-transformers' ``SparseInformationRetrievalEvaluator`` reports beside the metrics.

Worked example: qrels ``{"q": {"d2": 1, "d9": 1}}``, ranking ``["d1", "d2", "d3"]``:
MRR@10 = 1/2, Recall@1 = 0, Recall@10 = 1/2, NDCG@10 = (1/log2 3) / (1 + 1/log2 3) = 0.3869,
Precision@3 = 1/3, MAP@100 = (1/2) / 2 = 0.25.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RERANK_TOP_K = 50
"""Hits per query a cross-encoder reorders by default (``bertkit evaluate --rerank-top-k``)."""

DEFAULT_KS = (1, 3, 5, 10, 100)
"""Cut-offs of Recall, Accuracy and Precision reported by default (sentence-transformers'
evaluator's 1, 3, 5, 10, and 100 for first-stage recall; MRR and NDCG at 10, MAP at 100)."""


def exact_search(
    queries: np.ndarray,
    documents: np.ndarray,
    k: int,
    *,
    chunk: int = 1024,
    doc_chunk: int = 65536,
    score: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` documents of each query by dot product (cosine for unit vectors), or by
    ``score`` (as :func:`exact_search_blocks`).

    queries (Q, H), documents (D, H) -> (indices (Q, k'), scores (Q, k')), k' = min(k, D), each
    row best first, ties by the lower document index: :func:`exact_search_blocks` over the
    documents cut into blocks of ``doc_chunk`` rows.
    """
    if queries.ndim != 2 or documents.ndim != 2 or queries.shape[1] != documents.shape[1]:
        raise ValueError(f"shapes {queries.shape} and {documents.shape} do not match")
    blocks = (documents[i : i + doc_chunk] for i in range(0, documents.shape[0], doc_chunk))
    return exact_search_blocks(queries, blocks, k, chunk=chunk, doc_chunk=doc_chunk, score=score)


def exact_search_blocks(
    queries: np.ndarray,
    blocks: Iterable[np.ndarray],
    k: int,
    *,
    chunk: int = 1024,
    doc_chunk: int = 65536,
    score: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`exact_search` over documents that come as consecutive blocks (D_i, H), e.g. the
    memory-mapped shards of an embedded corpus: a document's index is its position in the
    blocks joined, and only one block is read at a time.

    The score matrix is computed in pieces of ``chunk`` queries x ``doc_chunk`` documents, so
    memory holds one (chunk, doc_chunk) piece (256 MiB at the defaults) and its top-k
    selection's temporaries (negated copy, int64 partition: measured about 5x the piece in all)
    plus the running top k of every query (Q x k), whatever D: each piece's top k is merged
    into the running top k of its queries, which gives the top k of the whole row (the merge
    keeps every document that any piece ranks within k).

    ``score``: another similarity, larger is nearer, of queries (C, H) and documents (Db, H) as
    given (not cast to float32) -> (C, Db) float32, e.g. a negative Hamming distance of packed
    bits (:mod:`bertkit.inference.quantize`); default the float32 dot product.
    """
    if queries.ndim != 2:
        raise ValueError(f"queries must be (Q, H), got shape {queries.shape}")
    q = queries.astype(np.float32, copy=False) if score is None else queries
    best_ids = np.zeros((q.shape[0], 0), dtype=np.int64)
    best = np.zeros((q.shape[0], 0), dtype=np.float32)
    first = 0
    for block in blocks:
        if block.ndim != 2 or block.shape[1] != q.shape[1]:
            raise ValueError(f"shapes {queries.shape} and {block.shape} do not match")
        for lo in range(0, block.shape[0], doc_chunk):
            d = np.asarray(block[lo : lo + doc_chunk])  # (Db, H), read here
            d = d.astype(np.float32, copy=False) if score is None else d
            width = min(k, best.shape[1] + d.shape[0])
            ids = np.zeros((q.shape[0], width), dtype=np.int64)
            scores = np.zeros((q.shape[0], width), dtype=np.float32)
            for start in range(0, q.shape[0], chunk):
                rows = slice(start, start + chunk)
                s = q[rows] @ d.T if score is None else score(q[rows], d)  # (C, Db)
                top = (
                    _top_k(s, k)
                    if k < s.shape[1]
                    else np.broadcast_to(np.arange(s.shape[1]), s.shape)
                )
                cand_ids = np.concatenate([best_ids[rows], top + first + lo], axis=1)
                cand = np.concatenate([best[rows], np.take_along_axis(s, top, axis=1)], axis=1)
                order = np.lexsort((cand_ids, -cand), axis=1)[:, :k]  # best first, ties: lower
                ids[rows] = np.take_along_axis(cand_ids, order, axis=1)
                scores[rows] = np.take_along_axis(cand, order, axis=1)
                del s, top  # before the next piece's scores: one piece's temporaries at a time
            best_ids, best = ids, scores
        first += block.shape[0]
    return best_ids, best


def _top_k(s: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's ``k`` largest values (in no order); where the k-th value is
    tied, the lowest columns among the tied ones.

    ``argpartition`` alone keeps an arbitrary subset of the values equal to the k-th, so a
    document could lose its place to a higher-indexed one of the same score; the rows where that
    can happen (the (k+1)-th value, which the partition puts at column ``k``, equals the k-th)
    are ranked again by a stable sort. Needs ``k`` below the row length.
    """
    part = np.argpartition(-s, k, axis=1)
    # a copy: a view would keep the whole (rows, columns) int64 partition alive
    top = part[:, :k].copy()
    kth = np.take_along_axis(s, top, axis=1).min(axis=1)
    after = np.take_along_axis(s, part[:, k : k + 1], axis=1)[:, 0]
    del part
    tied = np.flatnonzero(after >= kth)
    if tied.size:
        top[tied] = np.argsort(-s[tied], axis=1, kind="stable")[:, :k]
    return top


def unit_rows(v: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (at least 1e-12): dot products become cosines."""
    return v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)


def _dcg(relevances: Sequence[int], k: int) -> float:
    return sum(rel / math.log2(i + 2) for i, rel in enumerate(relevances[:k]))


def retrieval_metrics(
    rankings: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    ks: Sequence[int] = DEFAULT_KS,
    *,
    mrr_k: int = 10,
    ndcg_k: int = 10,
    map_k: int = 100,
) -> dict[str, float]:
    """Mean metrics of ``rankings`` (query id -> document ids, best first) against ``qrels``
    (query id -> {document id: relevance}); see the module docstring.

    Returns ``{"MRR@10", "NDCG@10", "MAP@100", "Recall@k", "Accuracy@k", "Precision@k" for k
    in ks, "queries"}``, and ``"NDCG@10 (graded)"`` where a judgement is above 1. A query with
    relevant documents but no ranking counts as a miss. Raises ValueError when no query has a
    relevant document.
    """
    counted = [q for q, rel in qrels.items() if any(v > 0 for v in rel.values())]
    if not counted:
        raise ValueError("no query has a relevant document")
    sums: dict[str, float] = {f"MRR@{mrr_k}": 0.0, f"NDCG@{ndcg_k}": 0.0, f"MAP@{map_k}": 0.0}
    graded = (
        f"NDCG@{ndcg_k} (graded)"
        if any(v > 1 for q in counted for v in qrels[q].values())
        else None
    )
    if graded:
        sums[graded] = 0.0
    for k in ks:
        sums[f"Recall@{k}"] = sums[f"Accuracy@{k}"] = sums[f"Precision@{k}"] = 0.0
    for q in counted:
        relevant = {d for d, v in qrels[q].items() if v > 0}
        ranking = rankings.get(q, ())
        hits = [1 if d in relevant else 0 for d in ranking]
        first = next((i for i, h in enumerate(hits[:mrr_k]) if h), None)
        sums[f"MRR@{mrr_k}"] += 0.0 if first is None else 1.0 / (first + 1)
        sums[f"NDCG@{ndcg_k}"] += _dcg(hits, ndcg_k) / _dcg([1] * len(relevant), ndcg_k)
        if graded:
            gains = [max(qrels[q].get(d, 0), 0) for d in ranking]
            ideal = sorted((v for v in qrels[q].values() if v > 0), reverse=True)
            sums[graded] += _dcg(gains, ndcg_k) / _dcg(ideal, ndcg_k)
        precisions = [sum(hits[: r + 1]) / (r + 1) for r, h in enumerate(hits[:map_k]) if h]
        sums[f"MAP@{map_k}"] += sum(precisions) / min(map_k, len(relevant))
        for k in ks:
            found = sum(hits[:k])
            sums[f"Recall@{k}"] += found / len(relevant)
            sums[f"Accuracy@{k}"] += 1.0 if found else 0.0
            sums[f"Precision@{k}"] += found / k
    out = {name: total / len(counted) for name, total in sums.items()}
    out["queries"] = len(counted)
    return out


def rank_by_scores(
    doc_ids: Sequence[str], indices: np.ndarray, query_ids: Sequence[str]
) -> dict[str, list[str]]:
    """Rankings (query id -> document ids) from :func:`exact_search`'s indices."""
    return {
        q: [doc_ids[j] for j in row] for q, row in zip(query_ids, indices.tolist(), strict=True)
    }


def id_ties(doc_ids: Sequence[str]) -> np.ndarray:
    """(D,) each document's rank by id: :func:`exact_sparse_search`'s ``ties`` that break equal
    scores by the document id, as sentence-transformers orders them."""
    ties = np.empty(len(doc_ids), dtype=np.int64)
    ties[sorted(range(len(doc_ids)), key=doc_ids.__getitem__)] = np.arange(len(doc_ids))
    return ties


def rerank_order(scores: Sequence[float]) -> list[int]:
    """Positions of ``scores`` best first, ties by the earlier position (the first-stage order)."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


@dataclass(frozen=True)
class SparseRows:
    """Sparse vectors as CSR rows: row r's entries are ``indices[indptr[r]:indptr[r + 1]]``
    (vocabulary ids, int64) with ``values`` (float32) at the same places; ``size`` columns."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    size: int

    @classmethod
    def of(
        cls, indices: Sequence[np.ndarray], values: Sequence[np.ndarray], size: int
    ) -> SparseRows:
        """Row r holds ``indices[r]`` with ``values[r]`` (one array pair per row)."""
        lengths = [len(i) for i in indices]
        indptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        if not lengths:
            return cls(indptr, np.zeros(0, np.int64), np.zeros(0, np.float32), size)
        joined = np.concatenate(list(indices)).astype(np.int64)
        return cls(indptr, joined, np.concatenate(list(values)).astype(np.float32), size)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def active(self) -> np.ndarray:
        """(R,) the number of non-zero entries of each row."""
        return np.diff(self.indptr)

    def unit(self) -> SparseRows:
        """Each row divided by its L2 norm (at least 1e-12): dot products become cosines."""
        rows = np.repeat(np.arange(len(self)), self.active())
        norms = np.sqrt(np.bincount(rows, self.values.astype(np.float64) ** 2, len(self)))
        scaled = self.values / np.clip(norms, 1e-12, None)[rows]
        return SparseRows(self.indptr, self.indices, scaled.astype(np.float32), self.size)


SEARCH_CELLS = 1 << 23
"""Query-document scores one :func:`exact_sparse_search` block holds (8M float64: 64 MiB); it
reads a quarter as many postings at once (about 50 bytes each in temporaries: 100 MiB)."""


def exact_sparse_search(
    queries: SparseRows,
    documents: SparseRows,
    k: int,
    *,
    ties: np.ndarray | None = None,
    cells: int = SEARCH_CELLS,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` documents of each query by sparse dot product, exact.

    -> (indices (Q, k'), scores (Q, k')), k' = min(k, D), each row best first; ties by the lower
    ``ties[document]`` (default: the document's position), for every rank including the k-th.
    The documents are turned into an inverted index (vocabulary id -> its documents and
    weights); a block of queries sums, for each of its entries, the weight times the postings of
    that id into a (block, D) float64 score matrix, so memory holds ``max(cells, D)`` scores plus
    fewer than ``cells / 4 + D`` postings at a time, whatever Q and the number of entries; the
    index holds 8 bytes per non-zero document entry (int32 document, float32 weight).
    """
    if queries.size != documents.size:
        raise ValueError(f"vectors of size {queries.size} and {documents.size} do not match")
    n_docs = len(documents)
    k = min(k, n_docs)
    ties = np.arange(n_docs) if ties is None else np.asarray(ties)
    order = np.argsort(documents.indices, kind="stable")  # by vocabulary id, documents ascending
    doc_type = np.int32 if n_docs < 2**31 else np.int64
    post_docs = np.repeat(np.arange(n_docs, dtype=doc_type), documents.active())[order]
    post_vals = documents.values[order]
    del order
    post_ptr = np.concatenate(
        [[0], np.cumsum(np.bincount(documents.indices, minlength=queries.size))]
    )
    ids = np.zeros((len(queries), k), dtype=np.int64)
    scores = np.zeros((len(queries), k), dtype=np.float32)
    rows = max(1, cells // max(n_docs, 1))
    for first in range(0, len(queries), rows):
        last = min(first + rows, len(queries))
        a, b = queries.indptr[first], queries.indptr[last]
        terms = queries.indices[a:b]
        owner = np.repeat(np.arange(last - first), queries.active()[first:last])
        starts, lengths = post_ptr[terms], post_ptr[terms + 1] - post_ptr[terms]
        block = np.zeros((last - first) * n_docs)
        # entries whose postings start in the same ``cells``-long stretch are read together
        bucket = (np.cumsum(lengths) - lengths) // max(1, cells // 4)
        cuts = np.flatnonzero(np.diff(bucket)) + 1
        for lo, hi in itertools.pairwise([0, *cuts.tolist(), len(terms)]):
            if lo == hi:
                continue
            n = lengths[lo:hi]
            offset = np.repeat(starts[lo:hi] - np.cumsum(n) + n, n) + np.arange(n.sum())
            keys = np.repeat(owner[lo:hi], n) * n_docs + post_docs[offset]  # int64
            weights = np.repeat(queries.values[a + lo : a + hi].astype(np.float64), n)
            block += np.bincount(keys, weights * post_vals[offset], minlength=block.size)
        block = block.reshape(last - first, n_docs)  # (Qb, D)
        for r, row in enumerate(block):
            top = _top_k_by(row, ties, k)
            ids[first + r], scores[first + r] = top, row[top]
    return ids, scores


def _top_k_by(row: np.ndarray, ties: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest values of ``row``, best first, ties by the lower
    ``ties[position]``: every value above the k-th, then the tied ones of the lowest key."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(row, len(row) - k)[len(row) - k]
    candidates = np.flatnonzero(row >= kth)
    best = np.lexsort((ties[candidates], -row[candidates]))[:k]
    return candidates[best]


def sparsity_stats(queries: SparseRows, documents: SparseRows) -> dict[str, float]:
    """sentence-transformers' ``SparseInformationRetrievalEvaluator`` figures: the mean number
    of non-zero entries of a query and of a document (``*_active_dims``), the mean fraction of
    zeros (``*_sparsity_ratio``), and ``avg_flops``: the expected number of entries a query and a
    document share (the mean query's and the mean document's non-zero counts per vocabulary
    id, dotted: the multiplications an inverted index makes per pair)."""
    out: dict[str, float] = {}
    counts = {}
    for name, rows in (("query", queries), ("corpus", documents)):
        active = float(rows.active().mean()) if len(rows) else 0.0
        out[f"{name}_active_dims"] = active
        out[f"{name}_sparsity_ratio"] = 1.0 - active / rows.size
        counts[name] = np.bincount(rows.indices, minlength=rows.size) / max(len(rows), 1)
    out["avg_flops"] = float(counts["query"] @ counts["corpus"])
    return out


def top_hits(
    query_ids: Sequence[str], rankings: dict[str, list[str]], scores: np.ndarray, k: int = 10
) -> list[dict[str, Any]]:
    """A dev search's predictions: each query's first ``k`` documents with their scores."""
    return [
        {
            "query": q,
            "hits": [
                {"id": d, "score": round(float(s), 6)}
                for d, s in zip(rankings[q][:k], row[:k], strict=True)
            ],
        }
        for q, row in zip(query_ids, scores.tolist(), strict=True)
    ]
