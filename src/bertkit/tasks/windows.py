"""Long inputs as overlapping windows, for every family: SQuAD's windowing, generalised.

An input of ``n`` content tokens that does not fit in ``room`` tokens (``--max-seq-length`` less
the special tokens and any segment kept whole) is cut into slices of ``room`` tokens; with
``doc_stride`` d, consecutive slices share d tokens (``stride_mode="overlap"``, Hugging Face's
``stride``) or start d tokens apart (``"step"``, google's ``run_squad.py``). This is the one
windowing of bertkit: ``finetune squad`` uses these functions too, so ``--doc-stride`` means the
same thing for every command. Default stride: a third of the window length (``--max-seq-length``,
``embed``'s ``--max-length``; 128 at 384, the SQuAD value; 42 at 128).

A token seen by several windows has its *maximum context* in the window where
``min(tokens left, tokens right) + 0.01 * slice length`` is largest (google's
``_check_is_max_context``): tagging reads each word's prediction from that window, the per-token
embeddings each token's vector.

Pairs keep one segment whole and slide over the other: the first when it leaves a slice longer
than the stride (as SQuAD keeps the question), else the second when that one is short enough;
when neither fits, the first is cut to half the room (the input is counted as truncated).

``truncate=True`` keeps only the first window (plain truncation); :class:`WindowCounts` says how
many inputs were windowed, into how many windows, and how many were cut.

Window outputs of one input are combined (:func:`aggregate`) by a token-weighted mean (each
window weighs as many as its real tokens) or an element-wise max.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from bertkit.errors import ConfigError

POOLINGS = ("mean", "max")
DEFAULT_MAX_SEQ_LENGTH = 128
"""``--max-seq-length`` of every family but SQuAD (384: :data:`~bertkit.tasks.squad_features.SQUAD_MAX_SEQ_LENGTH`)."""


@dataclass(frozen=True)
class WindowConfig:
    """How an input longer than ``--max-seq-length`` is read."""

    doc_stride: int | None = None
    """Tokens shared by neighbouring windows of a long input (None: a third of the window length,
    i.e. 128 at 384 as SQuAD, 42 at 128)."""
    truncate: bool = False
    """Cut over-long inputs to one window instead of windowing them (the summary says how many were cut)."""
    window_pooling: str = "mean"
    """How the window outputs of one input are combined: token-weighted mean or element-wise max."""
    stride_mode: Literal["overlap", "step"] = "overlap"

    def __post_init__(self) -> None:
        if self.window_pooling not in POOLINGS:
            raise ConfigError(f"window pooling must be mean or max, got {self.window_pooling!r}")
        if self.doc_stride is not None and self.doc_stride < 1:
            raise ConfigError(f"doc_stride must be at least 1, got {self.doc_stride}")
        if self.stride_mode not in ("overlap", "step"):
            raise ConfigError(f"stride_mode must be 'overlap' or 'step', got {self.stride_mode!r}")

    def stride(self, max_seq_length: int) -> int:
        return self.doc_stride if self.doc_stride is not None else max(1, max_seq_length // 3)

    @classmethod
    def of(cls, value: WindowConfig | dict | None) -> WindowConfig:
        """From a saved state (``bertkit_task.json`` holds a dict), None meaning the defaults."""
        if isinstance(value, WindowConfig):
            return value
        return cls(**(value or {}))


def slice_starts(num_tokens: int, slice_len: int, doc_stride: int, mode: str) -> list[int]:
    """Start indices of the slices (each ``slice_len`` long, the last may be shorter).

    Example: 10 tokens, slices of 4, overlap 1 -> starts [0, 3, 6] (slices 0-3, 3-6, 6-9).
    """
    if slice_len < 1:
        raise ValueError(f"no room for context tokens (slice length {slice_len})")
    step = doc_stride if mode == "step" else slice_len - doc_stride
    if step < 1:
        raise ValueError(
            f"doc_stride {doc_stride} must be smaller than the slice length {slice_len} "
            "in overlap mode (lower --doc-stride, or the part kept whole)"
        )
    starts, start = [], 0
    while True:
        starts.append(start)
        if start + slice_len >= num_tokens:
            return starts
        start += step


def max_context_flags(starts: Sequence[int], num_tokens: int, slice_len: int) -> list[list[bool]]:
    """For each slice, whether each of its tokens has its maximum context in that slice."""
    best_score = [-1.0] * num_tokens
    best_slice = [0] * num_tokens
    for s, start in enumerate(starts):
        length = min(slice_len, num_tokens - start)
        for pos in range(start, start + length):
            score = min(pos - start, start + length - 1 - pos) + 0.01 * length
            if score > best_score[pos]:  # strict: the first best slice wins, as in google's code
                best_score[pos], best_slice[pos] = score, s
    return [
        [best_slice[pos] == s for pos in range(start, min(start + slice_len, num_tokens))]
        for s, start in enumerate(starts)
    ]


@dataclass(frozen=True)
class Slice:
    """Tokens ``[start, stop)`` of a sequence; ``is_max[i]`` for token ``start + i``."""

    start: int
    stop: int
    is_max: list[bool]


def slices(
    num_tokens: int, room: int, stride: int, *, mode: str = "overlap", truncate: bool = False
) -> list[Slice]:
    """The windows over ``num_tokens`` tokens (one when they fit, or with ``truncate``).

    The stride is lowered to ``room - 1`` when the room is smaller (a short window still slides).
    """
    if num_tokens <= room or truncate:
        stop = min(num_tokens, room)
        return [Slice(0, stop, [True] * stop)]
    stride = min(stride, room - 1) if mode == "overlap" else stride
    starts = slice_starts(num_tokens, room, stride, mode)
    flags = max_context_flags(starts, num_tokens, room)
    return [Slice(s, min(s + room, num_tokens), f) for s, f in zip(starts, flags)]


@dataclass(frozen=True)
class PairPlan:
    """Which segment slides (``"a"`` or ``"b"``); ``keep_len`` tokens of the other one are kept
    (all of them unless ``cut``)."""

    slide: Literal["a", "b"]
    keep_len: int
    cut: bool


def plan_pair(len_a: int, len_b: int | None, max_length: int, stride: int) -> PairPlan:
    """Which segment of ``[CLS] a [SEP] b [SEP]`` slides (see the module doc).

    Example (max 16, stride 5): a=4, b=30 -> slide b, keep a whole; a=30, b=4 -> slide a, keep b.
    """
    if len_b is None:
        return PairPlan("a", 0, False)
    content = max_length - 3
    if len_a + len_b <= content or content - len_a > stride:
        return PairPlan("b", len_a, False)
    if content - len_b > stride:
        return PairPlan("a", len_b, False)
    half = content // 2
    return PairPlan("b", half, len_a > half)


@dataclass(frozen=True)
class WindowCounts:
    """How the inputs of one call were read: ``windowed`` of ``inputs`` were split into more than
    one window, ``windows`` in all; ``truncated`` inputs lost tokens."""

    inputs: int
    windowed: int
    windows: int
    truncated: int

    @classmethod
    def of(cls, owners: Sequence[int], cut: Iterable[int], inputs: int) -> WindowCounts:
        """From the owner (input index) of each window and the indices of the inputs cut."""
        per = np.bincount(np.asarray(owners, dtype=np.int64), minlength=inputs)
        return cls(inputs, int((per > 1).sum()), len(owners), len(set(cut)))

    def __add__(self, other: WindowCounts) -> WindowCounts:
        """The counts of two calls together (a corpus read window by window)."""
        return WindowCounts(
            self.inputs + other.inputs,
            self.windowed + other.windowed,
            self.windows + other.windows,
            self.truncated + other.truncated,
        )

    def summary(self, what: str = "input") -> str:
        """E.g. ``"872 inputs: 35 windowed into 69 windows (906 in all), 0 truncated"``: the 837
        inputs that fit take one window each (``what`` singular: ``input``, ``line``)."""
        from bertkit.progress import counted

        extra = self.windows - (self.inputs - self.windowed)
        return (
            f"{counted(self.inputs, what)}: {self.windowed} windowed into {counted(extra, 'window')} "
            f"({self.windows} in all), {self.truncated} truncated"
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "inputs": self.inputs,
            "windowed": self.windowed,
            "windows": self.windows,
            "truncated": self.truncated,
        }


def aggregate(
    rows: np.ndarray, owners: Sequence[int], weights: Sequence[float], inputs: int, how: str
) -> np.ndarray:
    """Combine window rows (W, K) into one row per input (N, K).

    ``how="mean"``: the mean weighted by ``weights`` (tokens per window); ``"max"``: the element-
    wise maximum. Example: rows [[0, 2], [4, 0]] of one input, weights [3, 1] -> mean [1, 1.5],
    max [4, 2]. Raises ValueError when an input has no window.
    """
    rows = np.asarray(rows, dtype=np.float64)
    owner = np.asarray(owners, dtype=np.int64)
    if np.bincount(owner, minlength=inputs).min(initial=1) == 0:
        raise ValueError("some input has no window")
    if how == "max":
        out = np.full((inputs, rows.shape[1]), -np.inf)
        np.maximum.at(out, owner, rows)
        return out.astype(np.float32)
    if how != "mean":
        raise ValueError(f"window pooling must be mean or max, got {how!r}")
    w = np.asarray(weights, dtype=np.float64)
    total = np.zeros((inputs, rows.shape[1]))
    np.add.at(total, owner, rows * w[:, None])
    norm = np.bincount(owner, weights=w, minlength=inputs)
    return (total / norm[:, None]).astype(np.float32)
