"""Exact, numpy stand-ins for the ``usearch`` and ``faiss`` indexes that sentence-transformers'
``semantic_search_usearch`` / ``semantic_search_faiss`` build (neither library is installed):
installed in ``sys.modules``, they let the reference's own quantization and rescoring code run.
Each search is exact; ties go to the lower key (a stable sort), as bertkit breaks them."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import numpy as np


def _hamming(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    return np.unpackbits(q[:, None, :] ^ d[None, :, :], axis=2).sum(axis=2)


@dataclass
class _Matches:
    keys: np.ndarray
    distances: np.ndarray
    counts: np.ndarray


class UsearchIndex:
    """``usearch.index.Index(ndim, metric, dtype)`` with an exact search: ``hamming`` over
    ``b1`` (packed bytes), ``ip`` over ``i8`` (distance 1 - dot), ``cos`` over ``f32``."""

    def __init__(self, ndim: int, metric: str, dtype: str) -> None:
        self.metric, self.dtype = metric, dtype
        self.vectors = np.zeros((0, ndim // 8 if dtype == "b1" else ndim))

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        assert np.array_equal(keys, np.arange(len(vectors)))
        self.vectors = np.asarray(vectors)

    def search(self, q: np.ndarray, count: int, exact: bool) -> _Matches:
        if self.metric == "hamming":
            dist = _hamming(q.view(np.uint8), self.vectors.view(np.uint8)).astype(np.float64)
        elif self.metric == "ip":
            dist = 1 - q.astype(np.int64) @ self.vectors.astype(np.int64).T
        else:
            raise NotImplementedError(self.metric)
        keys = np.argsort(dist, axis=1, kind="stable")[:, :count]
        n = np.full(len(q), keys.shape[1])
        return _Matches(keys, np.take_along_axis(dist, keys, axis=1), n)

    def get(self, keys: np.ndarray) -> np.ndarray:
        return self.vectors[keys]


class FaissIndexFlatIP:
    """``faiss.IndexFlatIP``: inputs as float32 (as faiss' Python wrapper converts them)."""

    def __init__(self, d: int) -> None:
        self.d = d
        self.vectors = np.zeros((0, d), np.float32)

    def add(self, vectors: np.ndarray) -> None:
        self.vectors = np.asarray(vectors, dtype=np.float32)

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(q, dtype=np.float32) @ self.vectors.T
        ids = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(s, ids, axis=1), ids

    def reconstruct(self, i: int) -> np.ndarray:
        return self.vectors[i]


def install(monkeypatch) -> None:
    """Put the stand-ins where ``from usearch.index import Index`` and ``import faiss`` look."""
    usearch, index = types.ModuleType("usearch"), types.ModuleType("usearch.index")
    index.Index = UsearchIndex
    usearch.index = index
    faiss = types.ModuleType("faiss")
    faiss.IndexFlatIP = FaissIndexFlatIP
    for name, module in (("usearch", usearch), ("usearch.index", index), ("faiss", faiss)):
        monkeypatch.setitem(sys.modules, name, module)
