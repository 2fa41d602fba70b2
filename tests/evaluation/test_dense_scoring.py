"""Dense search scores by a folder's similarity: negated euclidean and manhattan distances
worked by hand, the ranking they give where cosine ranks otherwise, and which vectors are
normalised for which similarity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.evaluation.dense_scoring import as_given, dense_scoring, negated_distances
from bertkit.evaluation.retrieval import exact_search, unit_rows

QUERY = np.array([[3.0, 0.0]], dtype=np.float32)
DOCS = np.array([[1.0, 0.0], [3.0, 4.0], [6.0, 1.0]], dtype=np.float32)


def test_negated_distances_worked_by_hand() -> None:
    # euclidean: |(3,0)-(1,0)| = 2, |(3,0)-(3,4)| = 4, |(3,0)-(6,1)| = sqrt(10)
    np.testing.assert_allclose(
        negated_distances(QUERY, DOCS, "euclidean"), [[-2.0, -4.0, -np.sqrt(10.0)]], rtol=1e-6
    )
    # manhattan: 2 + 0, 0 + 4, 3 + 1
    np.testing.assert_array_equal(negated_distances(QUERY, DOCS, "manhattan"), [[-2, -4, -4]])
    assert negated_distances(QUERY, DOCS, "euclidean").dtype == np.float32
    with pytest.raises(ValueError, match="not a distance: 'cosine'"):
        negated_distances(QUERY, DOCS, "cosine")


def test_a_point_at_itself_is_at_distance_zero_not_nan() -> None:
    """|q|^2 + |d|^2 - 2 q.d can round below zero for d = q; it is clipped before the root.
    What is left is the expansion's float32 rounding, about sqrt(eps * |v|^2) (here |v|^2 is
    about 384: a few hundredths), as torch.cdist gives for more than 25 rows."""
    v = np.random.default_rng(0).normal(size=(40, 384)).astype(np.float32)
    out = negated_distances(v, v, "euclidean")
    assert not np.isnan(out).any() and (out <= 0).all()
    np.testing.assert_allclose(np.diag(out), 0.0, atol=0.05)


def test_random_vectors_match_the_definitions() -> None:
    rng = np.random.default_rng(1)
    q, d = rng.normal(size=(5, 16)), rng.normal(size=(7, 16))
    diff = q[:, None, :] - d[None, :, :]
    np.testing.assert_allclose(
        negated_distances(q, d, "euclidean"), -np.sqrt((diff**2).sum(2)), rtol=1e-5
    )
    np.testing.assert_allclose(
        negated_distances(q, d, "manhattan"), -np.abs(diff).sum(2), rtol=1e-5
    )


def test_manhattan_equals_sentence_transformers_manhattan_sim_to_the_last_bit() -> None:
    """sentence-transformers' ``manhattan_sim`` is ``-torch.cdist(a, b, p=1)``: the same vectors
    give the same float32 scores, so near-ties rank as there (a numpy sum of |q - d| differs
    from it in the last bits for 384-dim rows)."""
    rng = np.random.default_rng(2)
    q = rng.normal(size=(30, 384)).astype(np.float32)
    d = rng.normal(size=(200, 384)).astype(np.float32)
    reference = -torch.cdist(torch.from_numpy(q), torch.from_numpy(d), p=1.0)
    out = negated_distances(q, d, "manhattan")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, reference.numpy())
    # rows taken out of order (a non-contiguous view) score as the same rows copied
    np.testing.assert_array_equal(negated_distances(q[::-2], d, "manhattan"), out[::-2])


@pytest.mark.parametrize(
    ("similarity", "order"),
    [
        (None, [0, 2, 1]),  # cosine: (1,0) 1.0, (6,1) 0.986, (3,4) 0.6
        ("cosine", [0, 2, 1]),
        ("dot", [2, 1, 0]),  # 18, 9, 3
        ("euclidean", [0, 2, 1]),  # 2, 3.16, 4
        ("manhattan", [0, 1, 2]),  # 2, 4, 4: the tie goes to the lower index
    ],
)
def test_each_similarity_ranks_as_its_function(similarity, order) -> None:
    prepare, score = dense_scoring(similarity)
    assert prepare is (unit_rows if similarity in (None, "cosine") else as_given)
    found, _ = exact_search(prepare(QUERY), prepare(DOCS), 3, score=score)
    assert found.tolist() == [order]


def test_distances_rank_far_documents_last_where_cosine_ranks_them_first() -> None:
    """A long document in the query's direction: nearest by cosine, farthest by distance."""
    docs = np.array([[100.0, 1.0], [1.0, 1.0]], dtype=np.float32)
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    for similarity, first in (("cosine", 0), ("euclidean", 1), ("manhattan", 1)):
        prepare, score = dense_scoring(similarity)
        found, _ = exact_search(prepare(query), prepare(docs), 1, score=score)
        assert found[0, 0] == first, similarity
