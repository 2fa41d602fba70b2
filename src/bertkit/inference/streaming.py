"""The streaming loop of a corpus-scale job: read items in windows, compute each window once,
write its results as the shards of a :class:`~bertkit.inference.sharded.ShardedOutput` folder,
resume where an earlier run stopped, and share the windows between processes (torchrun ranks).

The folder's format and its checks live in :mod:`bertkit.inference.sharded`; what a window
computes (vectors, predictions) in :mod:`bertkit.inference.corpus`.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from bertkit.errors import InputError
from bertkit.inference.sharded import ShardedOutput, StreamConfig, lines_bytes
from bertkit.io import sha256_file
from bertkit.model.kernels import trim_heap
from bertkit.progress import progress

T = TypeVar("T")


def windows(items: Iterable[T], size: int) -> Iterator[tuple[int, list[T]]]:
    """``(first, chunk)``: consecutive chunks of at most ``size`` items, pulled lazily, so at most
    ``size`` items are held at once (``first`` is the 0-based index of the chunk's first item)."""
    it, first = iter(items), 0
    while chunk := list(itertools.islice(it, size)):
        yield first, chunk
        first += len(chunk)


@dataclass(frozen=True)
class Written:
    """What :func:`write_shards` did: ``lines`` read, ``computed`` (run through ``compute`` this
    time), ``shards`` in the folder, ``written`` this time, ``mismatched`` (shards of a
    recomputed window whose new bytes differ from the disk's, which are kept), ``seconds``,
    ``resumed`` (lines of the windows skipped because they were on disk: not another rank's)."""

    lines: int
    computed: int
    shards: int
    written: int
    mismatched: int
    seconds: float
    resumed: int


def write_shards(
    out: ShardedOutput,
    items: Iterable[T],
    *,
    config: StreamConfig,
    compute: Callable[[list[T]], Callable[[int, int], bytes]],
    item_bytes: Callable[[Sequence[T]], bytes] = lines_bytes,
    source: dict[str, Any],
    total: int | None = None,
    show_progress: bool | None = None,
    desc: str = "write",
    rank: int = 0,
    world: int = 1,
    barrier: Callable[[], None] | None = None,
) -> Written:
    """Stream ``items`` into ``out``'s folder, one window of ``config.window`` items at a time,
    continuing what an earlier run of the same input and settings left (:meth:`ShardedOutput.resume`).

    ``compute(chunk)`` runs the work on one window and returns ``shard(a, b)``: the file bytes of
    the results of ``chunk[a:b]``. A window depends only on its items, never on where a run
    started, so a resumed run gives the same bytes. ``item_bytes(part)``: the canonical bytes of
    input items, hashed per shard (``input_sha256``) and over the input (``text_sha256``).
    ``source``: the input for the manifest (``{"path", "size"}``). Raises InputError when the
    items a complete shard was made from differ from those read now, before anything is computed.

    Many processes (``world`` > 1, e.g. torchrun ranks): each reads all items and computes the
    windows ``w`` with ``w % world == rank``; rank 0 alone removes leftovers and writes the
    manifest, listing each shard once its file is on disk, so a crash leaves a resumable folder
    as with one process. ``barrier`` (required then) is called by every process after rank 0's
    clean-up and before the final manifest.
    """
    if world > 1 and barrier is None:
        raise ValueError("world > 1 needs a barrier shared by the processes")
    sync = barrier or (lambda: None)
    size, window = config.shard_size, config.window
    done = out.resume(clean=rank == 0)
    sync()  # nobody writes before rank 0 has removed the leftovers
    pending: dict[int, tuple[tuple[int, int], str]] = {}  # rank 0: lines, input sha to list
    own: dict[int, str] = {}  # rank 0: sha256 of the shards it wrote, not listed yet

    def publish(final: bool) -> None:
        """Rank 0: list the next shards in order while their files are on disk."""
        while (k := len(out.shards)) in pending and (final or k in own or out.written(k)):
            if not out.written(k):
                raise InputError(
                    out.folder / out.shard_name(k),
                    None,
                    "missing: the process that computes it did not write it",
                )
            span, h = pending.pop(k)
            out.record(k, span, own.pop(k, None) or sha256_file(out.folder / out.shard_name(k)), h)

    text_hash = hashlib.sha256()
    computed, written, mismatched, n, resumed = 0, 0, 0, 0, 0
    start = time.perf_counter()
    expected = None if total is None else -(-total // world)  # this process's share, about
    bar = progress(total=expected, unit="line", desc=desc, enabled=show_progress, smoothing=0.1)
    with bar:
        for w, (first, chunk) in enumerate(windows(items, window)):
            n = first + len(chunk)
            parts = [
                (first // size + j, chunk[a : a + size])
                for j, a in enumerate(range(0, len(chunk), size))
            ]
            spans = [(k * size + 1, k * size + len(part)) for k, part in parts]
            hashes = []
            for _, part in parts:  # each item encoded once, for its shard's hash and the input's
                text = item_bytes(part)
                text_hash.update(text)
                hashes.append(hashlib.sha256(text).hexdigest())
            for (k, _), span, h in zip(parts, spans, hashes):
                if k < len(done):  # checked before anything runs: a changed input writes nothing
                    out.check_input(k, span, h, source.get("path"))
                elif rank == 0:
                    pending[k] = (span, h)
            on_disk = parts[-1][0] < len(done)
            resumed += len(chunk) if on_disk else 0
            if on_disk or w % world != rank:  # on disk already, or another's
                if rank == 0:
                    publish(False)
                bar.update(len(chunk) if world == 1 else 0)
                continue
            shard = compute(chunk)
            computed += len(chunk)
            trim_heap()  # a window's freed blocks back to the system (RSS flat over a corpus)
            for k, part in parts:
                a = k * size - first
                data = shard(a, a + len(part))
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
        raise InputError(
            source.get("path"),
            n,
            f"input changed since {out.folder} was started: "
            f"it ends at line {n}, the folder already holds lines up to {held}",
        )
    sync()  # every shard file is on disk
    if rank == 0:
        publish(True)
        out.finish([{**source, "lines": n, "text_sha256": text_hash.hexdigest()}])
    seconds = time.perf_counter() - start
    return Written(n, computed, -(-n // size), written, mismatched, seconds, resumed)
