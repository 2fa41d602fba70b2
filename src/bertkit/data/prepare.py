"""Raw text files -> sharded pre-training instances (the library side of ``prepare-pretraining``).

Work is split by input file: each file is read, tokenized and turned into instances by one
worker process with its own RNG, ``derive_rng(seed, file_index, stream)``, so the output does not
depend on the number of workers. Memory per worker is bounded by the instance builder's chunk
(``InstanceConfig.buffer_docs`` / ``buffer_tokens``) and the shard writer's ``shard_size``, not by
the corpus size. Everything is written into a hidden staging folder next to the output; the
manifest is written last and the folder renamed into place only when all files succeeded, so an
interrupted run leaves no half-written output under the final name.

Many processes, many machines (torchrun ranks, ``share`` given): the files are dealt out to the
ranks by size (largest first, each to the rank with the fewest bytes so far), every rank writes
its files' shards into rank 0's staging folder (on a file system all ranks see), and rank 0
merges the counts into the manifest. A file's instances depend only on its index and the seed,
so the folder equals a one-process run's byte for byte.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bertkit.data.corpus import CorpusOptions, detect_format, read_file_documents
from bertkit.data.masking import MaskingSpec, check_mask_ratios, derive_rng
from bertkit.data.pretraining import ChunkedInstanceBuilder, InstanceConfig, tokenize_document
from bertkit.data.shards import ShardWriter, write_manifest
from bertkit.errors import BertkitError, ConfigError, InputError, MissingFileError
from bertkit.io import fsync_dir, read_text_lines, sha256_file
from bertkit.progress import progress

# RNG stream numbers within a file's key (seed, file_index, stream).
_TRAIN, _EVAL, _HOLDOUT = 0, 1, 2
# Distinct words the tokenizer remembers per worker. Its default (512k) would let memory grow with
# the corpus' vocabulary for hundreds of MB of text (+37 MB from 5 to 25 MB of Wikipedia); 64k
# words cover nearly all running text (Zipf) and stay a few MB.
_TOKENIZER_CACHE_WORDS = 1 << 16


@dataclass(frozen=True)
class PrepareSettings:
    """Everything that decides the output (recorded in the manifest's ``settings``)."""

    max_seq_length: int = 128
    """Tokens per instance, [CLS] and [SEP]s included."""
    short_seq_prob: float = 0.1
    """Probability of a shorter target length (google-research/bert's 0.1)."""
    dupe_factor: int = 10
    """Uses of each document, with fresh masks each time."""
    masked_lm_prob: float = 0.15
    """Fraction of tokens masked."""
    max_predictions_per_seq: int = 20
    """At most this many masked tokens per instance."""
    whole_word_mask: bool = False
    """Mask all pieces of a word together."""
    split_special_tokens: bool = False
    """Literal [CLS], [SEP], [MASK] ... in the corpus are text, not special tokens."""
    mask_ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)
    """Of the masked positions: shares made [MASK], kept, replaced by a random id (sum 1)."""
    dynamic_masking: bool = False
    """Store unmasked instances; the collator masks them again each epoch."""
    do_lower_case: bool = True
    """Lower-case and strip accents (uncased BERT)."""
    seed: int = 12345
    """Seed of the document order, pairing and masks."""
    shard_size: int = 10_000
    """Instances per shard."""
    holdout_fraction: float = 0.0
    """Fraction of documents put in an 'eval' split."""
    format: str = "auto"
    """Corpus format (auto: detected per file)."""
    text_field: str = "text"
    """JSONL field holding the text."""
    encoding_errors: str = "strict"
    """strict: invalid UTF-8 is an error naming file and line; replace: U+FFFD."""
    buffer_docs: int = 1000
    """Documents per chunk (memory bound)."""
    buffer_tokens: int = 250_000
    """Tokens per chunk (memory bound)."""
    balanced_next: bool = False
    """Single-sentence chunks get an actual-next B half the time (google-research/bert makes them
    all random-next, which skews short instances' NSP labels; see ``InstanceConfig``)."""

    def __post_init__(self) -> None:
        """Check every value up front, so workers never fail on a setting (ConfigError)."""
        problems = []
        if not 0.0 <= self.holdout_fraction < 1.0:
            problems.append("holdout fraction must be in [0, 1)")
        if self.shard_size < 1:
            problems.append("shard size must be >= 1")
        if not 0.0 < self.masked_lm_prob < 1.0:
            problems.append("masked_lm_prob must be in (0, 1)")
        if self.max_predictions_per_seq < 1:
            problems.append("max_predictions_per_seq must be >= 1")
        try:
            object.__setattr__(self, "mask_ratios", check_mask_ratios(self.mask_ratios))
        except ValueError as e:
            problems.append(str(e))
        try:
            self.instance_config()
            CorpusOptions(self.format, self.text_field, self.encoding_errors)
        except ValueError as e:
            problems.append(str(e))
        if problems:
            raise ConfigError("; ".join(problems))

    def instance_config(self) -> InstanceConfig:
        return InstanceConfig(
            self.max_seq_length,
            self.short_seq_prob,
            self.dupe_factor,
            self.buffer_docs,
            self.buffer_tokens,
            balanced_next=self.balanced_next,
        )


