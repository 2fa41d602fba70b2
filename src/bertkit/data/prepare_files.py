"""One input file -> pre-training shards (what each worker of ``prepare-pretraining`` does), and
the pool of worker processes that runs the files.

A file's instances depend only on its index and the seed: its RNGs are
``derive_rng(seed, file_index, stream)``, one stream per split and one for the hold-out draw, so
the output does not depend on the number of workers (see :mod:`bertkit.data.prepare`).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.data.corpus import detect_format, read_file_documents
from bertkit.data.masking import MaskingSpec, derive_rng
from bertkit.data.pretraining import ChunkedInstanceBuilder, tokenize_document
from bertkit.data.shards import ShardWriter
from bertkit.errors import BertkitError, InputError, MissingFileError
from bertkit.io import read_text_lines
from bertkit.progress import progress

if TYPE_CHECKING:
    from bertkit.data.prepare_settings import PrepareSettings

# RNG stream numbers within a file's key (seed, file_index, stream).
_TRAIN, _EVAL, _HOLDOUT = 0, 1, 2
# Distinct words the tokenizer remembers per worker. Its default (512k) would let memory grow with
# the corpus' vocabulary for hundreds of MB of text (+37 MB from 5 to 25 MB of Wikipedia); 64k
# words cover nearly all running text (Zipf) and stay a few MB.
_TOKENIZER_CACHE_WORDS = 1 << 16


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
class FileTask:
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


def _prepare_file_safe(task: FileTask) -> dict[str, Any]:
    """Worker entry: errors travel back as plain data (InputError's constructor does not fit
    pickle's exception protocol, and an unpicklable error would hang the pool)."""
    queue = _worker_queue
    try:
        report = None if queue is None else (lambda n: queue.put((task.index, n)))
        return prepare_file(task, report)
    except InputError as e:
        return {"index": task.index, "error": ["input", e.path, e.line, e.message]}
    except BertkitError as e:
        return {"index": task.index, "error": ["bertkit", str(e)]}


def _raise_worker_error(error: list) -> None:
    if error[0] == "input":
        raise InputError(*error[1:])
    raise BertkitError(error[1])


def prepare_file(task: FileTask, report: Callable[[int], None] | None = None) -> dict[str, Any]:
    """One input file -> shards in the staging folder; returns counts per split.

    ``report(n)`` is called now and then with about ``n`` more characters of the file read.
    """
    from bertkit.tokenizer import BertTokenizer

    s = task.settings
    tokens = load_vocab_tokens(task.vocab)
    ids = {t: i for i, t in enumerate(tokens)}
    tok = BertTokenizer(
        task.vocab,
        do_lower_case=s.do_lower_case,
        cache_size=_TOKENIZER_CACHE_WORDS,
        split_special_tokens=s.split_special_tokens,
    )
    spec = None
    if not s.dynamic_masking:
        spec = MaskingSpec.from_tokens(tokens, **asdict(s.masking))
    config = s.instance
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

    options = s.corpus
    fmt = options.format
    if fmt == "auto":
        fmt = detect_format(task.path, options.encoding_errors)
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


def run_file_tasks(
    tasks: list[FileTask], num_workers: int, show_progress: bool | None
) -> list[dict]:
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
                results.append(prepare_file(t, lambda n, i=t.index: advance(i, n)))
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
