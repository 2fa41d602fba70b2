"""Scoring sentence embeddings on labelled pairs: STS and pair classification, numpy only.

The definitions are sentence-transformers' evaluators' (6.3), so a model scores the same digits
here and there (MTEB's STS and pair-classification tasks compute the same quantities):

- **STS** (``EmbeddingSimilarityEvaluator``; gold scores such as STS-B's 0-5): per similarity
  function, Pearson and Spearman (average ranks for ties, as ``scipy.stats.spearmanr``) of the
  pair's similarity against the gold score: ``pearson_cosine``, ``spearman_cosine``, ...
- **Pair classification** (``BinaryClassificationEvaluator``; labels 0/1 such as MRPC's):
  per similarity function, the best accuracy over all thresholds and that threshold, the best
  F1 with its threshold and the precision and recall there, average precision (scikit-learn's
  ``average_precision_score``) and the Matthews correlation of the F1 threshold's predictions:
  ``cosine_accuracy``, ``cosine_accuracy_threshold``, ``cosine_f1``, ... ``cosine_mcc``.

Similarities: ``cosine`` (unit vectors' dot product, norms clipped at 1e-12), ``dot``, and the
``euclidean`` and ``manhattan`` distances. For STS a distance is negated (higher = more similar,
as sentence-transformers' ``pairwise_euclidean_sim``); for pair classification it stays a
distance (lower = more similar) and its thresholds are distances, as there. Scores are computed
in the vectors' precision (float32 vectors give float32 scores, as sentence-transformers' torch
functions do), so tied scores and thresholds are the same numbers there and here.

Threshold search (sentence-transformers' ``find_best_acc_and_threshold`` and
``find_best_f1_and_threshold``): the pairs are sorted most similar first and cut only between
two different scores (tied scores fall on the same side). Accuracy starts from "all
dissimilar" (the fraction of negatives, threshold just above the best score); a later cut
replaces the best only when strictly better, so the first best cut wins. A cut's threshold is the
midpoint of the scores on both sides (the last cut: its own score); a midpoint that rounds onto
the next score is replaced by the cut's own score. F1 counts only cuts with a true positive; with
none (no positive pair) F1, precision, recall and the threshold are 0.

Worked example (cosine, most similar first): scores 0.9, 0.8, 0.8, 0.1 with labels 1, 0, 1, 0.
Accuracy: all dissimilar 2/4; cut after 0.9: 3/4 (threshold 0.85); after the tied 0.8s: 3/4, not
better; after 0.1: 2/4 -> accuracy 0.75 at 0.85. F1: after 0.9 P=1 R=1/2 F1=2/3; after 0.8: P=2/3
R=1 F1=0.8 (threshold 0.45) -> best F1 0.8. Average precision: 1/2 * 1 + 1/2 * 2/3 = 0.8333.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertkit.evaluation.classification import matthews_corrcoef, pearson, spearman
from bertkit.evaluation.retrieval import unit_rows

SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
"""The similarity functions scored (sentence-transformers' ``SimilarityFunction`` values)."""

DISTANCES = frozenset({"euclidean", "manhattan"})
"""The similarities that are distances (lower = more similar)."""

KINDS = ("sts", "pair_classification")
"""What a labelled pairs file is scored as: gold similarity scores, or 0/1 labels."""


def main_metric(kind: str, similarity: str = "cosine") -> str:
    """The key that selects a model, as sentence-transformers' evaluators' ``primary_metric``:
    ``spearman_<similarity>`` for STS, ``<similarity>_ap`` for pair classification."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    return f"spearman_{similarity}" if kind == "sts" else f"{similarity}_ap"


def pair_metrics(
    kind: str,
    a: np.ndarray,
    b: np.ndarray,
    labels: Sequence[float] | np.ndarray,
    similarities: Sequence[str] = SIMILARITIES,
) -> dict[str, float]:
    """The metrics of pairs ``(a[i], b[i])`` scored as ``kind``: :func:`sts_metrics` for
    ``sts`` (gold scores), :func:`pair_classification_metrics` for ``pair_classification``."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    score = sts_metrics if kind == "sts" else pair_classification_metrics
    return score(a, b, labels, similarities)


def pair_scores(a: np.ndarray, b: np.ndarray, similarity: str) -> np.ndarray:
    """Row-wise ``similarity`` of ``a[i]`` and ``b[i]``: (N, H), (N, H) -> (N,), in the vectors'
    precision (at least float32). Distances come back as distances (non-negative)."""
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(
            f"expected two (N, H) arrays of the same shape, got {a.shape} and {b.shape}"
        )
    dtype = np.result_type(a.dtype, b.dtype, np.float32)
    a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    if similarity == "cosine":
        return np.sum(unit_rows(a) * unit_rows(b), axis=1, dtype=dtype)
    if similarity == "dot":
        return np.sum(a * b, axis=1, dtype=dtype)
    if similarity == "euclidean":
        return np.sqrt(np.sum((a - b) ** 2, axis=1, dtype=dtype))
    if similarity == "manhattan":
        return np.sum(np.abs(a - b), axis=1, dtype=dtype)
    raise ValueError(
        f"unknown similarity {similarity!r}; expected one of {', '.join(SIMILARITIES)}"
    )


def sts_metrics(
    a: np.ndarray,
    b: np.ndarray,
    gold: Sequence[float] | np.ndarray,
    similarities: Sequence[str] = SIMILARITIES,
) -> dict[str, float]:
    """``pearson_<sim>`` and ``spearman_<sim>`` of each similarity against the ``gold`` scores
    (NaN when either side is constant, as scipy gives)."""
    y = _labels(gold, a)
    out: dict[str, float] = {}
    for sim in similarities:
        s = pair_scores(a, b, sim)
        s = -s if sim in DISTANCES else s
        out[f"pearson_{sim}"] = pearson(y, s)
        out[f"spearman_{sim}"] = spearman(y, s)
    return out


def pair_classification_metrics(
    a: np.ndarray,
    b: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    similarities: Sequence[str] = SIMILARITIES,
) -> dict[str, float]:
    """Per similarity: ``<sim>_accuracy``, ``_accuracy_threshold``, ``_f1``, ``_f1_threshold``,
    ``_precision``, ``_recall``, ``_ap``, ``_mcc`` (module docstring). ``labels`` are 0/1."""
    y = _labels(labels, a)
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("pair classification needs labels 0 and 1")
    y = y.astype(np.int64)
    out: dict[str, float] = {}
    for sim in similarities:
        s = pair_scores(a, b, sim)
        higher = sim not in DISTANCES
        acc, acc_threshold = best_accuracy(s, y, higher)
        f1, precision, recall, f1_threshold = best_f1(s, y, higher)
        predicted = (s >= f1_threshold) if higher else (s <= f1_threshold)
        out.update(
            {
                f"{sim}_accuracy": acc,
                f"{sim}_accuracy_threshold": acc_threshold,
                f"{sim}_f1": f1,
                f"{sim}_f1_threshold": f1_threshold,
                f"{sim}_precision": precision,
                f"{sim}_recall": recall,
                f"{sim}_ap": average_precision(y, s if higher else -s),
                f"{sim}_mcc": matthews_corrcoef(y, predicted.astype(np.int64)),
            }
        )
    return out


def _labels(values: Sequence[float] | np.ndarray, a: np.ndarray) -> np.ndarray:
    y = np.asarray(values, dtype=np.float64)
    if y.ndim != 1 or y.shape[0] != a.shape[0]:
        raise ValueError(f"expected {a.shape[0]} labels, got shape {y.shape}")
    if y.size == 0:
        raise ValueError("expected at least one pair")
    return y


def _cuts(scores: np.ndarray, labels: np.ndarray, higher: bool):
    """Scores in the search's order (``higher``: most similar = highest first), each cut's last
    index (between different scores, and the end), the positives up to and including each cut,
    and the signed scores (negated distances) the search runs on."""
    signed = scores if higher else -scores  # negation is exact: thresholds map back exactly
    order = np.argsort(-signed, kind="stable")
    ordered = signed[order]
    ends = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))
    positives = np.cumsum(labels[order] == 1)[ends]
    return ordered, ends, positives


