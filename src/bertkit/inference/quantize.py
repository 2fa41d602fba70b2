"""Quantized embedding indexes: sentence-transformers' ``quantize_embeddings`` (int8, uint8,
binary, ubinary) and its rescored search (``semantic_search_usearch`` / ``_faiss``), in numpy.

Not :mod:`bertkit.model.quantize` (int8 weights of the model's linear layers): this stores the
*output* vectors of a corpus in fewer bytes (``bertkit embed --output DIR/ --quantize P``).

Quantization, byte for byte as sentence-transformers 6.3 (:func:`quantize`):

- ``binary`` / ``ubinary``: one bit per dimension, ``x > 0``, packed 8 to a byte by
  ``np.packbits`` (the first dimension in the high bit; the last byte zero-padded); ``binary``
  stores each byte minus 128 as int8 (``0b00000000`` -> -128), ``ubinary`` the uint8 as is;
- ``uint8`` / ``int8``: per dimension, ``ranges`` = (min, max) over calibration vectors (float32),
  ``step = (max - min) / 255`` (1 where max == min), ``q = clip(floor((x - min) / step), 0, 255)``,
  int8 stores ``q - 128``.

Search (:func:`search_quantized`), as ``semantic_search_usearch`` with an exact index and
``rescore=True`` (the float query, the quantized corpus):

1. candidates: the ``k * rescore_multiplier`` documents nearest the quantized query: binary by the
   smallest Hamming distance (popcount of the XOR of the packed bytes; usearch's ``hamming``),
   int8 by the largest int8 x int8 dot product (usearch's ``ip`` over ``i8``), uint8 by the
   largest uint8 x uint8 dot product (faiss' ``IndexFlatIP``); ties go to the lower document;
2. rescoring: the float query's dot product with each candidate as the index returns it, binary
   unpacked to its 0/1 bits, int8/uint8 dequantized (``(q [+ 128]) * step + min``), in float64;
   the best ``k`` of those, best first (ties keep the candidate order).

So a binary index needs no second copy of the documents: sentence-transformers rescores with the
bits themselves, and so does this. The scores are those rescored dot products (not cosines: the
query is used as the model embeds it, normalised only if the model normalises).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.errors import ConfigError
from bertkit.evaluation.retrieval import exact_search_blocks

PRECISIONS = ("int8", "uint8", "binary", "ubinary")
"""Precisions of a quantized embed folder (``bertkit embed --quantize``)."""

RESCORE_MULTIPLIER = 4
"""Candidates per hit a quantized search rescores with the float query (``bertkit search
--rescore-multiplier``)."""


def calibration_ranges(vectors: np.ndarray) -> np.ndarray:
    """(2, D): each dimension's min and max over ``vectors`` (N, D), N >= 2, in their dtype
    (sentence-transformers' ``_get_quantization_ranges``)."""
    if vectors.ndim != 2 or vectors.shape[0] < 2:
        raise ConfigError(
            f"int8/uint8 ranges need at least 2 calibration vectors (N, D), got shape {vectors.shape}"
        )
    return np.vstack((np.min(vectors, axis=0), np.max(vectors, axis=0)))


def quantize(vectors: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """``vectors`` (N, D) float -> (N, D) int8/uint8 or (N, ceil(D / 8)) packed bits, equal byte
    for byte to ``quantize_embeddings(vectors, precision, ranges=ranges)``. ``ranges`` (2, D)
    for int8/uint8 (None: :func:`calibration_ranges` of ``vectors`` themselves)."""
    _check_precision(precision)
    vectors = np.asarray(vectors)
    if vectors.dtype in (np.uint8, np.int8):
        raise ConfigError("vectors to quantize must be float, not int8 or uint8")
    if precision == "binary":
        return (np.packbits(vectors > 0, axis=-1) - 128).astype(np.int8)
    if precision == "ubinary":
        return np.packbits(vectors > 0, axis=-1)
    ranges = calibration_ranges(vectors) if ranges is None else ranges
    starts, steps = _starts_steps(ranges)
    q = np.clip(np.floor((vectors - starts) / steps), 0, 255)
    return q.astype(np.uint8) if precision == "uint8" else (q - 128).astype(np.int8)


def dequantize(q: np.ndarray, precision: str, ranges: np.ndarray) -> np.ndarray:
    """int8/uint8 codes back to the query's coordinates, float64: ``(q [+ 128]) * step + min``
    (sentence-transformers' ``_dequantize_embeddings``)."""
    starts, steps = _starts_steps(ranges)
    out = q.astype(np.float64)
    if precision == "int8":
        out += 128
    return out * steps + starts


def unpack_bits(q: np.ndarray, precision: str, dim: int) -> np.ndarray:
    """Packed binary/ubinary rows (..., ceil(dim / 8)) -> their 0/1 bits (..., dim), uint8."""
    raw = q.view(np.uint8) ^ 0x80 if precision == "binary" else q.view(np.uint8)
    return np.unpackbits(raw, axis=-1)[..., :dim]


def _starts_steps(ranges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ranges = np.asarray(ranges).astype(np.float32, copy=False)
    if ranges.ndim != 2 or ranges.shape[0] != 2:
        raise ConfigError(f"ranges must be (2, D): min and max per dimension, got {ranges.shape}")
    steps = (ranges[1, :] - ranges[0, :]) / 255
    return ranges[0, :], np.where(steps == 0, 1, steps)


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ConfigError(f"quantization precision must be one of {PRECISIONS}, got {precision!r}")


@dataclass(frozen=True)
class Quantization:
    """How a folder's vectors were stored: ``precision`` and, for int8/uint8, the (2, D)
    calibration ``ranges`` (min, max per dimension) that the queries are quantized with too."""

    precision: str
    ranges: np.ndarray | None = None
    calibration: str | None = None
    """Where the ranges came from (for the manifest reader), e.g. "the first 50000 lines"."""

    def __post_init__(self) -> None:
        _check_precision(self.precision)
        if self.scalar and self.ranges is None:
            raise ConfigError(f"{self.precision} quantization needs calibration ranges")

    @property
    def scalar(self) -> bool:
        """int8/uint8 (one code per dimension) rather than packed bits."""
        return self.precision in ("int8", "uint8")

    @property
    def dtype(self) -> str:
        return "uint8" if self.precision in ("uint8", "ubinary") else "int8"

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        return quantize(vectors, self.precision, self.ranges)

    def to_manifest(self) -> dict[str, Any]:
        """JSON values; float32 ranges go through Python floats exactly and come back equal."""
        ranges = None if self.ranges is None else np.asarray(self.ranges, np.float32).tolist()
        return {"precision": self.precision, "ranges": ranges, "calibration": self.calibration}

    @classmethod
    def from_manifest(cls, d: dict[str, Any]) -> Quantization:
        ranges = d.get("ranges")
        return cls(
            d["precision"],
            None if ranges is None else np.asarray(ranges, dtype=np.float32),
            d.get("calibration"),
        )


def search_quantized(
    queries: np.ndarray,
    blocks: Sequence[np.ndarray],
    quantization: Quantization,
    k: int,
    rescore_multiplier: int = RESCORE_MULTIPLIER,
) -> tuple[np.ndarray, np.ndarray]:
    """Float ``queries`` (Q, D) against quantized documents coming as consecutive ``blocks``
    (e.g. memory-mapped shards; a document's index is its position in the blocks joined) ->
    (indices (Q, k'), rescored scores (Q, k') float64), k' = min(k, documents): the module doc's
    two steps. Memory: one block's candidate scores at a time, then Q x k x multiplier rows."""
    if k < 1 or rescore_multiplier < 1:
        raise ConfigError(
            f"k and the rescore multiplier must be >= 1, got {k}, {rescore_multiplier}"
        )
    dim = queries.shape[1]
    if not sum(b.shape[0] for b in blocks):
        return np.zeros((len(queries), 0), np.int64), np.zeros((len(queries), 0), np.float64)
    qq = quantization.apply(queries)
    if quantization.scalar:
        score, prepare = None, _as_float32
    else:
        score, prepare = _negative_hamming, _as_words
    cand, _ = exact_search_blocks(
        prepare(qq), (prepare(b) for b in blocks), k * rescore_multiplier, score=score
    )
    docs = _gather(blocks, cand)  # (Q, C, width) as stored
    if quantization.scalar:
        docs = dequantize(docs, quantization.precision, quantization.ranges)
    else:
        docs = unpack_bits(docs, quantization.precision, dim).astype(np.int64)
    rescored = np.einsum("ij,ikj->ik", queries, docs).astype(np.float64, copy=False)
    order = np.argsort(-rescored, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(cand, order, axis=1), np.take_along_axis(rescored, order, axis=1)


def _as_float32(codes: np.ndarray) -> np.ndarray:
    """int8/uint8 codes as float32: their dot products are exact up to 2**24 (int8, D <= 1024)."""
    return np.asarray(codes, dtype=np.float32)


def _as_words(packed: np.ndarray) -> np.ndarray:
    """Packed bit rows as uint64 words (zero-padded to whole words: the padding XORs to 0),
    so a Hamming distance is a few popcounts per pair rather than one per byte."""
    packed = np.asarray(packed).view(np.uint8)
    pad = -packed.shape[1] % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def _negative_hamming(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """-(Hamming distance) between every row of ``q`` (C, W) and of ``d`` (Db, W), float32
    (exact): larger is nearer, as ``exact_search_blocks`` ranks."""
    out = np.empty((q.shape[0], d.shape[0]), dtype=np.float32)
    step = max(1, (1 << 22) // max(1, d.shape[0] * d.shape[1]))  # bound the (rows, Db, W) XOR
    for lo in range(0, q.shape[0], step):
        x = np.bitwise_xor(q[lo : lo + step, None, :], d[None, :, :])
        out[lo : lo + step] = -np.bitwise_count(x).sum(axis=2, dtype=np.int32)
    return out


def _gather(blocks: Sequence[np.ndarray], ids: np.ndarray) -> np.ndarray:
    """The rows ``ids`` (Q, C) of the blocks joined, as stored: (Q, C, width)."""
    ends = np.cumsum([b.shape[0] for b in blocks])
    out = np.empty((*ids.shape, blocks[0].shape[1]), dtype=blocks[0].dtype)
    which = np.searchsorted(ends, ids, side="right")
    for b, block in enumerate(blocks):
        hit = which == b
        if hit.any():
            first = ends[b] - block.shape[0]
            out[hit] = block[ids[hit] - first]  # only these rows are read
    return out


def calibrate_stream(
    precision: str,
    lines: Iterable[str],
    window: int,
    started: dict[str, Any] | None,
    embed: Callable[[list[str]], tuple[np.ndarray, Any]] | None,
    share: Callable[[np.ndarray | None], np.ndarray] | None = None,
) -> tuple[Quantization, Iterable[str], tuple[list[str], tuple[np.ndarray, Any]] | None]:
    """The quantization of a corpus folder and the lines to stream: ``(quantization, lines,
    first)``, ``first`` the calibration window and its ``embed`` result (to reuse, not recompute).

    int8/uint8 ranges are calibrated on the input's first ``window`` lines (the first sort window:
    a sample the job reads anyway, with no second file to keep in step with the corpus), peeked
    from ``lines`` and put back in front; a folder already ``started`` (its manifest) with this
    precision keeps its recorded ranges, so a resumed run quantizes as the first run did.
    Binary precisions need no calibration.

    Many processes: ``share`` (a collective every rank calls) gives every rank the ranges of
    the one that embeds the window (the others pass ``embed`` None and ``share`` None): one
    calibration pass, and one set of ranges even where machines' kernels round differently."""
    _check_precision(precision)
    if precision not in ("int8", "uint8"):
        return Quantization(precision), lines, None
    recorded = (started or {}).get("quantization")
    if recorded and recorded.get("precision") == precision:
        return Quantization.from_manifest(recorded), lines, None
    it = iter(lines)
    first = list(itertools.islice(it, window))
    result = None if embed is None else embed(first)
    ranges = None if result is None else calibration_ranges(result[0])
    if share is not None:
        ranges = share(ranges)
    if ranges is None:
        raise ConfigError("calibration needs an embed function or ranges shared by another rank")
    quant = Quantization(precision, ranges, f"the first {len(first)} lines of the input")
    return quant, itertools.chain(first, it), None if result is None else (first, result)
