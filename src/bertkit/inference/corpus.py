"""Corpus-scale embedding: stream lines in, write ``.npy`` shards and a manifest, resume after a
crash, with memory bounded by the sort window rather than the corpus.

The input is cut into fixed windows of ``W`` lines (``StreamConfig.window``, a whole number of
shards). Each window is embedded exactly as :meth:`Embedder.embed` embeds a list (sorted by
length, batched), so throughput stays what in-memory sorting gives, and the vectors of a line
depend only on its window, never on where a run started: a resumed run gives the same bytes.

Two entry points, both on :class:`~bertkit.inference.Embedder` too:

- :func:`iter_batches`: ``(first_line, vectors)`` per window (0-based ``first_line``), for a
  caller who writes vectors elsewhere (a Ray Data / Spark partition, a vector store).
- :func:`embed_to`: the folder of :mod:`bertkit.inference.sharded` (``bertkit embed --output DIR/``).

Resume re-reads the lines already written (no model runs on them), checks each complete shard's
``input_sha256`` and recomputes the window holding the first missing shard, writing only the
shards not yet there. A shard of that window recomputed differently from the one on disk (a
changed kernel path or thread count) keeps the disk version and is counted in ``mismatched``.

Both entry points bucket the process's oneDNN shapes (:func:`bound_shapes`), so that memory stays
flat over a corpus; vectors then equal :meth:`Embedder.embed`'s in a process that does the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import resource
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.errors import InputError
from bertkit.inference.sharded import (
    ShardedOutput,
    StreamConfig,
    lines_bytes,
    model_fingerprint,
    read_manifest,
    shard_paths,
)
from bertkit.io import sha256_file
from bertkit.model import kernels
from bertkit.progress import progress
from bertkit.tasks.windows import WindowCounts

if TYPE_CHECKING:
    from bertkit.inference.embedder import Embedder


@dataclass
class StreamSummary:
    """What a corpus run did: ``lines`` read, ``embedded`` (run through the model this time),
    ``shards`` in the folder, ``written`` this time, ``mismatched`` (see the module doc),
    ``seconds``, peak RSS in MiB, and how long inputs were windowed."""

    lines: int
    embedded: int
    shards: int
    written: int
    mismatched: int
    seconds: float
    peak_rss_mib: float
    counts: WindowCounts

    def line(self, folder: str | Path) -> str:
        rate = self.embedded / max(self.seconds, 1e-9)
        skipped = self.lines - self.embedded
        return (f"embedded {self.embedded} lines -> {folder} ({self.shards} shards, {self.written} written "
                f"now{f', {skipped} lines already done' if skipped else ''}; {rate:.1f} lines/s, "
                f"{self.seconds:.1f} s, peak RSS {self.peak_rss_mib:.0f} MiB)")  # fmt: skip


def windows(lines: Iterable[str], size: int) -> Iterator[tuple[int, list[str]]]:
    """``(first, chunk)``: consecutive chunks of at most ``size`` lines, pulled lazily, so at most
    ``size`` lines are held at once (``first`` is the 0-based index of the chunk's first line)."""
    it, first = iter(lines), 0
    while chunk := list(itertools.islice(it, size)):
        yield first, chunk
        first += len(chunk)


def iter_batches(
    embedder: Embedder, lines: Iterable[str], window: int = StreamConfig().window
) -> Iterator[tuple[int, np.ndarray]]:
    """``(first_line, vectors)`` per window of ``window`` lines: (n, D) float32 in line order,
    the same as :meth:`Embedder.embed` of that window gives. Cut windows at the same places
    (e.g. a partition boundary, a multiple of ``window``) to get the same bytes on a rerun."""
    bound_shapes()
    for first, chunk in windows(lines, window):
        yield first, embedder.embed(chunk)[0]


def bound_shapes() -> None:
    """Bucket this process's oneDNN row counts (:func:`bertkit.model.kernels.bound_shapes`, as
    the server does). oneDNN keeps memory for every input shape it sees and a corpus brings
    ever-new ones: measured on 200k lines of a tiny model, RSS after each 50k-line window grew
    383 -> 426 -> 429 MiB with bucketing, 419 -> 485 -> 521 MiB without (and kept growing)."""
    kernels.bound_shapes("a corpus job sees ever-new batch shapes; oneDNN keeps memory for each")


def embedder_settings(embedder: Embedder) -> dict[str, Any]:
    """Everything of ``embedder`` that changes its vectors' bytes (batch size and device too:
    batches of another shape may round differently), as JSON values for the manifest."""
    return {
        "pooling": embedder.spec.pooling,
        "normalize": embedder.spec.normalize,
        "max_length": embedder.max_length,
        "precision": embedder.precision,
        "batch_size": embedder.batch_size,
        "device": _device_type(embedder.model),
        "layers": list(embedder.layers.layers),
        "layer_combine": embedder.layers.layer_combine,
        **dataclasses.asdict(embedder.windows),  # doc_stride, truncate, window_pooling, ...
        "split_special_tokens": bool(getattr(embedder.tokenizer, "split_special_tokens", False)),
    }  # fmt: skip


def npy_bytes(vectors: np.ndarray) -> bytes:
    """The ``.npy`` file of ``vectors`` as float32 (the same bytes ``np.save`` writes)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(vectors, dtype=np.float32))
    return buf.getvalue()


def embed_to(
    embedder: Embedder,
    lines: Iterable[str],
    folder: str | Path,
    *,
    config: StreamConfig | None = None,
    source: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    total: int | None = None,
    show_progress: bool | None = None,
    rank: int = 0,
    world: int = 1,
    barrier: Callable[[], None] | None = None,
) -> StreamSummary:
    """Embed ``lines`` into ``folder`` as shards plus a manifest (:mod:`bertkit.inference.sharded`),
    continuing a folder an earlier run of the same input, model and settings left unfinished.

    ``source``: the input for the manifest, ``{"path": ..., "size": bytes or None}`` (None: an
    unnamed stream). ``settings``: extra output-changing settings of the caller (e.g. how bytes
    were decoded). ``total``: lines expected, for the progress bar's ETA. Raises ConfigError when
    the folder was started with another model or setting, InputError when the lines it already
    holds differ from ``lines``; nothing is written then.

    Many processes (``world`` > 1, e.g. under torchrun): every process reads all of ``lines``
    and embeds the windows ``w`` with ``w % world == rank`` (a window is a whole number of
    shards: with ``sort_window == shard_size``, shard k goes to rank k % world). Rank 0 alone
    removes leftovers and writes the manifest, listing each shard once its file is on disk, so a
    crash leaves a resumable folder as with one process. ``barrier`` (required then) is called
    twice by every process: after rank 0's clean-up, and before the final manifest. Same windows
    and kernels (torchrun ranks adopt rank 0's), so the folder equals a one-process run's.
    """
    if world > 1 and barrier is None:
        raise ValueError("world > 1 needs a barrier shared by the processes")
    sync = barrier or (lambda: None)
    config = config or StreamConfig()
    size, window = config.shard_size, config.window
    source = dict(source or {"path": None, "size": None})
    header = {
        "kind": "vectors",
        "inputs": [source],
        "model": model_fingerprint(getattr(embedder, "source", None)),
        "settings": {
            **embedder_settings(embedder),
            **(settings or {}),
            "shard_size": size,
            "sort_window": window,
        },
        "dim": embedder.dim,
        "dtype": "float32",
    }
    out = ShardedOutput(folder, header, prefix="vectors", suffix=".npy")
    done = out.resume(clean=rank == 0)
    bound_shapes()
    sync()  # nobody writes before rank 0 has removed the leftovers
    pending: dict[int, tuple[tuple[int, int], str]] = {}  # rank 0: lines, input sha to list
    own: dict[int, str] = {}  # rank 0: sha256 of the shards it wrote, not listed yet

    def publish(final: bool) -> None:
        """Rank 0: list the next shards in order while their files are on disk."""
        while (k := len(out.shards)) in pending and (final or k in own or out.written(k)):
            if not out.written(k):
                raise InputError(out.folder / out.shard_name(k), None, "missing: the process "
                                 "that embeds it did not write it")  # fmt: skip
            span, h = pending.pop(k)
            out.record(k, span, own.pop(k, None) or sha256_file(out.folder / out.shard_name(k)), h)

    quiet = dataclasses.replace(embedder, show_progress=False)  # one bar, over lines
    text_hash = hashlib.sha256()
    counts, embedded, written, mismatched, n = WindowCounts(0, 0, 0, 0), 0, 0, 0, 0
    start = time.perf_counter()
    expected = None if total is None else -(-total // world)  # this process's share, about
    bar = progress(total=expected, unit="line", desc="embed", enabled=show_progress, smoothing=0.1)
    with bar:
        for w, (first, chunk) in enumerate(windows(lines, window)):
            n = first + len(chunk)
            parts = [
                (first // size + j, chunk[a : a + size])
                for j, a in enumerate(range(0, len(chunk), size))
            ]
            spans = [(k * size + 1, k * size + len(part)) for k, part in parts]
            hashes = []
            for _, part in parts:  # each line encoded once, for its shard's hash and the input's
                text = lines_bytes(part)
                text_hash.update(text)
                hashes.append(hashlib.sha256(text).hexdigest())
            for (k, _), span, h in zip(parts, spans, hashes):
                if k < len(done):  # checked before the model runs: a changed input writes nothing
                    out.check_input(k, span, h, source.get("path"))
                elif rank == 0:
                    pending[k] = (span, h)
            if parts[-1][0] < len(done) or w % world != rank:  # on disk already, or another's
                if rank == 0:
                    publish(False)
                bar.update(len(chunk) if world == 1 else 0)
                continue
            vectors, c = quiet.embed(chunk)
            counts, embedded = counts + c, embedded + len(chunk)
            for k, part in parts:
                a = k * size - first
                data = npy_bytes(vectors[a : a + len(part)])
                if k < len(done):
                    mismatched += hashlib.sha256(data).hexdigest() != done[k].sha256
                else:
                    bar.set_postfix_str(out.shard_name(k), refresh=False)
                    sha, written = out.write(k, data), written + 1
                    if rank == 0:
                        own[k] = sha
                        publish(False)
                bar.update(len(part))
    held = sum(s.count for s in done)
    if n < held:
        raise InputError(source.get("path"), n, f"input changed since {folder} was started: it ends "
                         f"at line {n}, the folder already holds lines up to {held}")  # fmt: skip
    sync()  # every shard file is on disk
    if rank == 0:
        publish(True)
        out.finish([{**source, "lines": n, "text_sha256": text_hash.hexdigest()}])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return StreamSummary(n, embedded, -(-n // size), written, mismatched,
                         time.perf_counter() - start, peak, counts)  # fmt: skip


def load_vectors(folder: str | Path, verify: bool = True) -> np.ndarray:
    """Every vector of a finished ``embed_to`` folder, shards joined in input order (N, D)."""
    arrays = [np.load(path, allow_pickle=False) for _, path in shard_paths(folder, verify)]
    if arrays:
        return np.concatenate(arrays)
    return np.zeros((0, int(read_manifest(folder).get("dim", 0))), dtype=np.float32)


def _device_type(model: Any) -> str:
    """``cpu`` or ``cuda`` of a torch module; ``cpu`` for a model without parameters (ONNX)."""
    first = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return "cpu" if first is None else first.device.type
