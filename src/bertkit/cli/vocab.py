"""`bertkit train-vocab`: train a WordPiece vocab.txt from text files (streaming)."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HELP = "train a WordPiece vocabulary (vocab.txt) from text files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.io import ENCODING_ERRORS

    p.add_argument(
        "--input",
        nargs="+",
        required=True,
        type=Path,
        metavar="FILE",
        help="UTF-8 text files, one text per line (WikiExtractor <doc> tag lines are skipped)",
    )
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--output", type=Path, required=True, help="where to write vocab.txt")
    p.add_argument("--cased", action="store_true", help="keep case and accents (default: uncased)")
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--limit-alphabet", type=int, default=1000)
    p.add_argument(
        "--max-words",
        type=int,
        default=1_000_000,
        help="distinct words held while counting (bounds memory)",
    )
    p.add_argument(
        "--encoding-errors",
        choices=ENCODING_ERRORS,
        default="strict",
        help="invalid UTF-8: stop with an error naming file and line, or use U+FFFD",
    )


def _lines(paths: list[Path], errors: str, bar) -> Iterator[str]:
    from bertkit.io import read_text_lines

    for path in paths:
        for _, line in read_text_lines(path, errors=errors, replace_hint=True):
            bar.update(len(line) + 1)
            if line.startswith("<doc ") or line == "</doc>":
                continue
            yield line


def run(args: argparse.Namespace) -> int:
    from bertkit.errors import InputError, MissingFileError
    from bertkit.progress import progress
    from bertkit.tokenizer.trainer import train_wordpiece

    for path in args.input:
        if not path.is_file():
            raise MissingFileError(path, None, "file not found")
    total = sum(p.stat().st_size for p in args.input)
    t0 = time.perf_counter()
    # progress in characters read, close to bytes for mostly-ASCII text
    with progress(total=total, desc="reading", unit="B", unit_scale=True) as bar:
        vocab, stats = train_wordpiece(
            _lines(args.input, args.encoding_errors, bar),
            vocab_size=args.vocab_size,
            min_frequency=args.min_frequency,
            lowercase=not args.cased,
            limit_alphabet=args.limit_alphabet,
            max_words=args.max_words,
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
