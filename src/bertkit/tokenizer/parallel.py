"""Tokenization in worker processes: each worker holds a copy of the tokenizer (and its own
word cache) and handles chunks of texts; results come back in input order.

On Linux the pool forks, so the tokenizer is inherited rather than pickled. An Encoding
pickles as byte buffers (ids, flat offsets, word indices); the derived lists are rebuilt lazily.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from bertkit.tokenizer.batch import TokenArrays
from bertkit.tokenizer.encoding import Encoding
from bertkit.tokenizer.protocol import Tokenizer

R = TypeVar("R")
C = TypeVar("C")

# Set once in each worker process by _init_worker (process-local; the parent never sets it).
_WORKER: dict[str, Tokenizer] = {}


def _context() -> Any:
    methods = mp.get_all_start_methods()
    return mp.get_context("fork" if "fork" in methods else "spawn")


def _init_worker(tokenizer: Tokenizer) -> None:
    _WORKER["tok"] = tokenizer
    gc.disable()  # a worker only tokenizes: no reference cycles to collect (see gc_paused)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a batch, then restore its previous state.

    Encoding a batch creates many acyclic containers (Encodings, id lists) whose collections
    rescan everything already built (~10% of a batch now that offsets are flat arrays; ~40%
    when they were per-token tuples). Nothing the tokenizer creates forms a cycle, so pausing
    loses nothing. Note that the pause is process-wide while the batch runs.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _call(job: tuple[Callable[[Any, Any], Any], Any]) -> Any:
    fn, chunk = job
    return fn(_WORKER["tok"], chunk)


def imap_chunks(
    tokenizer: Tokenizer,
    fn: Callable[[Tokenizer, C], R],
    chunks: Iterable[C],
    num_workers: int,
) -> Iterator[R]:
    """``fn(tokenizer, chunk)`` for each chunk, in order, in ``num_workers`` processes.

    ``fn`` must be a module-level function (it is pickled). With ``num_workers <= 1`` it runs
    here, lazily. The pool stays alive while the iterator is consumed.
    """
    if num_workers <= 1:
        for chunk in chunks:
            yield fn(tokenizer, chunk)
        return
    with _context().Pool(num_workers, initializer=_init_worker, initargs=(tokenizer,)) as pool:
        yield from pool.imap(_call, ((fn, c) for c in chunks))


def _encode_chunk(
    tokenizer: Tokenizer, chunk: tuple[Sequence[str], Sequence[str] | None, dict]
) -> list:
    texts, pairs, kwargs = chunk
    if pairs is None:
        return [tokenizer.encode(t, **kwargs) for t in texts]
    return [tokenizer.encode(t, p, **kwargs) for t, p in zip(texts, pairs, strict=True)]


def encode_batch(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    text_pairs: Sequence[str] | None,
    num_workers: int,
    chunk_size: int,
    kwargs: dict[str, Any],
) -> list[Encoding]:
    """Encodings of ``texts`` (with ``text_pairs``), computed in ``num_workers`` processes."""
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(text_pairs)} text pairs")
    if num_workers <= 1 or len(texts) <= chunk_size:
        with gc_paused():
            if text_pairs is None:
                return [tokenizer.encode(t, **kwargs) for t in texts]
            return [tokenizer.encode(t, p, **kwargs) for t, p in zip(texts, text_pairs)]
    chunks = (
        (
            texts[i : i + chunk_size],
            None if text_pairs is None else text_pairs[i : i + chunk_size],
            kwargs,
        )
        for i in range(0, len(texts), chunk_size)
    )
    out: list[Encoding] = []
    with gc_paused():
        for packed in imap_chunks(tokenizer, _encode_chunk, chunks, num_workers):
            out.extend(packed)
    return out


def _arrays_chunk(
    tokenizer: Tokenizer, chunk: tuple[Sequence[str], Sequence[str] | None, dict]
) -> tuple:
    """Encode a chunk into flat int buffers (runs in worker processes): only bytes travel."""
    texts, pairs, kwargs = chunk
    # unsigned typecodes: CPython fills them from Python ints ~3x faster than signed ones, and
    # ids and offsets are never negative (the parent reads the bytes as int32)
    ids, offsets, lengths = array("I"), array("I"), array("q")
    types = bytearray()
    encs = (
        (tokenizer.encode(t, **kwargs) for t in texts)
        if pairs is None
        else (tokenizer.encode(t, p, **kwargs) for t, p in zip(texts, pairs, strict=True))
    )
    for e in encs:
        ids.extend(e.input_ids)
        types += bytes(e.token_type_ids)
        offsets.extend(e.flat_offsets)
        lengths.append(len(e.input_ids))
    return ids.tobytes(), bytes(types), offsets.tobytes(), lengths.tobytes()


def encode_arrays(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    text_pairs: Sequence[str] | None,
    num_workers: int,
    chunk_size: int,
    kwargs: dict[str, Any],
) -> TokenArrays:
    """Encodings of ``texts`` (with ``text_pairs``) as flat numpy arrays, in worker processes."""
    if kwargs.get("return_overflowing_tokens"):
        raise ValueError("encode_arrays keeps one row per input; use encode_batch for overflow")
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(text_pairs)} text pairs")
    chunks = (
        (
            texts[i : i + chunk_size],
            None if text_pairs is None else text_pairs[i : i + chunk_size],
            kwargs,
        )
        for i in range(0, len(texts), chunk_size)
    )
    parts: list[tuple[np.ndarray, ...]] = []
    with gc_paused():
        for ids, types, offsets, lengths in imap_chunks(
            tokenizer, _arrays_chunk, chunks, num_workers
        ):
            parts.append(
                (
                    np.frombuffer(ids, dtype=np.int32),
                    np.frombuffer(types, dtype=np.int8),
                    np.frombuffer(offsets, dtype=np.int32).reshape(-1, 2),
                    np.frombuffer(lengths, dtype=np.int64),
                )
            )
    if not parts:
        empty = np.zeros(0, dtype=np.int32)
        return TokenArrays(empty, empty.astype(np.int8), empty.reshape(0, 2), np.zeros(1, np.int64))
    lengths = np.concatenate([p[3] for p in parts])
    return TokenArrays(
        input_ids=np.concatenate([p[0] for p in parts]),
        token_type_ids=np.concatenate([p[1] for p in parts]),
        offsets=np.concatenate([p[2] for p in parts]),
        row_splits=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    )
