"""Classification/regression metrics against scikit-learn and scipy, plus hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from bertkit.evaluation.classification import (
    accuracy,
    f1_binary,
    f1_macro,
    glue_metrics,
    matthews_corrcoef,
    pearson,
    rankdata,
    spearman,
)


def test_hand_computed():
    y = [1, 1, 0, 0, 1]
    p = [1, 0, 0, 1, 1]
    assert accuracy(y, p) == pytest.approx(3 / 5)
    # tp=2 fp=1 fn=1 -> F1 = 4/6
    assert f1_binary(y, p) == pytest.approx(2 / 3)
    # class 0: tp=1 fp=1 fn=1 -> 0.5 ; class 1: 2/3
    assert f1_macro(y, p) == pytest.approx((0.5 + 2 / 3) / 2)
    # MCC = (tp*tn - fp*fn)/sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (2-1)/sqrt(3*3*2*2)
    assert matthews_corrcoef(y, p) == pytest.approx(1 / 6)
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(0.9933992677987828)
    assert list(rankdata([10, 20, 10, 30, 20, 20])) == [1.5, 4.0, 1.5, 6.0, 4.0, 4.0]
    assert spearman([1, 2, 3, 4], [10, 10, 20, 30]) == pytest.approx(0.9486832980505138)


def test_degenerate_cases():
    assert f1_binary([0, 0], [0, 0]) == 0.0
    assert matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="same length"):
        accuracy([1, 2], [1])
    with pytest.raises(ValueError, match="at least one"):
        accuracy([], [])


@pytest.mark.parametrize("seed", range(20))
def test_classification_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 200))
    k = int(rng.integers(2, 5))
    y = rng.integers(0, k, n)
    p = np.where(rng.random(n) < 0.6, y, rng.integers(0, k, n))
    assert accuracy(y, p) == pytest.approx(skm.accuracy_score(y, p), abs=1e-12)
    assert f1_macro(y, p) == pytest.approx(
        skm.f1_score(y, p, average="macro", zero_division=0), abs=1e-12
    )
    assert matthews_corrcoef(y, p) == pytest.approx(skm.matthews_corrcoef(y, p), abs=1e-12)
    yb, pb = (y > 0).astype(int), (p > 0).astype(int)
    assert f1_binary(yb, pb) == pytest.approx(skm.f1_score(yb, pb, zero_division=0), abs=1e-12)
    assert matthews_corrcoef(yb, pb) == pytest.approx(skm.matthews_corrcoef(yb, pb), abs=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_correlations_match_scipy_with_ties(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(3, 300))
    x = np.round(rng.uniform(0, 5, n), 1)  # one decimal: many ties, like STS-B gold scores
    y = np.round(x + rng.normal(0, 1.5, n), int(rng.integers(0, 3)))
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-10)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-10)
    assert np.array_equal(rankdata(y), stats.rankdata(y))


def test_glue_metric_sets():
    y, p = [1, 0, 1, 1], [1, 0, 0, 1]
    assert glue_metrics("accuracy_f1", y, p) == pytest.approx(
        {"accuracy": 0.75, "f1": 0.8, "acc_and_f1": 0.775}
    )
    assert set(glue_metrics("pearson_spearman", [1.0, 2.0, 3.5], [1.1, 1.9, 3.0])) == {
        "pearson",
        "spearman",
        "corr",
    }
    assert glue_metrics("mcc", y, p)["mcc"] == pytest.approx(skm.matthews_corrcoef(y, p))
    with pytest.raises(ValueError, match="unknown metric"):
        glue_metrics("bleu", y, p)