def _threshold(ordered: np.ndarray, end: int, higher: bool) -> float:
    """The cut after ``ordered[end]``: the midpoint with the next score (in the scores'
    precision), its own score at the end or where the midpoint rounds onto the next score."""
    score = ordered[end]
    if end + 1 < len(ordered):
        mid = (score + ordered[end + 1]) / 2
        score = score if mid == ordered[end + 1] else mid
    return float(score if higher else -score) + 0.0  # + 0.0: no "-0.0"


def best_accuracy(
    scores: np.ndarray, labels: np.ndarray, higher: bool = True
) -> tuple[float, float]:
    """The best accuracy of "similar iff beyond a threshold" over all cuts, and its threshold
    (module docstring). ``labels`` 0/1; ``higher``: a higher score is more similar."""
    scores, labels = np.asarray(scores), np.asarray(labels)
    n = len(labels)
    ordered, ends, positives = _cuts(scores, labels, higher)
    negatives_left = int(np.sum(labels == 0)) - (ends + 1 - positives)
    accuracy = (positives + negatives_left) / n
    start = int(np.sum(labels == 0)) / n
    dtype = np.result_type(scores.dtype, np.float16)
    # "all dissimilar": just beyond the most similar score, in the scores' precision
    above = np.nextafter(ordered[0].astype(dtype), np.array(np.inf, dtype=dtype))
    best, threshold = start, float(above if higher else -above)
    i = int(np.argmax(accuracy))
    if accuracy[i] > start:
        best, threshold = float(accuracy[i]), _threshold(ordered, int(ends[i]), higher)
    return best, threshold


def best_f1(
    scores: np.ndarray, labels: np.ndarray, higher: bool = True
) -> tuple[float, float, float, float]:
    """``(f1, precision, recall, threshold)`` of the cut with the best F1 (module docstring);
    all 0 when no cut holds a positive."""
    scores, labels = np.asarray(scores), np.asarray(labels)
    ordered, ends, positives = _cuts(scores, labels, higher)
    total = int(np.sum(labels == 1))
    if total == 0:
        return 0.0, 0.0, 0.0, 0.0
    precision = positives / (ends + 1)
    recall = positives / total
    with np.errstate(invalid="ignore"):
        f1 = np.where(positives > 0, 2 * precision * recall / (precision + recall), 0.0)
    i = int(np.argmax(f1))
    if f1[i] <= 0:
        return 0.0, 0.0, 0.0, 0.0
    threshold = _threshold(ordered, int(ends[i]), higher)
    return float(f1[i]), float(precision[i]), float(recall[i]), threshold


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """scikit-learn's ``average_precision_score`` (higher score = more likely positive): the
    sum over the distinct scores, best first, of the recall gained times the precision there.
    0 when there is no positive (scikit-learn warns and gives 0 too)."""
    labels, scores = np.asarray(labels), np.asarray(scores)
    total = int(np.sum(labels == 1))
    if total == 0:
        return 0.0
    order = np.argsort(-scores, kind="stable")
    ordered = scores[order]
    ends = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))
    tp = np.cumsum(labels[order] == 1)[ends]
    recall = np.concatenate([[0.0], tp / total])
    return float(np.sum(np.diff(recall) * (tp / (ends + 1))))
