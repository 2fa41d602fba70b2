"""Hard-negative selection on hand-made rankings: positives, the query's own text, margins,
max/min score, range_min/range_max, top and seeded random sampling, short queries; and the
config's checks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bertkit.errors import ConfigError
from bertkit.inference.negatives import MiningConfig, select_negatives

# one query, candidates best first: d3 0.9, d1 0.8 (its positive), d7 0.7, d2 0.6, d5 0.5, d4 0.4
IDS = np.array([[3, 1, 7, 2, 5, 4]])
SCORES = np.array([[0.9, 0.8, 0.7, 0.6, 0.5, 0.4]], dtype=np.float32)


def pick(config: MiningConfig, seed: int = 0, **kw):
    positives = kw.pop("positives", [[1]])
    positive_scores = kw.pop("positive_scores", [[0.8]])
    return select_negatives(
        kw.pop("ids", IDS),
        kw.pop("scores", SCORES),
        positives,
        positive_scores,
        config,
        random.Random(seed),
        **kw,
    )


def test_top_takes_the_best_candidates_that_are_not_positives() -> None:
    out = pick(MiningConfig(num_negatives=3, range_max=5))
    assert out.negatives == [[3, 7, 2]]
    assert out.scores == [pytest.approx([0.9, 0.7, 0.6])]
    assert out.skipped == {}


def test_every_positive_of_a_query_and_its_own_text_are_never_mined() -> None:
    out = pick(
        MiningConfig(num_negatives=2, range_max=4),
        positives=[[1, 2]],
        positive_scores=[[0.8, 0.6]],
        own=[3],
    )
    assert out.negatives == [[7, 5]]


def test_include_positives_keeps_them() -> None:
    assert pick(MiningConfig(num_negatives=3, range_max=3, include_positives=True)).negatives == [
        [3, 1, 7]
    ]


def test_the_module_docstring_example() -> None:
    out = pick(MiningConfig(num_negatives=2, range_min=1, range_max=4, absolute_margin=0.15))
    # d3, d7 within 0.15 of 0.8; d2 skipped by range_min; (d4, not in the docstring's list, next)
    assert out.negatives == [[5, 4]]
    assert out.skipped == {"absolute_margin": 2}


def test_margins_count_from_the_lowest_positive_score() -> None:
    # positives d1 (0.8) and d2 (0.6): relative 0.25 -> threshold 0.6 - 0.15 = 0.45
    out = pick(
        MiningConfig(num_negatives=2, range_max=4, relative_margin=0.25),
        positives=[[1, 2]],
        positive_scores=[[0.8, 0.6]],
    )
    assert out.negatives == [[4]]
    assert out.skipped == {"relative_margin": 3}  # d3, d7, d5; the positives are not counted


def test_relative_margin_of_a_negative_positive_score_lowers_the_threshold() -> None:
    ids, scores = np.array([[0, 1, 2]]), np.array([[-0.1, -0.2, -0.3]], dtype=np.float32)
    out = pick(
        MiningConfig(num_negatives=1, range_max=3, relative_margin=0.5),
        ids=ids,
        scores=scores,
        positives=[[9]],
        positive_scores=[[-0.2]],
    )
    assert out.negatives == [[2]]  # threshold -0.2 - 0.1 = -0.3: only -0.3 stays


def test_max_and_min_score() -> None:
    out = pick(MiningConfig(num_negatives=3, range_max=5, max_score=0.75, min_score=0.55))
    assert out.negatives == [[7, 2]]  # d3 above 0.75; d5, d4 below 0.55
    assert out.skipped == {"max_score": 1, "min_score": 2}


def test_range_counts_after_the_positives_and_filters_are_taken_out() -> None:
    # without the positive d1 the ranking is d3 d7 d2 d5 d4: ranks 2..3 are d2 d5
    assert pick(MiningConfig(num_negatives=2, range_min=2, range_max=4)).negatives == [[2, 5]]
    assert pick(MiningConfig(num_negatives=1, range_min=4, range_max=5)).negatives == [[4]]
    # a filter shifts the ranks: without d3 (max_score) ranks 2..3 are d5 d4
    cfg = MiningConfig(num_negatives=2, range_min=2, range_max=4, max_score=0.85)
    assert pick(cfg).negatives == [[5, 4]]


def test_a_query_short_of_candidates_gets_fewer_negatives() -> None:
    out = pick(MiningConfig(num_negatives=3, range_max=5, max_score=0.65))
    assert out.negatives == [[2, 5, 4]]
    out = pick(MiningConfig(num_negatives=3, range_max=5, max_score=0.55))
    assert out.negatives == [[5, 4]]


def test_a_corpus_smaller_than_the_window_pads() -> None:
    out = pick(MiningConfig(num_negatives=3, range_max=20))
    assert out.negatives == [[3, 7, 2]]
    cfg = MiningConfig(num_negatives=3, range_max=20, sampling="random")
    assert len(pick(cfg).negatives[0]) == 3


def test_missing_candidates_are_never_picked() -> None:
    ids = np.array([[3, 1, -1, -1]])
    scores = np.array([[0.9, 0.8, 0.0, 0.0]], dtype=np.float32)
    out = pick(MiningConfig(num_negatives=2, range_max=3), ids=ids, scores=scores)
    assert out.negatives == [[3]]


def test_random_draws_from_the_window_with_the_given_rng_best_first() -> None:
    cfg = MiningConfig(num_negatives=2, range_max=5, sampling="random")
    window = [3, 7, 2, 5, 4]
    rng = random.Random(7)
    expected = sorted(rng.sample(range(5), k=2))  # best first: window order
    assert pick(cfg, seed=7).negatives == [[window[i] for i in expected]]
    assert pick(cfg, seed=7).negatives == pick(cfg, seed=7).negatives
    draws = {tuple(pick(cfg, seed=s).negatives[0]) for s in range(20)}
    assert len(draws) > 3  # the seed matters: a negative control for the line above


def test_queries_are_independent_rows() -> None:
    ids = np.array([[3, 1, 7], [1, 3, 7]])
    scores = np.array([[0.9, 0.8, 0.7], [0.9, 0.5, 0.1]], dtype=np.float32)
    out = pick(
        MiningConfig(num_negatives=1, range_max=2, absolute_margin=0.1),
        ids=ids,
        scores=scores,
        positives=[[1], [3]],
        positive_scores=[[0.8], [0.5]],
    )
    assert out.negatives == [[7], [7]]  # query 2: d1 (0.9 > 0.5 - 0.1) dropped, d3 its positive
    assert out.scores[0] == [pytest.approx(0.7)]


def test_default_range_max() -> None:
    assert MiningConfig(num_negatives=3).window_end(2) == 5
    assert MiningConfig(num_negatives=3, range_min=4).window_end(1) == 8
    assert MiningConfig(num_negatives=3, relative_margin=0.05).window_end(1) == 31
    assert MiningConfig(num_negatives=3, min_score=0.1).window_end(1) == 4
    assert MiningConfig(num_negatives=3).candidates(2) == 8


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"num_negatives": 0}, "num negatives must be >= 1"),
        ({"range_min": -1}, "range min must be >= 0"),
        ({"range_min": 5, "range_max": 3}, "range 5..3 holds fewer"),
        ({"range_min": 5, "range_max": 6, "num_negatives": 2}, "range 5..6 holds fewer"),
        ({"sampling": "best"}, "sampling must be one of top, random"),
        ({"relative_margin": -0.1}, "relative margin must be >= 0"),
        ({"min_score": 0.5, "max_score": 0.4}, "min score 0.5 is above max score 0.4"),
    ],
)
def test_config_checks(kw, message) -> None:
    with pytest.raises(ConfigError, match=message):
        MiningConfig(**kw)


def test_mining_no_pairs_is_a_one_line_error() -> None:
    """The library call (the CLI refuses an empty file before): no pairs, no max() traceback."""
    from bertkit.errors import ConfigError
    from bertkit.inference.mining import mine

    with pytest.raises(ConfigError, match="no \\(query, positive\\) pairs"):
        mine(None, [], MiningConfig())  # type: ignore[arg-type]
