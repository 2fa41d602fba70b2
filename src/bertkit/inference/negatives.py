"""Hard negatives from each query's ranked candidates: the rules of sentence-transformers'
``mine_hard_negatives``, as a pure function of score arrays (no model, no files).

Per query, over its ``k`` best documents (:meth:`MiningConfig.candidates`), best first:

1. take out its positives (all of them; unless ``include_positives``) and the document whose
   text is the query's own;
2. take out candidates too close to the positive: above ``floor - absolute_margin`` or above
   ``floor - |floor| * relative_margin``, ``floor`` being the query's *lowest* positive score
   (the harder positive, the safer side with several);
3. take out candidates above ``max_score`` (likely unlabelled positives) or below ``min_score``;
4. rank what is left, skip the first ``range_min`` and keep up to rank ``range_max``;
5. ``top``: the first ``num_negatives`` of that window; ``random``: ``num_negatives`` positions
   drawn from it with ``rng.sample`` (as many positions as it has candidates, or
   ``num_negatives`` when it has fewer), then ordered best first.

A query whose window holds fewer than ``num_negatives`` candidates gets fewer negatives.

With a cross-encoder (``bertkit mine --cross-encoder``) the scores here are its scores of the
bi-encoder's candidates and of the positives: the filters and the ranking read them, as
sentence-transformers' do, and ``--min-score`` also widens the default window (``rescored``).

Worked example: candidates [d3 0.9, d1 0.8, d7 0.7, d2 0.6, d5 0.5], positive d1 (0.8),
``absolute_margin=0.15``, ``range_min=1``, ``num_negatives=2``: d1 is the positive, d3 and d7
are within 0.15 of 0.8; what is left ranks d2, d5; skipping 1 leaves d5: one negative.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bertkit.errors import ConfigError

SAMPLINGS = ("top", "random")
FILTERS = ("absolute_margin", "relative_margin", "max_score", "min_score")


@dataclass(frozen=True)
class MiningConfig:
    """Which candidates become a query's hard negatives (module docstring)."""

    num_negatives: int = 3
    """Negatives mined per query; each of its pairs gets them."""
    range_min: int = 0
    """Candidates skipped at the top of each query's ranking, counted after its positives and the
    filtered candidates are taken out (likely unlabelled positives)."""
    range_max: int | None = None
    """Rank (counted as --range-min is) up to which candidates are taken (default: range-min +
    num-negatives + the most positives of one query, with num-negatives x 10 when a margin or
    --max-score is set)."""
    absolute_margin: float | None = None
    """Drop a candidate scoring above the query's lowest positive score minus this."""
    relative_margin: float | None = None
    """Drop a candidate scoring above the lowest positive score minus its magnitude times this
    (0.05: at least 5% below)."""
    max_score: float | None = None
    """Drop a candidate scoring above this (a likely false negative)."""
    min_score: float | None = None
    """Drop a candidate scoring below this (too easy to teach anything)."""
    sampling: str = "top"
    """top: the best num-negatives of the range; random: num-negatives drawn from it (--seed)."""
    seed: int = 0
    """Seed of --sampling random."""
    include_positives: bool = False
    """Keep each query's positives among its candidates (a first-stage ranking to evaluate a
    reranker on)."""

    def __post_init__(self) -> None:
        if self.num_negatives < 1:
            raise ConfigError(f"num negatives must be >= 1, got {self.num_negatives}")
        if self.range_min < 0:
            raise ConfigError(f"range min must be >= 0, got {self.range_min}")
        if self.range_max is not None and self.range_max - self.range_min < self.num_negatives:
            raise ConfigError(
                f"range {self.range_min}..{self.range_max} holds fewer than num negatives "
                f"({self.num_negatives}) candidates: lower --range-min or raise --range-max"
            )
        if self.sampling not in SAMPLINGS:
            raise ConfigError(
                f"sampling must be one of {', '.join(SAMPLINGS)}, got {self.sampling!r}"
            )
        for name in ("absolute_margin", "relative_margin"):
            if (value := getattr(self, name)) is not None and value < 0:
                raise ConfigError(f"{name.replace('_', ' ')} must be >= 0, got {value}")
        if None not in (self.min_score, self.max_score) and self.min_score > self.max_score:  # type: ignore[operator]
            raise ConfigError(f"min score {self.min_score} is above max score {self.max_score}")

    def window_end(self, most_positives: int, rescored: bool = False) -> int:
        """``range_max``, or its default for queries with up to ``most_positives`` positives
        (wider when a filter may take candidates out: a margin, max_score, and with a
        cross-encoder's scores (``rescored``) min_score too, as sentence-transformers widens it)."""
        if self.range_max is not None:
            return self.range_max
        filtered = any(getattr(self, n) is not None for n in FILTERS[: 4 if rescored else 3])
        return self.range_min + self.num_negatives * (10 if filtered else 1) + most_positives

    def candidates(self, most_positives: int, rescored: bool = False) -> int:
        """Documents to retrieve per query: the window plus room for the positives and the
        query's own text, which are taken out before ranking."""
        return self.window_end(most_positives, rescored) + most_positives + 1


