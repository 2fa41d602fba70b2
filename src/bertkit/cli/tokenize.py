"""`bertkit tokenize`: lines in, one JSON object per line out (ids, types, tokens, offsets)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertkit.tokenizer.protocol import Tokenizer

HELP = "tokenize lines (stdin or --input) into JSON lines with input_ids, tokens and offsets"
_CHUNK = 512


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.cli import options

    p.add_argument("--vocab", type=Path, required=True, help="vocab.txt")
    options.add_cased(p)
    p.add_argument("--pair", action="store_true", help="each line holds two tab-separated texts")
    options.add_split_special_tokens(p)
    p.add_argument(
        "--max-length", type=int, default=None, help="truncate to N tokens (specials included)"
    )
    p.add_argument(
        "--truncation",
        default="longest_first",
        choices=("longest_first", "only_first", "only_second"),
    )
    p.add_argument("--no-special-tokens", action="store_true", help="omit [CLS]/[SEP]")
    p.add_argument("--input", type=Path, default=None, help="read this file instead of stdin")
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        help="write here (atomically: all or nothing) instead of stdout",
    )
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    options.add_encoding_errors(p)


def _encode_lines(
    tok: Tokenizer, job: tuple[str, list[tuple[int, str, str | None]], dict[str, Any]]
) -> tuple[str, int, int]:
    """JSON lines for a chunk of (line number, text, pair) items of the input ``where``, with the
    chunk's line and token counts (runs in worker processes)."""
    from bertkit.errors import InputError

    where, items, kw = job
    out = []
    tokens = 0
    itos = tok.vocab.id_to_token
    for n, text, pair in items:
        try:
            e = tok.encode(text, pair, **kw)
        except ValueError as err:  # only_first / only_second: that text is too short to cut
            raise InputError(where, n, f"{err} (--truncation {kw['truncation']})") from err
        tokens += len(e.input_ids)
        obj = {
            "input_ids": e.input_ids,
            "token_type_ids": e.token_type_ids,
            "tokens": [itos[i] for i in e.input_ids],
            "offsets": e.offsets,
        }
        out.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(out), len(items), tokens


def _check_utf8(path: Path) -> None:
    """Fail before writing anything if the file is not valid UTF-8 (names the line)."""
    from bertkit.io import read_text_lines

    for _ in read_text_lines(path, replace_hint=True):
        pass


def _raw_lines(args: argparse.Namespace) -> Iterator[tuple[int, str]]:
    from bertkit.io import read_input_lines

    return read_input_lines(args.input, errors=args.encoding_errors, replace_hint=True)


def _chunks(args: argparse.Namespace, kw: dict[str, Any], bar) -> Iterator[tuple[str, list, dict]]:
    from bertkit.errors import InputError

    where = str(args.input) if args.input is not None else "<stdin>"
    items: list[tuple[int, str, str | None]] = []
    for n, line in _raw_lines(args):
        bar.update(1)
        if args.pair:
            parts = line.split("\t")
            if len(parts) != 2:
                raise InputError(where, n, f"expected 2 tab-separated texts, got {len(parts)}")
            items.append((n, parts[0], parts[1]))
        else:
            items.append((n, line, None))
        if len(items) >= _CHUNK:
            yield where, items, kw
            items = []
    if items:
        yield where, items, kw


def _check_flags(args: argparse.Namespace) -> None:
    """Flag combinations no line can satisfy: one error before reading (each line raised a
    ValueError traceback from the tokenizer)."""
    from bertkit.errors import ConfigError

    if args.max_length is None:
        return
    if args.truncation == "only_second" and not args.pair:
        raise ConfigError("--truncation only_second cuts each line's second text: it needs --pair")
    specials = 0 if args.no_special_tokens else 3 if args.pair else 2
    if args.max_length < specials:
        raise ConfigError(
            f"--max-length {args.max_length} is less than the {specials} special tokens "
            "([CLS]/[SEP]) of each line; pass a larger one (or --no-special-tokens)"
        )


def run(args: argparse.Namespace) -> int:
    from bertkit.input_files import require_file
    from bertkit.io import atomic_write
    from bertkit.progress import counted, progress, took
    from bertkit.tokenizer import BertTokenizer
    from bertkit.tokenizer.parallel import imap_chunks

    _check_flags(args)
    # a FIFO or a device is streamed once, as stdin is: no UTF-8 check or line count first
    regular = args.input is not None and require_file(args.input, stream=True).is_file()
    if regular and args.encoding_errors == "strict":
        _check_utf8(args.input)
    tok = BertTokenizer(
        args.vocab, do_lower_case=not args.cased, split_special_tokens=args.split_special_tokens
    )
    kw = {
        "add_special_tokens": not args.no_special_tokens,
        "max_length": args.max_length,
        "truncation": args.truncation if args.max_length is not None else False,
    }
    total = None
    if regular:
        with open(args.input, "rb") as f:
            total = sum(1 for _ in f)
    start = time.perf_counter()
    lines = tokens = 0
    with progress(total=total, desc="tokenizing", unit=" lines") as bar:
        results = imap_chunks(tok, _encode_lines, _chunks(args, kw, bar), args.workers)
        to_file = args.output is not None
        with atomic_write(args.output) if to_file else contextlib.nullcontext(sys.stdout) as out:
            for block, n, t in results:
                out.write(block)
                lines, tokens = lines + n, tokens + t
            out.flush()
    seconds = time.perf_counter() - start
    where = "stdout" if args.output is None else args.output
    print(
        f"tokenized {counted(lines, 'line')} ({counted(tokens, 'token')}) -> {where} {took(seconds, lines, 'lines')}",
        file=sys.stderr,
    )
    return 0
