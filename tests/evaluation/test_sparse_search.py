"""Exact top-k by sparse dot product (bertkit.evaluation.retrieval.exact_sparse_search) against
the dense score matrix, for every block and postings split; ties by the given keys; the sparsity
figures on a worked example."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.evaluation.retrieval import SparseRows, exact_sparse_search, sparsity_stats


def rows_of(dense: np.ndarray) -> SparseRows:
    nz = dense != 0
    indptr = np.concatenate([[0], np.cumsum(nz.sum(axis=1))]).astype(np.int64)
    r, c = np.nonzero(nz)
    return SparseRows(indptr, c.astype(np.int64), dense[r, c].astype(np.float32), dense.shape[1])


def random_sparse(rng: np.random.Generator, n: int, size: int, density: float) -> np.ndarray:
    keep = rng.random((n, size)) < density
    return np.where(keep, rng.random((n, size)).astype(np.float32) + 0.1, 0).astype(np.float32)


def brute_force(q: np.ndarray, d: np.ndarray, k: int, ties: np.ndarray) -> list[list[int]]:
    s = q.astype(np.float64) @ d.astype(np.float64).T
    return [sorted(range(len(d)), key=lambda j: (-row[j], ties[j]))[:k] for row in s]


@pytest.mark.parametrize("cells", [1, 7, 64, 1 << 23])
def test_equals_the_dense_ranking_for_every_block_size(cells: int) -> None:
    rng = np.random.default_rng(0)
    q, d = random_sparse(rng, 9, 40, 0.2), random_sparse(rng, 23, 40, 0.15)
    d[5] = d[17] = d[2]  # exact ties: three equal documents
    d[11] = 0  # an empty document (score 0 for every query)
    q[4] = 0  # an empty query: every score ties at 0
    ties = rng.permutation(len(d))
    ids, scores = exact_sparse_search(rows_of(q), rows_of(d), 10, ties=ties, cells=cells)
    assert ids.tolist() == brute_force(q, d, 10, ties)
    want = np.take_along_axis(q.astype(np.float64) @ d.astype(np.float64).T, ids, axis=1)
    np.testing.assert_allclose(scores, want, rtol=1e-6)
    assert ids[4].tolist() == np.argsort(ties)[:10].tolist()  # all tied: the lowest keys


def test_ties_default_to_the_document_position_and_k_is_capped() -> None:
    d = np.array([[0, 1.0, 0], [0, 1.0, 0], [2.0, 0, 0]], dtype=np.float32)
    q = np.array([[1.0, 1.0, 0]], dtype=np.float32)
    ids, scores = exact_sparse_search(rows_of(q), rows_of(d), 10)
    assert ids.tolist() == [[2, 0, 1]] and scores.tolist() == [[2.0, 1.0, 1.0]]
    ids, _ = exact_sparse_search(rows_of(q), rows_of(d), 2, ties=np.array([2, 1, 0]))
    assert ids.tolist() == [[2, 1]]  # the tie at rank 2 goes to the lower key, not position


def test_sizes_must_match() -> None:
    with pytest.raises(ValueError, match="size 3 and 4"):
        exact_sparse_search(rows_of(np.ones((1, 3))), rows_of(np.ones((1, 4))), 1)


def test_unit_rows_give_cosines() -> None:
    d = np.array([[3.0, 4.0, 0], [0, 0, 2.0]], dtype=np.float32)
    unit = rows_of(d).unit()
    np.testing.assert_allclose(unit.values, [0.6, 0.8, 1.0], rtol=1e-6)


def test_sparsity_stats_worked_example() -> None:
    # queries: ids {0, 1} and {1}; documents: {1, 2}, {2}, {0, 1, 2}; 4 vocabulary entries
    q = rows_of(np.array([[1, 1, 0, 0], [0, 2, 0, 0]], dtype=np.float32))
    d = rows_of(np.array([[0, 1, 1, 0], [0, 0, 3, 0], [1, 1, 1, 0]], dtype=np.float32))
    stats = sparsity_stats(q, d)
    assert stats["query_active_dims"] == 1.5 and stats["corpus_active_dims"] == 2.0
    assert stats["query_sparsity_ratio"] == 1 - 1.5 / 4
    assert stats["corpus_sparsity_ratio"] == 0.5
    # mean query counts (1/2, 1, 0, 0) . mean document counts (1/3, 2/3, 1, 0) = 1/6 + 2/3
    assert stats["avg_flops"] == pytest.approx(1 / 6 + 2 / 3, abs=1e-12)