@dataclass
class Selection:
    """Each query's negatives (corpus indices, best first) and their scores; ``skipped``:
    candidates each filter took out (of those still in at its turn)."""

    negatives: list[list[int]]
    scores: list[list[float]]
    skipped: dict[str, int] = field(default_factory=dict)


def select_negatives(
    indices: np.ndarray,
    scores: np.ndarray,
    positives: Sequence[Sequence[int]],
    positive_scores: Sequence[Sequence[float]],
    config: MiningConfig,
    rng: random.Random,
    own: Sequence[int] | None = None,
    rescored: bool = False,
) -> Selection:
    """Negatives per query from its candidates (module docstring).

    indices, scores (Q, K): each query's candidate documents best first (index -1: none);
    positives / positive_scores: per query, its positive documents and their scores (at least
    one); own: per query, the document with the query's own text (-1: none); ``rng`` draws
    for ``sampling="random"`` (query by query, in order); ``rescored``: the scores are a
    cross-encoder's (:meth:`MiningConfig.window_end`).
    """
    n_queries = indices.shape[0]
    end = config.window_end(max((len(p) for p in positives), default=1), rescored)
    s = np.where(indices < 0, -np.inf, scores).astype(np.float32)
    if own is not None:
        s[indices == np.asarray(own, dtype=np.int64)[:, None]] = -np.inf
    if not config.include_positives:
        width = max((len(p) for p in positives), default=0)
        table = np.full((n_queries, width), -2, dtype=np.int64)  # -2 matches no candidate
        for q, docs in enumerate(positives):
            table[q, : len(docs)] = docs
        s[(indices[:, :, None] == table[:, None, :]).any(axis=2)] = -np.inf
    floor = np.array([min(p) for p in positive_scores], dtype=np.float32)[:, None]  # (Q, 1)
    skipped: dict[str, int] = {}
    limits = {
        "absolute_margin": lambda m: s + np.float32(m) > floor,
        "relative_margin": lambda m: s > floor - np.abs(floor) * np.float32(m),
        "max_score": lambda m: s > np.float32(m),
        "min_score": lambda m: (s < np.float32(m)) & np.isfinite(s),
    }
    for name in FILTERS:
        value = getattr(config, name)
        if value is not None:
            out = limits[name](value)
            skipped[name] = int(out.sum())
            s[out] = -np.inf
    order = np.argsort(-s, axis=1, kind="stable")[:, :end]  # what is left, best first
    ranked = np.take_along_axis(s, order, axis=1)
    ids = np.take_along_axis(indices, order, axis=1)
    missing = end - ranked.shape[1]  # a corpus smaller than the window
    if missing > 0:
        ranked = np.pad(ranked, ((0, 0), (0, missing)), constant_values=-np.inf)
        ids = np.pad(ids, ((0, 0), (0, missing)), constant_values=-1)
    ranked, ids = ranked[:, config.range_min :], ids[:, config.range_min :]
    n = config.num_negatives
    out = Selection([], [], skipped)
    for q in range(n_queries):
        if config.sampling == "top":
            picks = list(range(n))
        else:
            options = max(int(np.isfinite(ranked[q]).sum()), n)
            picks = sorted(rng.sample(range(options), k=n), key=lambda i: -ranked[q, i])
        kept = [i for i in picks if np.isfinite(ranked[q, i])]
        out.negatives.append([int(ids[q, i]) for i in kept])
        out.scores.append([float(ranked[q, i]) for i in kept])
    return out
