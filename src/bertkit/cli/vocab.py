"""`bertkit train-vocab`: train a WordPiece vocab.txt from text files (streaming).

The training flags are the fields of :class:`~bertkit.tokenizer.trainer.WordPieceSettings`;
``--encoding-errors`` is the corpus reading field of :class:`~bertkit.data.corpus.CorpusOptions`.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bertkit.cli import options

HELP = "train a WordPiece vocabulary (vocab.txt) from text files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.tokenizer.trainer import WordPieceSettings

    p.add_argument(
        "--input",
        nargs="+",
        required=True,
        type=Path,
        metavar="FILE",
        help="UTF-8 text files, one text per line (WikiExtractor <doc> tag lines are skipped)",
    )
    p.add_argument("--output", type=Path, required=True, help="where to write vocab.txt")
    options.add_cased(p)
    options.add_fields(
        p, WordPieceSettings, [f.name for f in dataclasses.fields(WordPieceSettings)]
    )
    options.add_encoding_errors(p)


def _lines(paths: list[Path], errors: str, bar) -> Iterator[str]:
    from bertkit.io import read_text_lines

    for path in paths:
        for _, line in read_text_lines(path, errors=errors, replace_hint=True):
            bar.update(len(line) + 1)
            if line.startswith("<doc ") or line == "</doc>":
                continue
            yield line


def run(args: argparse.Namespace) -> int:
    from bertkit.errors import InputError
    from bertkit.input_files import require_file
    from bertkit.progress import progress
    from bertkit.tokenizer.trainer import WordPieceSettings, train_wordpiece

    for path in args.input:
        require_file(path, stream=True)  # read once, line by line: a FIFO will do
    sizes = [p.stat().st_size if p.is_file() else None for p in args.input]
    total = None if None in sizes else sum(sizes)
    t0 = time.perf_counter()
    # progress in characters read, close to bytes for mostly-ASCII text
    with progress(total=total, desc="reading", unit="B", unit_scale=True) as bar:
        vocab, stats = train_wordpiece(
            _lines(args.input, args.encoding_errors, bar),
            **dataclasses.asdict(options.values(args, WordPieceSettings)),
            lowercase=not args.cased,
            output=None,
        )
    if stats.words == 0:  # a vocabulary of the special tokens alone would tokenize nothing
        names = ", ".join(str(p) for p in args.input)
        raise InputError(names, None, "no words to learn a vocabulary from (expected text)")
    vocab.save(args.output)  # only after all input was read: no partial output on bad input
    seconds = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"wrote {args.output}: {len(vocab)} tokens ({stats.alphabet} characters, {stats.merges} "
        f"merges) from {stats.texts} texts, {stats.words} words ({stats.distinct_words} distinct, "
        f"{stats.prunes} prunes) in {seconds:.1f}s; peak RSS {rss_mb:.0f} MB",
        file=sys.stderr,
    )
    return 0
