"""Raw text files -> sharded pre-training instances (the library side of ``prepare-pretraining``).

Work is split by input file, and a large uncompressed text file into pieces of about
``PrepareSettings.piece_mib`` cut at document starts: each file or piece is read, tokenized and
turned into instances by one worker process (:mod:`bertkit.data.prepare_files`) with its own RNG,
``derive_rng(seed, file_index, stream[, piece])``, so the output does not depend on the number of
workers.
Memory per worker is bounded by the instance builder's chunk (``InstanceConfig.buffer_docs`` /
``buffer_tokens``) and the shard writer's ``shard_size``, not by the corpus size. Everything is
written into a hidden staging folder next to the output; the manifest is written last and the folder
renamed into place only when all files succeeded, so an interrupted run leaves no half-written
output under the final name.

Many processes, many machines (torchrun ranks, ``share`` given): the files and pieces are dealt
out to the ranks by size (largest first, each to the rank with the fewest bytes so far), every
rank writes its shards into rank 0's staging folder (on a file system all ranks see), and rank 0
merges the counts into the manifest. A piece's instances depend only on the file's index, the
piece's number and the seed, so the folder equals a one-process run's byte for byte.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bertkit.data.prepare_files import (
    FileTask,
    SplitCounts,
    count_pieces,
    load_vocab_tokens,
    run_file_tasks,
    task_bytes,
)
from bertkit.data.prepare_settings import PrepareSettings
from bertkit.data.shards import write_manifest
from bertkit.errors import BertkitError, InputError
from bertkit.input_files import require_file
from bertkit.io import sha256_file
from bertkit.staging import removed_unless_finished, swap_folder


@dataclass
class PrepareSummary:
    output: Path
    files: int
    splits: dict[str, SplitCounts]
    seconds: float
    output_bytes: int


def deal(sizes: list[int], world: int) -> list[list[int]]:
    """Task indices per rank: the largest task (file or piece) first, each to the rank with the
    fewest bytes so far (ties: the lower rank), so that ranks finish at about the same time.
    Deterministic."""
    shares: list[list[int]] = [[] for _ in range(world)]
    load = [0] * world
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(world), key=lambda r: (load[r], r))
        shares[r].append(i)
        load[r] += sizes[i]
    return [sorted(x) for x in shares]


def prepare_pretraining(
    inputs: list[str | Path],
    vocab: str | Path,
    output: str | Path,
    settings: PrepareSettings,
    *,
    num_workers: int = 1,
    overwrite: bool = False,
    show_progress: bool | None = None,
    rank: int = 0,
    world: int = 1,
    share: Callable[[Any], list[Any]] | None = None,
) -> PrepareSummary:
    """Build the shards and manifest for ``inputs`` into ``output`` (see the module docstring).

    ``rank``/``world``/``share``: one process of several (torchrun). ``share(obj)`` is a
    collective every process calls with an object and that returns every process's, in rank
    order (``torch.distributed.all_gather_object``). Rank 0 returns the run's summary, the
    others the summary of their own files (``output`` is rank 0's to write)."""
    if world > 1 and share is None:
        raise ValueError("world > 1 needs a share function (all_gather of objects)")
    start = time.perf_counter()
    output = Path(output)
    tokens = load_vocab_tokens(vocab)
    paths = [Path(p) for p in inputs]
    if not paths:
        raise BertkitError("no input files given")
    for p in paths:
        require_file(p, "file not found (expected a text corpus file)")
    if output.exists() and (not output.is_dir() or any(output.iterdir())) and not overwrite:
        raise BertkitError(f"{output}: exists and is not empty (pass --overwrite to replace it)")
    staging = output.parent / f".{output.name}.partial-{os.getpid()}"
    if rank == 0:
        try:
            staging.mkdir(parents=True, exist_ok=False)
        except OSError as e:
            raise BertkitError(f"{output}: cannot create the output ({e.strerror or e})") from e
    # rank 0: an error, or torchrun stopping this rank when another failed, removes the staging
    with removed_unless_finished(staging) if rank == 0 else contextlib.nullcontext():
        if share is not None:
            staging = Path(share(str(staging))[0])  # rank 0's, made before anyone writes
        pieces = [count_pieces(p, settings.piece_mib, settings.corpus.format) for p in paths]
        every_task = [
            FileTask(str(p), i, str(staging), str(vocab), settings, k, n)
            for i, (p, n) in enumerate(zip(paths, pieces))
            for k in range(n)
        ]
        mine = deal([task_bytes(t) for t in every_task], world)[rank]
        tasks = [every_task[i] for i in mine]
        results = run_file_tasks(tasks, num_workers, show_progress)
        if share is not None:
            every = share(results)
            if rank != 0:
                share(None)  # wait until rank 0 has the output in place (or failed)
                return _summary(output, results, len({t.index for t in tasks}), start, 0)
            results = [r for part in every for r in part]
            _check_shards(staging, results)
        results.sort(key=lambda r: (r["index"], r["piece"]))
        splits = _merge(results)
        train = splits.get("train", SplitCounts())
        if train.instances == 0:
            docs = sum(c.documents for c in splits.values())
            names = ", ".join(str(p) for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
            raise InputError(
                names,
                None,
                f"no training instances ({docs} documents read; expected non-empty text "
                "in the given format: check --format and --text-field)",
            )
        shutil.copyfile(vocab, staging / "vocab.txt")
        manifest = {
            "num_instances": {k: v.instances for k, v in splits.items()},
            "settings": settings.to_record(),
            "vocab": {
                "size": len(tokens),
                "sha256": sha256_file(vocab),
                **{
                    f"{t}_token_id": tokens.index(f"[{t.upper()}]")
                    for t in ("cls", "sep", "mask", "pad")
                },
            },
            "inputs": _input_records(paths, pieces, results),
            "splits": {
                k: {**{f: v for f, v in asdict(c).items() if f != "shards"}, "shards": c.shards}
                for k, c in splits.items()
            },
        }
        write_manifest(staging, manifest)
        _swap_into_place(staging, output)
        if share is not None:
            share(None)
    size = sum(f.stat().st_size for f in output.iterdir())
    return _summary(output, results, len(paths), start, size)


def _input_records(paths: list[Path], pieces: list[int], results: list[dict]) -> list[dict]:
    """The manifest's entry for each input file (``pieces`` only when it was cut)."""
    formats = {r["index"]: r["format"] for r in results if r["piece"] == 0}
    return [
        {"path": str(p), "bytes": p.stat().st_size, "format": formats[i]}
        | ({"pieces": n} if n > 1 else {})
        for i, (p, n) in enumerate(zip(paths, pieces))
    ]


def _merge(results: list[dict]) -> dict[str, SplitCounts]:
    """The counts of every file's result, per split, in the order given."""
    splits: dict[str, SplitCounts] = {}
    for r in results:
        for name, c in r["counts"].items():
            splits.setdefault(name, SplitCounts()).merge(SplitCounts(**c))
    return splits


def _summary(
    output: Path, results: list[dict], files: int, start: float, size: int
) -> PrepareSummary:
    return PrepareSummary(output, files, _merge(results), time.perf_counter() - start, size)


def _check_shards(staging: Path, results: list[dict]) -> None:
    """Rank 0: every shard another rank wrote is in the staging folder (a rank on another
    machine writes into its own file system unless the output is on a shared one)."""
    for r in results:
        for c in r["counts"].values():
            for shard in c["shards"]:
                if not (staging / shard["file"]).is_file():
                    raise BertkitError(
                        f"{staging / shard['file']} (input file {r['index'] + 1}, piece "
                        f"{r['piece'] + 1}) is not there: "
                        "with ranks on several machines, --output must be on a file system "
                        "every machine sees"
                    )


def _swap_into_place(staging: Path, output: Path) -> None:
    """Rename the finished staging folder to ``output`` (replacing an old one, if allowed; put
    back if the rename fails)."""
    # Temp files are created private (0600); give the finished files the usual umask mode.
    umask = os.umask(0)
    os.umask(umask)
    for f in staging.iterdir():
        f.chmod(0o666 & ~umask)
    try:
        swap_folder(staging, output)
    except OSError as e:
        raise BertkitError(f"{output}: cannot write the output ({e.strerror or e})") from e
