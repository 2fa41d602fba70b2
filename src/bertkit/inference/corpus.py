"""Corpus-scale embedding and prediction: stream lines (or examples) in, write ``.npy`` (or
JSONL) shards and a manifest, resume after a crash, with memory bounded by the sort window
rather than the corpus.

The input is cut into fixed windows of ``W`` lines (``StreamConfig.window``, a whole number of
shards). Each window is embedded exactly as :meth:`Embedder.embed` embeds a list (sorted by
length, batched), so throughput stays what in-memory sorting gives, and the vectors of a line
depend only on its window, never on where a run started: a resumed run gives the same bytes.

Two entry points, both on :class:`~bertkit.inference.Embedder` too:

- :func:`iter_batches`: ``(first_line, vectors)`` per window (0-based ``first_line``), for a
  caller who writes vectors elsewhere (a Ray Data / Spark partition, a vector store).
- :func:`embed_to`: the folder of :mod:`bertkit.inference.sharded` (``bertkit embed --output DIR/``).

SPLADE vectors go through the same :func:`write_stream` into CSR ``.npz`` shards:
:mod:`bertkit.inference.sparse_corpus` (``embed_sparse_to``, ``load_sparse_vectors``).

:func:`bertkit.inference.prediction_corpus.predict_to` does the same for a fine-tuned model
(``bertkit predict --output DIR/``) through :func:`write_stream`: one JSON line per example, as
``bertkit predict`` writes to a ``.jsonl`` file, in shards.

Resume re-reads the lines already written (no model runs on them), checks each complete shard's
``input_sha256`` and recomputes the window holding the first missing shard, writing only the
shards not yet there. A shard of that window recomputed differently from the one on disk (a
changed kernel path or thread count) keeps the disk version and is counted in ``mismatched``.

Both entry points bucket the process's oneDNN shapes (:func:`bound_shapes`), so that memory stays
flat over a corpus; vectors then equal :meth:`Embedder.embed`'s in a process that does the same.
"""

from __future__ import annotations

import dataclasses
import io
import resource
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.errors import InputError
from bertkit.inference.model_fingerprint import model_fingerprint
from bertkit.inference.quantize import calibrate_stream
from bertkit.inference.sharded import (
    MANIFEST,
    ShardedOutput,
    StreamConfig,
    lines_bytes,
    read_manifest,
    shard_paths,
)
from bertkit.inference.streaming import windows, write_shards
from bertkit.model import kernels
from bertkit.progress import counted, plural
from bertkit.tasks.windows import WindowCounts

if TYPE_CHECKING:
    from bertkit.inference.embedder import Embedder


DENSE_KIND = "vectors"
"""The manifest's ``kind`` of a folder of dense vectors (:func:`embed_to`)."""


@dataclass
class StreamSummary:
    """What a corpus run did: ``lines`` read, ``embedded`` (run through the model this time),
    ``shards`` in the folder, ``written`` this time, ``mismatched`` (see the module doc),
    ``seconds``, peak RSS in MiB, how long inputs were windowed, and ``resumed``: the lines not
    embedded because they were on disk (not those another torchrun rank embedded)."""

    lines: int
    embedded: int
    shards: int
    written: int
    mismatched: int
    seconds: float
    peak_rss_mib: float
    counts: WindowCounts
    resumed: int = 0

    def line(self, folder: str | Path, verb: str = "embedded", noun: str = "line") -> str:
        rate, done = self.embedded / max(self.seconds, 1e-9), self.resumed
        return (
            f"{verb} {counted(self.embedded, noun)} -> {folder} ({counted(self.shards, 'shard')}, "
            f"{self.written} written now{f', {counted(done, noun)} already done' if done else ''}; "
            f"{rate:.1f} {plural(noun)}/s, {self.seconds:.1f} s, peak RSS {self.peak_rss_mib:.0f} MiB)"
        )


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
        "device": device_type(embedder.model),
        "layers": list(embedder.layers.layers),
        "layer_combine": embedder.layers.layer_combine,
        **dataclasses.asdict(embedder.windows),  # doc_stride, truncate, window_pooling, ...
        "split_special_tokens": bool(getattr(embedder.tokenizer, "split_special_tokens", False)),
    }


