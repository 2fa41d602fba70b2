"""Exact sparse search (bertkit.evaluation.retrieval.exact_sparse_search) on a synthetic
SPLADE-shaped corpus: time and peak RSS, to show the inverted index stays bounded where a dense
(D x V) matrix would not fit. Terms are drawn Zipf-like (frequent word pieces shared by many
documents), about 120 per document and 30 per query, over BERT's 30,522 pieces; three queries
are checked against a full scoring of their rows.

    PYTHONPATH=src python benchmarks/sparse_search_memory.py --docs 100000 --queries 1000
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from bertkit.evaluation.retrieval import SparseRows, exact_sparse_search

VOCAB = 30522


def synthetic(rng: np.random.Generator, n: int, active: int) -> SparseRows:
    p = 1.0 / np.arange(1, VOCAB + 1) ** 0.8
    p /= p.sum()
    parts = [np.unique(rng.choice(VOCAB, max(1, rng.poisson(active)), p=p)) for _ in range(n)]
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in parts])]).astype(np.int64)
    indices = np.concatenate(parts).astype(np.int64)
    return SparseRows(indptr, indices, rng.random(len(indices)).astype(np.float32) + 0.01, VOCAB)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    docs, queries = synthetic(rng, args.docs, 120), synthetic(rng, args.queries, 30)
    before = rss_mib()
    start = time.perf_counter()
    ids, _ = exact_sparse_search(queries, docs, 100)
    seconds = time.perf_counter() - start
    doc_of = np.repeat(np.arange(args.docs), docs.active())
    for q in range(3):
        dense = np.zeros(VOCAB)
        a, b = queries.indptr[q], queries.indptr[q + 1]
        dense[queries.indices[a:b]] = queries.values[a:b]
        full = np.bincount(doc_of, dense[docs.indices] * docs.values, minlength=args.docs)
        assert ids[q].tolist() == np.lexsort((np.arange(args.docs), -full))[:100].tolist()
    print(
        f"{args.queries} queries x {args.docs} documents ({len(docs.indices)} non-zero entries), "
        f"top 100: {seconds:.2f} s ({args.queries / seconds:.0f} queries/s); peak RSS "
        f"{rss_mib():.0f} MiB ({before:.0f} MiB before the search); a dense float32 corpus "
        f"matrix would be {args.docs * VOCAB * 4 / 2**30:.1f} GiB"
    )


if __name__ == "__main__":
    main()
