"""`bertkit fill-mask`: the most likely tokens for each [MASK] in each input line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bertkit.cli import options
from bertkit.progress import counted, took

HELP = "print the top-k tokens and probabilities for every [MASK] in each text"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.inference.fill_mask import FillMasker

    options.add_model(p, "checkpoint folder with an MLM head")
    p.add_argument(
        "texts", nargs="*", help="texts containing [MASK] (default: lines of --input or stdin)"
    )
    p.add_argument("--input", type=Path, default=None, help="text file, one item per line")
    p.add_argument("--top-k", type=int, default=5, help="tokens shown per [MASK] (default 5)")
    options.add_batch_size(p, FillMasker)
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    options.add_precision(p, inference=True)
    options.add_device(p)
    options.add_allow_pickle(p)


def run(args: argparse.Namespace) -> int:
    from bertkit.errors import ConfigError, InputError
    from bertkit.inference import FillMasker
    from bertkit.inference.fill_mask import MaskCutError
    from bertkit.io import read_input_lines

    if args.top_k < 1:
        raise ConfigError(f"--top-k must be >= 1, got {args.top_k}")  # a flag: no "<input>:"
    masker = FillMasker.load(
        args.model,
        device=args.device,
        precision=args.precision,
        batch_size=args.batch_size,
        allow_pickle=args.allow_pickle,
    )
    if args.texts:
        texts = list(args.texts)
    else:
        texts = [line for _, line in read_input_lines(args.input)]
    start = time.perf_counter()
    try:
        results = masker(texts, args.top_k)
    except MaskCutError as e:  # the text's line (or its place among the arguments)
        if args.texts:  # no file: "text 2 of the arguments", not "<input>:2"
            raise ConfigError(f"text {e.line} of the arguments: {e.message}") from None
        raise InputError(args.input or "<stdin>", e.line, e.message) from None
    seconds = time.perf_counter() - start
    missing = sum(1 for r in results if not r)
    for text, masks in zip(texts, results):
        if args.json:
            obj = {"text": text, "masks": [[{"token": t, "score": s} for t, s in m] for m in masks]}
            print(json.dumps(obj, ensure_ascii=False))
            continue
        print(text)
        for n, m in enumerate(masks, start=1):
            print(f"  [MASK] {n}: " + "  ".join(f"{t} {s:.4f}" for t, s in m))
    print(
        f"filled masks in {len(texts) - missing} of {counted(len(texts), 'text')}"
        + (f" ({missing} had no [MASK])" if missing else "")
        + f", {masker.precision}"  # --precision auto can be bf16: scores differ from fp32's
        + f" {took(seconds, len(texts), 'texts')}",
        file=sys.stderr,
    )
    return 0
