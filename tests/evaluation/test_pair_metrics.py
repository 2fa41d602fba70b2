"""STS and pair-classification metrics on hand-made vectors and scores: exact values, ties,
threshold-search edge cases, and the search itself against sentence-transformers' on random
scores with ties."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertkit.evaluation.pairs import (
    average_precision,
    best_accuracy,
    best_f1,
    main_metric,
    pair_classification_metrics,
    pair_scores,
    sts_metrics,
)

# a[i] = (1, 0) against b[i]: cosines 0.6, 0, 0.8, 0.8; dot 3, 0, 4, 8
A = np.array([[1.0, 0.0]] * 4)
B = np.array([[3.0, 4.0], [0.0, 2.0], [4.0, 3.0], [8.0, 6.0]])


def test_similarities_of_hand_made_vectors() -> None:
    assert pair_scores(A, B, "cosine") == pytest.approx([0.6, 0.0, 0.8, 0.8], abs=1e-15)
    assert pair_scores(A, B, "dot").tolist() == [3.0, 0.0, 4.0, 8.0]
    assert pair_scores(A, B, "euclidean") == pytest.approx(
        [math.sqrt(20), math.sqrt(5), math.sqrt(18), math.sqrt(85)], abs=1e-15
    )
    assert pair_scores(A, B, "manhattan").tolist() == [6.0, 3.0, 6.0, 13.0]
    assert pair_scores(A.astype(np.float32), B.astype(np.float32), "cosine").dtype == np.float32
    assert pair_scores(np.zeros((1, 2)), np.ones((1, 2)), "cosine").tolist() == [0.0]  # no NaN
    with pytest.raises(ValueError, match="similarity"):
        pair_scores(A, B, "jaccard")
    with pytest.raises(ValueError, match="shape"):
        pair_scores(A, B[:3], "dot")


def test_spearman_with_ties_on_both_sides() -> None:
    gold = [1.0, 2.0, 2.0, 4.0]  # ranks 1, 2.5, 2.5, 4
    m = sts_metrics(A, B, gold)
    # cosine ranks 2, 1, 3.5, 3.5: covariance 2.25 over sqrt(4.5 * 4.5)
    assert m["spearman_cosine"] == pytest.approx(0.5, abs=1e-15)
    # dot ranks 2, 1, 3, 4: 3 / sqrt(4.5 * 5)
    assert m["spearman_dot"] == pytest.approx(3 / math.sqrt(22.5), abs=1e-15)
    # Pearson of the cosines: 0.45 / sqrt(4.75 * 0.43)
    assert m["pearson_cosine"] == pytest.approx(0.45 / math.sqrt(4.75 * 0.43), abs=1e-12)
    # distances are negated: the closest pair (manhattan 3) is the most similar
    # manhattan 6, 3, 6, 13 -> similarity ranks 2.5, 4, 2.5, 1
    x = np.array([1, 2.5, 2.5, 4]) - 2.5
    y = np.array([2.5, 4, 2.5, 1]) - 2.5
    assert m["spearman_manhattan"] == pytest.approx(x @ y / math.sqrt((x @ x) * (y @ y)), 1e-15)
    assert set(m) == {
        f"{s}_{f}"
        for s in ("pearson", "spearman")
        for f in ("cosine", "dot", "euclidean", "manhattan")
    }
    assert math.isnan(sts_metrics(A, B, [3.0] * 4)["pearson_cosine"])  # constant gold


def test_worked_example_of_the_module_docstring() -> None:
    s, y = np.array([0.9, 0.8, 0.8, 0.1]), np.array([1, 0, 1, 0])
    assert best_accuracy(s, y) == (0.75, pytest.approx(0.85, abs=1e-15))
    f1, p, r, t = best_f1(s, y)
    assert (f1, p, r) == (pytest.approx(0.8), pytest.approx(2 / 3), 1.0)
    assert t == pytest.approx(0.45, abs=1e-15)
    assert average_precision(y, s) == pytest.approx(0.5 + 0.5 * 2 / 3, abs=1e-15)


def test_all_equal_scores_cut_only_at_the_end() -> None:
    s, y = np.full(3, 0.5), np.array([1, 0, 1])
    assert best_accuracy(s, y) == (2 / 3, 0.5)  # better than "all dissimilar" (1/3)
    assert best_f1(s, y) == (0.8, 2 / 3, 1.0, 0.5)
    assert average_precision(y, s) == pytest.approx(2 / 3, abs=1e-15)


def test_all_negative_keeps_all_dissimilar_just_above_the_best_score() -> None:
    s, y = np.array([0.5, 0.5, 0.2], dtype=np.float32), np.zeros(3, dtype=int)
    acc, t = best_accuracy(s, y)
    assert acc == 1.0 and t == float(np.nextafter(np.float32(0.5), np.float32(1)))
    assert t > 0.5 and t - 0.5 < 1e-7  # the next float32, not the next float64
    assert best_f1(s, y) == (0.0, 0.0, 0.0, 0.0)
    assert average_precision(y, s) == 0.0  # scikit-learn gives 0 (with a warning)
    # distances: just below the smallest distance
    acc, t = best_accuracy(s, y, higher=False)
    assert acc == 1.0 and t == float(np.nextafter(np.float32(0.2), np.float32(0)))


def test_all_positive_takes_every_pair() -> None:
    s, y = np.array([0.9, 0.4, 0.4, 0.1]), np.ones(4, dtype=int)
    assert best_accuracy(s, y) == (1.0, 0.1)
    assert best_f1(s, y) == (1.0, 1.0, 1.0, 0.1)
    assert average_precision(y, s) == 1.0


def test_distance_thresholds_are_distances() -> None:
    d, y = np.array([0.2, 1.0, 0.4, 3.0]), np.array([1, 0, 1, 0])  # close = similar
    assert best_accuracy(d, y, higher=False) == (1.0, pytest.approx(0.7, abs=1e-15))
    assert best_f1(d, y, higher=False) == (1.0, 1.0, 1.0, pytest.approx(0.7, abs=1e-15))
    m = pair_classification_metrics(A, B, [0, 1, 0, 0], ["manhattan"])
    # manhattan 6, 3, 6, 13: only the closest pair is a paraphrase -> cut between 3 and 6
    assert m["manhattan_accuracy"] == 1.0 and m["manhattan_accuracy_threshold"] == 4.5
    assert m["manhattan_ap"] == 1.0 and m["manhattan_mcc"] == 1.0


def test_a_midpoint_rounding_onto_the_next_score_is_the_cut_score() -> None:
    lo = np.float32(1.0)
    hi = np.nextafter(lo, np.float32(2))  # (hi + lo) / 2 rounds to lo in float32
    s, y = np.array([hi, lo], dtype=np.float32), np.array([1, 0])
    assert best_accuracy(s, y) == (1.0, float(hi))
    assert best_f1(s, y)[3] == float(hi)


def test_pair_classification_keys_and_label_check() -> None:
    m = pair_classification_metrics(A, B, [1, 0, 1, 1])
    assert len(m) == 32 and m["cosine_mcc"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="0 and 1"):
        pair_classification_metrics(A, B, [1, 0, 2, 1])
    with pytest.raises(ValueError, match="labels"):
        sts_metrics(A, B, [1.0, 2.0])
    assert main_metric("sts") == "spearman_cosine"
    assert main_metric("pair_classification", "dot") == "dot_ap"


def test_threshold_search_equals_sentence_transformers_on_random_ties() -> None:
    ev = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation")
    sk = pytest.importorskip("sklearn.metrics")
    ref = ev.BinaryClassificationEvaluator
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 30))
        # few distinct values: many ties; float32 as model scores are
        s = (rng.integers(0, 8, n) / 7).astype(np.float32)
        y = rng.integers(0, 2, n) if trial % 10 else np.full(n, trial % 20 // 10)
        for higher in (True, False):
            acc, t = ref.find_best_acc_and_threshold(s, y, higher)
            assert best_accuracy(s, y, higher) == (acc, float(t)), (s, y, higher)
            f1, p, r, t = ref.find_best_f1_and_threshold(s, y, higher)
            assert best_f1(s, y, higher) == pytest.approx((f1, p, r, float(t)), abs=1e-15)
        if y.any():
            assert average_precision(y, s) == pytest.approx(
                sk.average_precision_score(y, s), abs=1e-12
            )
