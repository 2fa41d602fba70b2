"""One input file, or one piece of a large one -> pre-training shards (what each worker of
``prepare-pretraining`` does), and the pool of worker processes that runs them.

A piece's instances depend only on the file's index, the piece's number and the seed: its RNGs
are ``derive_rng(seed, file_index, stream)`` (``..., stream, piece)`` for pieces after the
first), one stream per split and one for the hold-out draw, so the output does not depend on the
number of workers or ranks (see :mod:`bertkit.data.prepare`). A piece is cut from its file by
byte offsets alone (:func:`piece_span`), so every worker cuts the same pieces.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.data.corpus import detect_format, read_file_documents
from bertkit.data.corpus_format import is_parquet
from bertkit.data.corpus_spans import document_start
from bertkit.data.masking import MaskingSpec, derive_rng
from bertkit.data.pretraining import ChunkedInstanceBuilder, tokenize_document
from bertkit.data.shards import ShardWriter
from bertkit.errors import BertkitError, InputError
from bertkit.input_files import require_file
from bertkit.io import COMPRESSED_SUFFIXES, lines_before, read_text_lines
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
    """One worker's share: piece ``piece`` of ``pieces`` of input file ``index``."""

    path: str
    index: int
    staging: str
    vocab: str
    settings: PrepareSettings
    piece: int = 0
    pieces: int = 1

    @property
    def key(self) -> tuple[int, int]:
        return (self.index, self.piece)


def count_pieces(path: str | Path, piece_mib: float, fmt: str = "auto") -> int:
    """How many pieces file ``path`` (read as ``fmt``) is prepared in: one for a compressed or
    Parquet file (read whole), else its size over ``piece_mib`` MiB, rounded up."""
    path = Path(path)
    size = path.stat().st_size
    if path.suffix.lower() in COMPRESSED_SUFFIXES or size == 0 or fmt == "parquet":
        return 1
    if is_parquet(path):  # a Parquet file given as "auto"
        return 1
    return -(-size // max(1, int(piece_mib * (1 << 20))))


def nominal_bounds(size: int, piece: int, pieces: int) -> tuple[int, int]:
    """Bytes ``[lo, hi)`` of a file of ``size`` bytes that piece ``piece`` of ``pieces`` stands
    for before it is moved to document starts (equal shares)."""
    return piece * size // pieces, (piece + 1) * size // pieces


def piece_span(path: str | Path, fmt: str, piece: int, pieces: int) -> tuple[int, int] | None:
    """The bytes ``(start, end)`` piece ``piece`` reads: from the first document start in its
    nominal share to the first one at or after the next share's (:func:`document_start`), so the
    pieces read every document of the file exactly once; None when no document starts in its
    share (the piece before reads on past it)."""
    size = Path(path).stat().st_size
    lo, hi = nominal_bounds(size, piece, pieces)
    start = document_start(path, fmt, lo, hi)
    if start is None:
        return None
    end = size if piece == pieces - 1 else document_start(path, fmt, hi)
    return start, size if end is None else end


def load_vocab_tokens(path: str | Path) -> list[str]:
    """Token strings of a ``vocab.txt`` (line number = id)."""
    path = require_file(path, "vocabulary not found (expected vocab.txt, one token a line)")
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
        report = None if queue is None else (lambda n: queue.put((task.key, n)))
        return prepare_file(task, report)
    except InputError as e:
        return {
            "index": task.index,
            "piece": task.piece,
            "error": ["input", e.path, e.line, e.message],
        }
    except BertkitError as e:
        return {"index": task.index, "piece": task.piece, "error": ["bertkit", str(e)]}


def _raise_worker_error(error: list) -> None:
    if error[0] == "input":
        raise InputError(*error[1:])
    raise BertkitError(error[1])


def prepare_file(task: FileTask, report: Callable[[int], None] | None = None) -> dict[str, Any]:
    """One input file (or piece of it) -> shards in the staging folder; returns counts per split.

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
    # The first piece (a whole file) keeps the key and names files had before they had pieces.
    piece = (task.piece,) if task.piece else ()
    for name, (cfg, stream) in splits.items():
        rng = derive_rng(s.seed, task.index, stream, *piece)
        builders[name] = ChunkedInstanceBuilder(cfg, ids["[CLS]"], ids["[SEP]"], spec, rng)
        prefix = f"{name}-{task.index:05d}" + (f"-p{task.piece:04d}" if task.piece else "")
        writers[name] = ShardWriter(task.staging, prefix, s.shard_size, len(tokens))
        counts[name] = SplitCounts()
    holdout_rng = derive_rng(s.seed, task.index, _HOLDOUT, *piece)

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
    span = piece_span(task.path, fmt, task.piece, task.pieces) if task.pieces > 1 else None
    empty = task.pieces > 1 and span is None  # no document starts in this piece's share
    documents = () if empty else read_file_documents(task.path, replace(options, format=fmt), span)
    unreported = 0
    try:
        for doc in documents:
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
    except InputError as e:
        if span is None or span[0] == 0 or e.line is None:
            raise
        # The span's lines are numbered from 1: tell the file's line (counted only now).
        raise InputError(e.path, e.line + lines_before(task.path, span[0]), e.message) from e
    for name in splits:
        emit(name, builders[name].finish())
        counts[name].shards = [x.to_dict() for x in writers[name].close()]
    return {
        "index": task.index,
        "piece": task.piece,
        "format": fmt,
        "counts": {k: asdict(v) for k, v in counts.items()},
    }


def run_file_tasks(
    tasks: list[FileTask], num_workers: int, show_progress: bool | None
) -> list[dict]:
    """Run the tasks (inline or in a spawn pool) with a progress bar in input bytes."""
    sizes = {t.key: task_bytes(t) for t in tasks}
    bar = progress(
        total=sum(sizes.values()), desc="prepare", unit="B", unit_scale=True, enabled=show_progress
    )
    results: list[dict] = []
    done = dict.fromkeys(sizes, 0)  # progress shown per task, corrected to its size at the end

    def advance(key: tuple[int, int], n: int) -> None:
        n = min(n, sizes[key] - done[key])
        done[key] += n
        bar.update(n)

    with bar:
        if num_workers <= 1 or len(tasks) <= 1:
            for t in tasks:
                results.append(prepare_file(t, lambda n, k=t.key: advance(k, n)))
                advance(t.key, sizes[t.key])
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
                    key, n = queue.get()
                    advance(tuple(key), n)
                if r is not None:
                    if "error" in r:
                        _raise_worker_error(r["error"])  # leaving the block ends the pool
                    results.append(r)
                    key = (r["index"], r["piece"])
                    advance(key, sizes[key])
    return results


def task_bytes(task: FileTask) -> int:
    """The input bytes a task stands for (its nominal share of the file)."""
    lo, hi = nominal_bounds(Path(task.path).stat().st_size, task.piece, task.pieces)
    return hi - lo
