"""SQuAD post-processing: n-best span search, v2.0 null decision, and null-threshold tuning.

For each example, every window (feature) proposes spans from its ``n_best_size`` highest start
logits x ``n_best_size`` highest end logits, keeping spans that

* lie inside the context (both ends have character offsets),
* have start <= end and at most ``max_answer_length`` tokens,
* start at a token whose max context is this window (optional; google's rule).

A span scores ``start_logit + end_logit``; its text is the ORIGINAL context between the start
token's first and the end token's last character (so case, accents and spacing are kept).

SQuAD v2.0: the null score is the smallest ``start_logit[CLS] + end_logit[CLS]`` over the
windows; ``null_score_diff = null_score - best_span_score``, and the answer is "" when
``null_score_diff > threshold``. :func:`find_best_null_threshold` picks the threshold that
maximises dev F1; the trainer saves it with the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bertkit.data.tasks.squad import SquadExample
from bertkit.evaluation.squad import null_answer_score, raw_scores
from bertkit.tasks.squad_features import SquadFeature


@dataclass(frozen=True)
class SquadPostConfig:
    """Span search settings (defaults: the BERT paper's)."""

    n_best_size: int = 20
    """Start and end candidates searched per window."""
    max_answer_length: int = 30
    """Longest answer span, in tokens."""
    use_max_context: bool = True


@dataclass(frozen=True)
class SpanCandidate:
    """One candidate answer: its text, character span in the context, and scores."""

    text: str
    start_char: int
    end_char: int
    start_logit: float
    end_logit: float
    probability: float = 0.0

    @property
    def score(self) -> float:
        return self.start_logit + self.end_logit


@dataclass(frozen=True)
class SquadPrediction:
    """The search result for one question.

    ``best_text`` is the best non-null span ("" if no span qualified); ``null_score_diff`` is
    ``null_score - best span score`` (+inf when no span qualified). ``nbest`` holds up to
    ``n_best_size`` spans, best first, with softmax probabilities over them.
    """

    qas_id: str
    best_text: str
    null_score: float
    null_score_diff: float
    nbest: list[SpanCandidate]

    def chooses_null(self, version_2: bool, threshold: float = 0.0) -> bool:
        """Whether the null answer wins: under v2.0, ``null_score_diff > threshold``."""
        return version_2 and self.null_score_diff > threshold

    def answer(self, version_2: bool, threshold: float = 0.0) -> str:
        """The final answer: "" when the null answer wins (:meth:`chooses_null`)."""
        return "" if self.chooses_null(version_2, threshold) else self.best_text


def _top(x: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-x, kind="stable")[:k]


def postprocess_squad(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    config: SquadPostConfig | None = None,
) -> dict[str, SquadPrediction]:
    """Search spans for every example; ``start_logits[i]``/``end_logits[i]`` belong to ``features[i]``.

    Logit arrays may be padded past the feature's length (extra positions are ignored).
    Returns ``qas_id -> SquadPrediction`` in example order.
    """
    config = config or SquadPostConfig()
    if not len(features) == len(start_logits) == len(end_logits):
        raise ValueError("expected one start and one end logit row per feature")
    by_example: dict[int, list[int]] = {}
    for i, f in enumerate(features):
        by_example.setdefault(f.example_index, []).append(i)
    out: dict[str, SquadPrediction] = {}
    for ex_index, ex in enumerate(examples):
        candidates: list[SpanCandidate] = []
        null_score = math.inf
        for fi in by_example.get(ex_index, []):
            f = features[fi]
            n = len(f.input_ids)
            s_log = np.asarray(start_logits[fi], dtype=np.float64)[:n]
            e_log = np.asarray(end_logits[fi], dtype=np.float64)[:n]
            null_score = min(null_score, float(s_log[0] + e_log[0]))
            candidates.extend(_feature_spans(ex.context, f, s_log, e_log, config))
        candidates.sort(key=lambda c: c.score, reverse=True)
        nbest = _dedup(candidates)[: config.n_best_size]
        if nbest:
            scores = np.array([c.score for c in nbest])
            probs = np.exp(scores - scores.max())
            probs /= probs.sum()
            nbest = [
                SpanCandidate(
                    c.text, c.start_char, c.end_char, c.start_logit, c.end_logit, float(p)
                )
                for c, p in zip(nbest, probs)
            ]
        best = nbest[0] if nbest else None
        diff = math.inf if best is None else null_score - best.score
        out[ex.qas_id] = SquadPrediction(
            ex.qas_id, best.text if best else "", null_score, diff, nbest
        )
    return out


def _feature_spans(
    context: str, f: SquadFeature, s_log: np.ndarray, e_log: np.ndarray, config: SquadPostConfig
) -> list[SpanCandidate]:
    spans = []
    for s in _top(s_log, config.n_best_size):
        s = int(s)
        if f.offsets[s] is None or (config.use_max_context and not f.token_is_max_context[s]):
            continue
        for e in _top(e_log, config.n_best_size):
            e = int(e)
            if f.offsets[e] is None or e < s or e - s + 1 > config.max_answer_length:
                continue
            a, b = f.offsets[s][0], f.offsets[e][1]
            spans.append(SpanCandidate(context[a:b], a, b, float(s_log[s]), float(e_log[e])))
    return spans


def _dedup(candidates: list[SpanCandidate]) -> list[SpanCandidate]:
    """Keep the best-scoring copy of each character span (windows overlap, so spans repeat)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for c in candidates:
        if (c.start_char, c.end_char) not in seen:
            seen.add((c.start_char, c.end_char))
            out.append(c)
    return out


def final_answers(
    predictions: Mapping[str, SquadPrediction], version_2: bool, threshold: float = 0.0
) -> dict[str, str]:
    """``qas_id -> answer text`` ("" for no answer), the content of SQuAD's predictions.json."""
    return {q: p.answer(version_2, threshold) for q, p in predictions.items()}


def null_answers(
    predictions: Mapping[str, SquadPrediction], version_2: bool, threshold: float = 0.0
) -> frozenset[str]:
    """The questions whose null answer wins at ``threshold``: ``squad_scores``'s ``no_answer``."""
    return frozenset(q for q, p in predictions.items() if p.chooses_null(version_2, threshold))


@dataclass(frozen=True)
class NullThreshold:
    """The tuned threshold and the dev scores (percent) it gives."""

    threshold: float
    f1: float
    exact: float


def find_best_null_threshold(
    predictions: Mapping[str, SquadPrediction], gold: Mapping[str, Sequence[str]]
) -> NullThreshold:
    """The null threshold that maximises v2.0 F1 on ``gold`` (qas_id -> gold texts, [] = none).

    Answering a question (``null_score_diff <= threshold``) changes its F1 from the null
    answer's to the best span's. Questions are swept in increasing ``null_score_diff`` and the
    threshold is set to the diff of the last question answered, as in the official v2.0
    script's ``find_best_thresh``; equal diffs are taken together (a threshold cannot separate
    them). If answering nothing is best, the threshold lies just below the smallest diff.
    """
    qids = [q for q in gold if q in predictions]
    if not qids:
        raise ValueError("no prediction matches a gold question")
    span_em, span_f1 = raw_scores(gold, {q: predictions[q].best_text for q in qids}, "2.0")
    # the official find_best_thresh: the null answer scores 0 on a has-answer question (raw
    # list non-empty), even one whose answers normalise to ""
    null_em = null_f1 = {q: null_answer_score(gold[q]) for q in qids}
    n = len(gold)  # questions without a prediction count as 0, as in squad_scores
    f1_now, em_now = sum(null_f1[q] for q in qids), sum(null_em[q] for q in qids)
    finite = sorted(
        (predictions[q].null_score_diff, q)
        for q in qids
        if math.isfinite(predictions[q].null_score_diff)
    )
    best = NullThreshold(
        (finite[0][0] - 1.0) if finite else 0.0, 100.0 * f1_now / n, 100.0 * em_now / n
    )
    i = 0
    while i < len(finite):
        diff = finite[i][0]
        while i < len(finite) and finite[i][0] == diff:
            q = finite[i][1]
            f1_now += span_f1[q] - null_f1[q]
            em_now += span_em[q] - null_em[q]
            i += 1
        if 100.0 * f1_now / n > best.f1 + 1e-12:
            best = NullThreshold(diff, 100.0 * f1_now / n, 100.0 * em_now / n)
    return best
