"""A sparse vector over the vocabulary (SPLADE's, a static embedding's): its non-zero entries,
the ``max_active_dims`` cut, the element-wise max of a text's windows, and the CSR rows that
:mod:`bertkit.evaluation.retrieval` searches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.evaluation.retrieval import SparseRows


@dataclass(frozen=True)
class SparseVector:
    """The non-zero entries of one sparse vector: vocabulary ids ascending (int64) and their
    weights (float32, non-zero: all > 0 from SPLADE, a static weight may be < 0)."""

    indices: np.ndarray
    values: np.ndarray

    def tokens(self, tokenizer: Any) -> list[str]:
        """The vocabulary entry of each index (what the weights say about the text)."""
        return list(tokenizer.convert_ids_to_tokens([int(i) for i in self.indices]))

    def dense(self, size: int) -> np.ndarray:
        """The (size,) float32 vector, zeros outside :attr:`indices`."""
        out = np.zeros(size, np.float32)
        out[self.indices] = self.values
        return out


def max_per_index(parts: Sequence[SparseVector]) -> SparseVector:
    """The element-wise max of sparse vectors (a text's windows)."""
    if len(parts) == 1:
        return parts[0]
    idx = np.concatenate([p.indices for p in parts])
    val = np.concatenate([p.values for p in parts])
    keys, where = np.unique(idx, return_inverse=True)
    out = np.zeros(len(keys), np.float32)
    np.maximum.at(out, where, val)
    return SparseVector(keys, out)


def keep_largest(vector: SparseVector, k: int | None) -> SparseVector:
    """``vector`` with only its ``k`` largest values in absolute terms (None: as it is), ids
    still ascending: sentence-transformers' ``max_active_dims``."""
    if k is None or len(vector.values) <= k:
        return vector
    top = np.sort(np.argsort(-np.abs(vector.values), kind="stable")[:k])
    return SparseVector(vector.indices[top], vector.values[top])


def as_rows(vectors: Sequence[SparseVector], size: int) -> SparseRows:
    """The vectors as the CSR rows that :mod:`bertkit.evaluation.retrieval` searches."""
    return SparseRows.of([v.indices for v in vectors], [v.values for v in vectors], size)


def join_rows(parts: Sequence[SparseRows], size: int) -> SparseRows:
    """The rows of ``parts`` one after the other (CSR shards joined in order)."""
    if not parts:
        return as_rows([], size)
    starts = np.cumsum([0] + [int(p.indptr[-1]) for p in parts[:-1]], dtype=np.int64)
    indptr = np.concatenate([[0]] + [p.indptr[1:] + s for p, s in zip(parts, starts)])
    indices = np.concatenate([p.indices for p in parts]).astype(np.int64)
    values = np.concatenate([p.values for p in parts]).astype(np.float32)
    return SparseRows(indptr.astype(np.int64), indices, values, size)
