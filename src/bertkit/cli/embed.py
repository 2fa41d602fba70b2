"""`bertkit embed`: one vector per input line from a bertkit or Hugging Face checkpoint.

Lines longer than the model's limit are read in windows (``--truncate`` cuts them instead);
``--layers``/``--layer-combine`` pick the hidden layers (the paper's feature-based approach) and
``--per-token`` writes one vector per word piece with its character offsets (``.npy`` plus a
``.jsonl`` index beside it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bertkit.cli import options

HELP = "embed lines (stdin or --input) into vectors (.npy or .jsonl) with a BERT checkpoint"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        type=Path,
        required=True,
        help="checkpoint directory (config.json, weights, vocab.txt)",
    )
    p.add_argument(
        "--input", type=Path, default=None, help="text file, one item per line (default: stdin)"
    )
    p.add_argument(
        "--output", type=Path, required=True, help="vectors: .npy (float32 N x H) or .jsonl"
    )
    p.add_argument(
        "--pooling",
        choices=("cls", "mean", "max"),
        default=None,
        help="token vectors -> one vector (default: the folder's sentence-transformers pooling, else mean)",
    )
    p.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="L2-normalise every vector (default: as the folder's sentence-transformers config says, else no)",
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="tokens per window (default: the folder's max_seq_length, else the model's limit)",
    )
    # long inputs and the feature-based approach (issue 16)
    from bertkit.inference.embedder import LayerSpec

    options.add_windows(p)
    options.add_fields(p, LayerSpec, ("layers", "layer_combine"),
                       choices={"layer_combine": ("concat", "sum", "mean")})  # fmt: skip
    p.add_argument("--per-token", action="store_true",
                   help="one vector per word piece (.npy) and a .jsonl index of pieces and offsets")  # fmt: skip
    options.add_precision(p, inference=True)
    p.add_argument(
        "--bf16",
        dest="precision",
        action="store_const",
        const="bf16",
        help="deprecated alias of --precision bf16",
    )
    options.add_device(p)
    options.add_allow_pickle(p)
    options.add_split_special_tokens(p)
    p.add_argument("--encoding-errors", choices=("strict", "replace"), default="strict")


def _read_lines(path: Path | None, errors: str) -> list[str]:
    from bertkit.io import read_text_lines

    if path is None:
        return [line.rstrip("\r\n") for line in sys.stdin]
    return [line for _, line in read_text_lines(path, errors=errors)]


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from bertkit.errors import InputError
    from bertkit.inference import Embedder
    from bertkit.inference.embedder import LayerSpec, save_token_features
    from bertkit.io import atomic_write
    from bertkit.tasks.windows import WindowConfig

    suffix = args.output.suffix.lower()
    if suffix not in (".npy", ".jsonl"):
        raise InputError(args.output, None, "output must end in .npy or .jsonl")
    if args.per_token and suffix != ".npy":
        raise InputError(
            args.output, None, "--per-token writes .npy (and a .jsonl index beside it)"
        )
    embedder = Embedder.load(args.model, pooling=args.pooling, normalize=args.normalize,
                             max_length=args.max_length, device=args.device, precision=args.precision,
                             batch_size=args.batch_size, allow_pickle=args.allow_pickle,
                             split_special_tokens=args.split_special_tokens,
                             windows=options.values(args, WindowConfig, options.WINDOW_FIELDS),
                             layers=options.values(args, LayerSpec))  # fmt: skip
    texts = _read_lines(args.input, args.encoding_errors)
    start = time.perf_counter()
    if args.per_token:
        feats, counts = embedder.token_features(texts)
        index = save_token_features(args.output, feats)
        print(f"embedded {len(texts)} lines -> {args.output} ({sum(len(f.tokens) for f in feats)} pieces x "
              f"{embedder.dim}) and {index}; long inputs: {counts.summary('lines')}", file=sys.stderr)  # fmt: skip
        return 0
    vectors, counts = embedder.embed(texts)
    with atomic_write(args.output, "wb" if suffix == ".npy" else "w") as f:
        if suffix == ".npy":
            np.save(f, vectors)
        else:
            for n, vec in enumerate(vectors, start=1):
                f.write(json.dumps({"line": n, "embedding": [float(x) for x in vec]}) + "\n")
    seconds = time.perf_counter() - start
    spec = embedder.spec
    print(
        f"embedded {len(texts)} lines -> {args.output} ({len(texts)} x {embedder.dim}, {spec.pooling} pooling"
        f"{', normalised' if spec.normalize else ''}, {embedder.precision}; "
        f"{len(texts) / max(seconds, 1e-9):.1f} lines/s); long inputs: {counts.summary('lines')}",
        file=sys.stderr,
    )
    return 0