@dataclass
class SplitCounts:
    documents: int = 0
    sentences: int = 0
    tokens: int = 0
    instances: int = 0
    instance_tokens: int = 0
    random_next: int = 0
    masked: int = 0
    shards: list[dict[str, Any]] = field(default_factory=list)

    def merge(self, other: SplitCounts) -> None:
        for k in ("documents", "sentences", "tokens", "instances", "instance_tokens"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.random_next += other.random_next
        self.masked += other.masked
        self.shards.extend(other.shards)


@dataclass(frozen=True)
class _FileTask:
    path: str
    index: int
    staging: str
    vocab: str
    settings: PrepareSettings


def load_vocab_tokens(path: str | Path) -> list[str]:
    """Token strings of a ``vocab.txt`` (line number = id)."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(
            path, None, "vocabulary not found (expected vocab.txt, one token a line)"
        )
    tokens = [line for _, line in read_text_lines(path)]
    if tokens and tokens[-1] == "":
        tokens.pop()
    for t in ("[CLS]", "[SEP]", "[MASK]", "[PAD]"):
        if t not in tokens:
            raise InputError(path, None, f"vocabulary lacks {t} (expected a BERT vocab.txt)")
    return tokens


# The progress queue of a pool worker process. A queue can only reach pool workers through the
# pool initializer, which can only leave it in a module global (one per worker process).
_worker_queue: Any = None


def _init_worker(queue: Any) -> None:
    global _worker_queue
    _worker_queue = queue


def _prepare_file_safe(task: _FileTask) -> dict[str, Any]:
    """Worker entry: errors travel back as plain data (InputError's constructor does not fit
    pickle's exception protocol, and an unpicklable error would hang the pool)."""
    queue = _worker_queue
    try:
        report = None if queue is None else (lambda n: queue.put((task.index, n)))
        return _prepare_file(task, report)
    except InputError as e:
        return {"index": task.index, "error": ["input", e.path, e.line, e.message]}
    except BertkitError as e:
        return {"index": task.index, "error": ["bertkit", str(e)]}


def _raise_worker_error(error: list) -> None:
    if error[0] == "input":
        raise InputError(*error[1:])
    raise BertkitError(error[1])


def _prepare_file(task: _FileTask, report: Callable[[int], None] | None = None) -> dict[str, Any]:
    """One input file -> shards in the staging folder; returns counts per split.

    ``report(n)`` is called now and then with about ``n`` more characters of the file read.
    """
    from bertkit.tokenizer import BertTokenizer

    s = task.settings
    tokens = load_vocab_tokens(task.vocab)
    ids = {t: i for i, t in enumerate(tokens)}
    tok = BertTokenizer(task.vocab, do_lower_case=s.do_lower_case, cache_size=_TOKENIZER_CACHE_WORDS,
                        split_special_tokens=s.split_special_tokens)  # fmt: skip
    spec = None
    if not s.dynamic_masking:
        spec = MaskingSpec.from_tokens(
            tokens,
            masked_lm_prob=s.masked_lm_prob,
            max_predictions_per_seq=s.max_predictions_per_seq,
            whole_word_mask=s.whole_word_mask,
            mask_ratios=s.mask_ratios,
        )
    config = s.instance_config()
    splits = {"train": (config, _TRAIN)}
    if s.holdout_fraction > 0:
        splits["eval"] = (replace(config, dupe_factor=1), _EVAL)
    builders, writers, counts = {}, {}, {}
    for name, (cfg, stream) in splits.items():
        rng = derive_rng(s.seed, task.index, stream)
        builders[name] = ChunkedInstanceBuilder(cfg, ids["[CLS]"], ids["[SEP]"], spec, rng)
        prefix = f"{name}-{task.index:05d}"
        writers[name] = ShardWriter(task.staging, prefix, s.shard_size, len(tokens))
        counts[name] = SplitCounts()
    holdout_rng = derive_rng(s.seed, task.index, _HOLDOUT)

    def emit(name: str, instances) -> None:
        c = counts[name]
        for inst in instances:
            writers[name].add(inst)
            c.instances += 1
            c.instance_tokens += len(inst.input_ids)
            c.random_next += inst.next_sentence_label
            c.masked += len(inst.masked_positions)

    options = CorpusOptions(s.format, s.text_field, s.encoding_errors)
    fmt = s.format if s.format != "auto" else detect_format(task.path, s.encoding_errors)
    unreported = 0
    for doc in read_file_documents(task.path, replace(options, format=fmt)):
        if report is not None:
            unreported += sum(len(x) + 1 for x in doc)
            if unreported >= 1 << 18:
                report(unreported)
                unreported = 0
        tokenized = tokenize_document(doc, tok.encode_ids)
        if not tokenized:
            continue
        # Drawn for every document (also when the fraction is 0) so splits are stable.
        held_out = holdout_rng.random() < s.holdout_fraction
        name = "eval" if held_out else "train"
        c = counts[name]
        c.documents += 1
        c.sentences += len(tokenized)
        c.tokens += sum(len(x) for x in tokenized)
        emit(name, builders[name].add(tokenized))
    for name in splits:
        emit(name, builders[name].finish())
        counts[name].shards = [x.to_dict() for x in writers[name].close()]
    return {"index": task.index, "format": fmt, "counts": {k: asdict(v) for k, v in counts.items()}}


@dataclass
class PrepareSummary:
    output: Path
    files: int
    splits: dict[str, SplitCounts]
    seconds: float
    output_bytes: int


def deal_files(sizes: list[int], world: int) -> list[list[int]]:
    """File indices per rank: largest file first, each to the rank with the fewest bytes so far
    (ties: the lower rank), so that ranks finish at about the same time. Deterministic."""
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
        if not p.is_file():
            raise MissingFileError(p, None, "file not found (expected a text corpus file)")
    if output.exists() and (not output.is_dir() or any(output.iterdir())) and not overwrite:
        raise BertkitError(f"{output}: exists and is not empty (pass --overwrite to replace it)")
    staging = output.parent / f".{output.name}.partial-{os.getpid()}"
    if rank == 0:
        try:
            staging.mkdir(parents=True, exist_ok=False)
        except OSError as e:
            raise BertkitError(f"{output}: cannot create the output ({e.strerror or e})") from e
    if share is not None:
        staging = Path(share(str(staging))[0])  # rank 0's, made before anyone writes
    try:
        mine = deal_files([p.stat().st_size for p in paths], world)[rank]
        tasks = [_FileTask(str(paths[i]), i, str(staging), str(vocab), settings) for i in mine]
        results = _run_tasks(tasks, num_workers, show_progress)
        if share is not None:
            every = share(results)
            if rank != 0:
                share(None)  # wait until rank 0 has the output in place (or failed)
                return _summary(output, results, len(tasks), start, 0)
            results = [r for part in every for r in part]
            _check_shards(staging, results)
        results.sort(key=lambda r: r["index"])
        splits = _merge(results)
        train = splits.get("train", SplitCounts())
        if train.instances == 0:
            docs = sum(c.documents for c in splits.values())
            names = ", ".join(str(p) for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
            raise InputError(
                None, None,
                f"{names}: no training instances ({docs} documents read; expected non-empty text "
                "in the given format: check --format and --text-field)",
            )  # fmt: skip
        shutil.copyfile(vocab, staging / "vocab.txt")
        manifest = {
            "num_instances": {k: v.instances for k, v in splits.items()},
            "settings": asdict(settings),
            "vocab": {
                "size": len(tokens),
                "sha256": sha256_file(vocab),
                **{
                    f"{t}_token_id": tokens.index(f"[{t.upper()}]")
                    for t in ("cls", "sep", "mask", "pad")
                },
            },
            "inputs": [
                {"path": str(p), "bytes": p.stat().st_size, "format": r["format"]}
                for p, r in zip(paths, results)
            ],
            "splits": {
                k: {**{f: v for f, v in asdict(c).items() if f != "shards"}, "shards": c.shards}
                for k, c in splits.items()
            },
        }
        write_manifest(staging, manifest)
        _swap_into_place(staging, output)
    except BaseException:
        if rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    if share is not None:
        share(None)
    size = sum(f.stat().st_size for f in output.iterdir())
    return _summary(output, results, len(paths), start, size)


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
                        f"{staging / shard['file']} (input file {r['index'] + 1}) is not there: "
                        "with ranks on several machines, --output must be on a file system "
                        "every machine sees"
                    )


def _run_tasks(tasks: list[_FileTask], num_workers: int, show_progress: bool | None) -> list[dict]:
    """Run the file tasks (inline or in a spawn pool) with a progress bar in input bytes."""
    sizes = {t.index: Path(t.path).stat().st_size for t in tasks}
    bar = progress(
        total=sum(sizes.values()), desc="prepare", unit="B", unit_scale=True, enabled=show_progress
    )
    results: list[dict] = []
    done = dict.fromkeys(sizes, 0)  # progress shown per file, corrected to its size at the end

    def advance(index: int, n: int) -> None:
        n = min(n, sizes[index] - done[index])
        done[index] += n
        bar.update(n)

    with bar:
        if num_workers <= 1 or len(tasks) <= 1:
            for t in tasks:
                results.append(_prepare_file(t, lambda n, i=t.index: advance(i, n)))
                advance(t.index, sizes[t.index])
            return results
        # spawn: workers start clean (no copy of the parent's memory or threads).
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.SimpleQueue()
        with ctx.Pool(min(num_workers, len(tasks)), _init_worker, (queue,)) as pool:
            pending = pool.imap_unordered(_prepare_file_safe, tasks)
            while len(results) < len(tasks):
                try:
                    r = pending.next(timeout=0.2)
                except multiprocessing.TimeoutError:
                    r = None
                while not queue.empty():
                    advance(*queue.get())
                if r is not None:
                    if "error" in r:
                        _raise_worker_error(r["error"])  # leaving the block ends the pool
                    results.append(r)
                    advance(r["index"], sizes[r["index"]])
    return results


def _swap_into_place(staging: Path, output: Path) -> None:
    """Rename the finished staging folder to ``output`` (replacing an old one, if allowed)."""
    # Temp files are created private (0600); give the finished files the usual umask mode.
    umask = os.umask(0)
    os.umask(umask)
    for f in staging.iterdir():
        f.chmod(0o666 & ~umask)
    old = None
    if output.exists():
        old = output.parent / f".{output.name}.old-{os.getpid()}"
        os.replace(output, old)
    os.replace(staging, output)
    fsync_dir(output.parent)
    if old is not None:
        with contextlib.suppress(OSError):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