def npy_bytes(vectors: np.ndarray, dtype: Any = np.float32) -> bytes:
    """The ``.npy`` file of ``vectors`` as ``dtype`` (None: their own; the bytes ``np.save`` writes)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(vectors, dtype=dtype))
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
    quantize: str | None = None,
    share: Callable[[np.ndarray | None], np.ndarray] | None = None,
) -> StreamSummary:
    """Embed ``lines`` into ``folder`` as shards plus a manifest (:mod:`bertkit.inference.sharded`),
    continuing a folder an earlier run of the same input, model and settings left unfinished.

    ``source``: the input for the manifest, ``{"path": ..., "size": bytes or None}`` (None: an
    unnamed stream). ``settings``: extra output-changing settings of the caller (e.g. how bytes
    were decoded). ``total``: lines expected, for the progress bar's ETA. Raises ConfigError when
    the folder was started with another model or setting, InputError when the lines it already
    holds differ from ``lines``; nothing is written then.

    Many processes (``world`` > 1, e.g. under torchrun): every process reads all of ``lines``
    and embeds its share of the windows (:func:`~bertkit.inference.sharded.write_shards`; with
    ``sort_window == shard_size``, shard k goes to rank k % world); rank 0 writes the manifest.
    Same windows and kernels (torchrun ranks adopt rank 0's): the folder is a one-process run's.

    ``quantize`` (one of :data:`bertkit.inference.quantize.PRECISIONS`): the shards hold the
    vectors quantized as sentence-transformers' ``quantize_embeddings`` does (int8/uint8 codes or
    packed bits), the manifest the precision (a setting: a resume with another one is refused)
    and the int8/uint8 ranges, calibrated on the first window
    (:func:`~bertkit.inference.quantize.calibrate_stream`, which ``share`` is passed to)."""
    quiet = dataclasses.replace(embedder, show_progress=False)  # one bar, over lines
    quant, first, config = None, None, config or StreamConfig()
    if quantize is not None:
        started = read_manifest(folder) if (Path(folder) / MANIFEST).is_file() else None
        emb = quiet.embed if rank == 0 or share is None else None  # share: rank 0's ranges
        quant, lines, first = calibrate_stream(quantize, lines, config.window, started, emb, share)

    def compute(chunk: list[str]) -> tuple[Callable[[int, int], bytes], WindowCounts]:
        nonlocal first
        if first is not None and chunk == first[0]:  # the calibration window, embedded already
            (vectors, counts), first = first[1], None
        else:
            vectors, counts = quiet.embed(chunk)
        if quant is not None:
            codes = quant.apply(vectors)
            return (lambda a, b: npy_bytes(codes[a:b], None)), counts
        return (lambda a, b: npy_bytes(vectors[a:b])), counts

    stored = {"dtype": "float32"}
    if quant is not None:
        settings = {**(settings or {}), "quantize": quant.precision}
        stored = {"dtype": quant.dtype, "quantization": quant.to_manifest()}
    return write_stream(
        folder,
        lines,
        kind=DENSE_KIND,
        suffix=".npy",
        model_dir=getattr(embedder, "folder", None),  # a Router's own folder, not a route's
        settings={**embedder_settings(embedder), **(settings or {})},
        extra={"dim": embedder.dim, **stored},
        compute=compute,
        item_bytes=lines_bytes,
        desc="embed",
        config=config,
        source=source,
        total=total,
        show_progress=show_progress,
        rank=rank,
        world=world,
        barrier=barrier,
    )


def write_stream(
    folder: str | Path,
    items: Iterable[Any],
    *,
    kind: str,
    suffix: str,
    model_dir: str | Path | None,
    settings: dict[str, Any],
    extra: dict[str, Any],
    compute: Callable[[list[Any]], tuple[Callable[[int, int], bytes], WindowCounts]],
    item_bytes: Callable[[Any], bytes],
    desc: str,
    config: StreamConfig | None,
    source: dict[str, Any] | None,
    **run: Any,
) -> StreamSummary:
    """The folder of ``kind`` shards (``{kind}-00000{suffix}`` ...) for ``items``: the manifest
    header (model fingerprint, ``settings`` with the shard size and window, ``extra``), the
    streaming loop (:func:`~bertkit.inference.streaming.write_shards`, ``run``: total,
    show_progress, rank, world, barrier), the window counts summed and the summary."""
    config = config or StreamConfig()
    source = dict(source or {"path": None, "size": None})
    if source["path"] not in (None, "-"):  # absolute: search and a resume from elsewhere find it
        source["path"] = str(Path(source["path"]).absolute())
    header = {
        "kind": kind,
        "inputs": [source],
        "model": model_fingerprint(model_dir),
        "settings": {**settings, "shard_size": config.shard_size, "sort_window": config.window},
        **extra,
    }
    out = ShardedOutput(folder, header, prefix=kind, suffix=suffix)
    bound_shapes()
    counts = WindowCounts(0, 0, 0, 0)

    def counted(chunk: list[Any]) -> Callable[[int, int], bytes]:
        nonlocal counts
        shard, c = compute(chunk)
        counts = counts + c
        return shard

    done = write_shards(
        out,
        items,
        config=config,
        compute=counted,
        item_bytes=item_bytes,
        source=source,
        desc=desc,
        **run,
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return StreamSummary(
        done.lines,
        done.computed,
        done.shards,
        done.written,
        done.mismatched,
        done.seconds,
        peak,
        counts,
        done.resumed,
    )


def load_vectors(folder: str | Path, verify: bool = True) -> np.ndarray:
    """Every vector of a finished ``embed_to`` folder, shards joined in input order (N, D)."""
    require_kind(folder, DENSE_KIND, "load_sparse_vectors")
    arrays = [np.load(path, allow_pickle=False) for _, path in shard_paths(folder, verify)]
    if arrays:
        return np.concatenate(arrays)
    return np.zeros((0, int(read_manifest(folder).get("dim", 0))), dtype=np.float32)


def require_kind(folder: str | Path, kind: str, other: str) -> dict[str, Any]:
    """The manifest of ``folder``; InputError when it holds another kind of output."""
    manifest = read_manifest(folder)
    if manifest.get("kind") != kind:
        raise InputError(
            folder,
            None,
            f"holds {manifest.get('kind')!r} output, not {kind!r} (read it with {other})",
        )
    return manifest


def device_type(model: Any) -> str:
    """``cpu`` or ``cuda`` of a torch module; ``cpu`` for a model without parameters (ONNX)."""
    first = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return "cpu" if first is None else first.device.type
