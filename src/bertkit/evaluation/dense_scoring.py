"""How an exact dense search scores queries against documents for a model folder's
``similarity_fn_name``, as sentence-transformers' ``model.similarity`` ranks them (its
``InformationRetrievalEvaluator`` scores with it by default):

- ``cosine`` (also a folder that declares none): the dot product of unit rows;
- ``dot``: the dot product of the vectors as given;
- ``euclidean`` / ``manhattan``: the negated distance (larger is nearer, as
  ``-torch.cdist(a, b, p)``), of the vectors as given: a folder without a Normalize module ranks
  differently by distance than by cosine; for unit vectors euclidean ranks as cosine.

Euclidean distances come from ``|q|^2 + |d|^2 - 2 q.d`` (one matrix product, clipped at 0), as
torch's ``cdist`` computes them for more than 25 rows; manhattan distances are torch's
``cdist(p=1)`` itself, the function sentence-transformers' ``manhattan_sim`` calls, so equal
vectors give equal scores to the last bit (no (queries, documents, H) difference is built).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from bertkit.evaluation.pairs import DISTANCES
from bertkit.evaluation.retrieval import unit_rows

Score = Callable[[np.ndarray, np.ndarray], np.ndarray]


def negated_distances(queries: np.ndarray, documents: np.ndarray, similarity: str) -> np.ndarray:
    """``-distance(queries[i], documents[j])``: (C, H), (Db, H) -> (C, Db) float32;
    ``similarity`` "euclidean" or "manhattan"."""
    q = np.asarray(queries, dtype=np.float32)
    d = np.asarray(documents, dtype=np.float32)
    if similarity == "euclidean":
        squared = (q * q).sum(1)[:, None] + (d * d).sum(1)[None, :] - 2.0 * (q @ d.T)
        return -np.sqrt(np.maximum(squared, 0.0, out=squared), out=squared)
    if similarity == "manhattan":
        q_t, d_t = (torch.from_numpy(np.ascontiguousarray(v)) for v in (q, d))
        dist = torch.cdist(q_t, d_t, p=1.0).numpy()
        return np.negative(dist, out=dist)
    raise ValueError(f"not a distance: {similarity!r}; expected euclidean or manhattan")


def dense_scoring(
    similarity: str | None,
) -> tuple[Callable[[np.ndarray], np.ndarray], Score | None]:
    """(prepare, score) for a folder's ``similarity``: ``prepare`` is applied to the query and
    the document vectors (:func:`unit_rows` for cosine, else nothing), ``score`` goes to
    :func:`~bertkit.evaluation.retrieval.exact_search_blocks` (None: the dot product)."""
    if similarity in DISTANCES:
        return as_given, partial(negated_distances, similarity=similarity)
    if similarity == "dot":
        return as_given, None
    return unit_rows, None


def as_given(v: np.ndarray) -> np.ndarray:
    """``v`` itself: vectors scored as they are."""
    return v
