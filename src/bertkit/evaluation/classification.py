"""Classification and regression metrics (GLUE's official ones), in numpy only.

All scores are fractions in [0, 1] (or [-1, 1] for correlations); callers multiply by 100 for
reporting. Degenerate inputs follow scikit-learn/scipy conventions where they define one:
F1 with no positive prediction and no positive gold is 0; Matthews correlation with a
constant prediction or gold is 0; a correlation with a constant input is NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ArrayLike = Sequence[float] | Sequence[int] | np.ndarray


def _pair(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.shape != p.shape or t.ndim != 1:
        raise ValueError(
            f"expected two 1-D arrays of the same length, got shapes {t.shape} and {p.shape}"
        )
    if t.size == 0:
        raise ValueError("expected at least one example")
    return t, p


def accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Fraction of exact matches."""
    t, p = _pair(y_true, y_pred)
    return float(np.mean(t == p))


def _f1_for(t: np.ndarray, p: np.ndarray, label: object) -> float:
    tp = float(np.sum((p == label) & (t == label)))
    fp = float(np.sum((p == label) & (t != label)))
    fn = float(np.sum((p != label) & (t == label)))
    denom = 2 * tp + fp + fn
    return 0.0 if denom == 0 else 2 * tp / denom


def f1_binary(y_true: ArrayLike, y_pred: ArrayLike, positive: object = 1) -> float:
    """F1 of the ``positive`` class (GLUE MRPC/QQP: positive = 1)."""
    t, p = _pair(y_true, y_pred)
    return _f1_for(t, p, positive)


def f1_macro(y_true: ArrayLike, y_pred: ArrayLike, labels: Sequence[object] | None = None) -> float:
    """Unweighted mean of per-class F1 over ``labels`` (default: classes seen in either array)."""
    t, p = _pair(y_true, y_pred)
    classes = np.unique(np.concatenate([t, p])) if labels is None else list(labels)
    return float(np.mean([_f1_for(t, p, c) for c in classes]))


def matthews_corrcoef(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Matthews correlation coefficient, multi-class form (Gorodkin 2004), as GLUE CoLA uses.

    From the confusion matrix C: ``(c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t))`` with t/p the
    per-class true/predicted counts, c the correct count, s the total. 0 when undefined.
    """
    t, p = _pair(y_true, y_pred)
    classes, inv = np.unique(np.concatenate([t, p]), return_inverse=True)
    ti, pi = inv[: t.size], inv[t.size :]
    k = classes.size
    conf = np.zeros((k, k), dtype=np.float64)
    np.add.at(conf, (ti, pi), 1.0)
    t_sum, p_sum = conf.sum(axis=1), conf.sum(axis=0)
    correct, s = np.trace(conf), conf.sum()
    cov_tp = correct * s - t_sum @ p_sum
    cov_pp = s * s - p_sum @ p_sum
    cov_tt = s * s - t_sum @ t_sum
    if cov_pp == 0 or cov_tt == 0:
        return 0.0
    return float(cov_tp / np.sqrt(cov_tt * cov_pp))


def pearson(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson correlation (NaN when either input is constant)."""
    a, b = _pair(x, y)
    a = a.astype(np.float64) - np.mean(a, dtype=np.float64)
    b = b.astype(np.float64) - np.mean(b, dtype=np.float64)
    denom = np.sqrt(np.dot(a, a) * np.dot(b, b))
    if denom == 0:
        return float("nan")
    return float(np.clip(np.dot(a, b) / denom, -1.0, 1.0))


def rankdata(x: ArrayLike) -> np.ndarray:
    """1-based ranks; tied values share the average of their ranks (scipy's "average")."""
    a = np.asarray(x)
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    # start index of each run of equal values
    new_run = np.concatenate([[True], sorted_a[1:] != sorted_a[:-1]])
    run_id = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    ends = np.concatenate([starts[1:], [a.size]])
    avg = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(a.size, dtype=np.float64)
    ranks[order] = avg[run_id]
    return ranks


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman rank correlation: Pearson of the average ranks (ties handled)."""
    a, b = _pair(x, y)
    return pearson(rankdata(a), rankdata(b))


def glue_metrics(metric: str, y_true: ArrayLike, y_pred: ArrayLike) -> dict[str, float]:
    """The official metric set of a GLUE task (``GlueTask.metric``), as fractions.

    "mcc" -> {mcc}, "accuracy" -> {accuracy}, "accuracy_f1" -> {accuracy, f1, acc_and_f1},
    "pearson_spearman" -> {pearson, spearman, corr} (regression: raw float predictions).
    """
    if metric == "mcc":
        return {"mcc": matthews_corrcoef(y_true, y_pred)}
    if metric == "accuracy":
        return {"accuracy": accuracy(y_true, y_pred)}
    if metric == "accuracy_f1":
        acc, f1 = accuracy(y_true, y_pred), f1_binary(y_true, y_pred)
        return {"accuracy": acc, "f1": f1, "acc_and_f1": (acc + f1) / 2}
    if metric == "pearson_spearman":
        pr, sr = pearson(y_true, y_pred), spearman(y_true, y_pred)
        return {"pearson": pr, "spearman": sr, "corr": (pr + sr) / 2}
    raise ValueError(
        f"unknown metric {metric!r}; expected mcc, accuracy, accuracy_f1 or pearson_spearman"
    )
