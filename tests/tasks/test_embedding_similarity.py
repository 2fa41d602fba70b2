"""What an embedding model is trained, saved and scored by: cosine or the dot product
(``similarity_fn_name``), and the ranking loss's scale that goes with each; a start folder's
kept distance, declared again and scoring dev (pairs, and a retrieval search)."""

from __future__ import annotations

import pytest

from bertkit.errors import ConfigError
from bertkit.tasks.embedding import EmbeddingAdapter


def _adapter(**kw) -> EmbeddingAdapter:
    return EmbeddingAdapter("embeddings", "x", **kw)


@pytest.mark.parametrize(
    ("kw", "similarity", "scale"),
    [
        ({}, "cosine", 20.0),  # MultipleNegativesRankingLoss' cos_sim at 20
        ({"normalize": False}, "cosine", 20.0),  # not normalising alone changes nothing
        ({"similarity_fn_name": "dot", "normalize": False}, "dot", 1.0),  # dot_score at 1
        ({"similarity_fn_name": "dot", "normalize": False, "scale": 5.0}, "dot", 5.0),
        ({"similarity_fn_name": "cosine", "normalize": False}, "cosine", 20.0),
        ({"loss": "margin-mse", "normalize": False}, "dot", 20.0),  # MarginMSELoss' dot
        ({"loss": "margin-mse"}, "cosine", 20.0),
        ({"loss": "distill-kl", "normalize": False, "similarity_fn_name": "cosine"}, "cosine", 20),
    ],
)
def test_similarity_and_scale(kw, similarity, scale) -> None:
    a = _adapter(**kw)
    assert (a.similarity, a.scale) == (similarity, scale)
    again = EmbeddingAdapter.from_state({k: v for k, v in a.state().items() if k != "format"})
    assert (again.similarity, again.scale) == (similarity, scale)


def test_dot_needs_a_model_that_does_not_normalise() -> None:
    with pytest.raises(ConfigError, match="the dot product of unit vectors is their cosine"):
        _adapter(similarity_fn_name="dot")
    with pytest.raises(ConfigError, match="similarity_fn_name must be one of cosine, dot"):
        _adapter(similarity_fn_name="euclidean", normalize=False)


def test_a_kept_distance_is_declared_and_scores_dev_pairs_but_not_the_loss() -> None:
    """A start folder's euclidean is saved again and names the pairs' main metric; the loss
    still scores by cosine at 20, and the kept distance survives the adapter's state."""
    a = _adapter(folder_similarity="euclidean")
    assert (a.similarity, a.scale, a.declared_similarity) == ("cosine", 20.0, "euclidean")
    a._dev_kind = "pair_classification"
    assert a.main_metric == "euclidean_ap"
    again = EmbeddingAdapter.from_state({k: v for k, v in a.state().items() if k != "format"})
    assert again.declared_similarity == "euclidean"
    with pytest.raises(ConfigError, match="folder_similarity must be one of euclidean, manhattan"):
        _adapter(folder_similarity="dot", normalize=False)


def test_a_teacher_loss_refuses_a_scale_whatever_it_scores_by() -> None:
    """The ranking loss alone reads a scale: 20 passes for every loss (the old fixed default, so
    a command that gives it still runs), another value is refused for a teacher loss."""
    with pytest.raises(ConfigError, match="scale is a ranking loss option"):
        _adapter(loss="margin-mse", normalize=False, scale=1.0)
    assert _adapter(loss="distill-kl", normalize=False, scale=20.0).similarity == "dot"


@pytest.mark.parametrize(
    ("kw", "first", "mrr"),
    [
        ({"normalize": False}, "long", 0.5),  # cosine: the long document points the query's way
        ({"normalize": False, "folder_similarity": "euclidean"}, "near", 1.0),
        ({"normalize": False, "folder_similarity": "manhattan"}, "near", 1.0),
        ({"folder_similarity": "euclidean"}, "long", 0.5),  # unit vectors: as cosine
    ],
)
def test_a_retrieval_dev_set_is_searched_as_the_saved_folder_is(kw, first, mrr) -> None:
    """Dev ranks the saved folder's vectors by the similarity it declares, as bertkit evaluate
    and sentence-transformers' evaluator rank that folder: a kept distance of vectors that
    are not normalised puts the near document first, cosine the long one in the query's way."""
    import numpy as np

    from bertkit.tasks.embedding import RetrievalText

    examples = [
        RetrievalText("q", "query", {"near": 1}),
        RetrievalText("long", "a long document"),
        RetrievalText("near", "a near document"),
    ]
    rows = [np.array(v, dtype=np.float32) for v in ([1.0, 0.0], [100.0, 1.0], [1.0, 1.0])]
    scored = _adapter(**kw).score(examples, [], rows)
    assert scored.predictions[0]["hits"][0]["id"] == first
    assert scored.main == pytest.approx(mrr)
