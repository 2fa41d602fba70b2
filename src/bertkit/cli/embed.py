"""`bertkit embed`: one vector per input line from a bertkit or Hugging Face checkpoint."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

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
        "--pooling", choices=("cls", "mean"), default="mean", help="token vectors -> one vector"
    )
    p.add_argument("--normalize", action="store_true", help="L2-normalise every vector")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="truncate to N tokens (default: the model's limit)",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="bf16: bfloat16 autocast where the CPU runs it natively (else fp32, with a notice)",
    )
    p.add_argument(
        "--bf16", dest="precision", action="store_const", const="bf16", help="--precision bf16"
    )
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="permit pytorch_model.bin (torch.load weights_only)",
    )
    p.add_argument("--encoding-errors", choices=("strict", "replace"), default="strict")


def _read_lines(path: Path | None, errors: str) -> list[str]:
    from bertkit.io import read_text_lines

    if path is None:
        return [line.rstrip("\r\n") for line in sys.stdin]
    return [line for _, line in read_text_lines(path, errors=errors)]


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from bertkit import hardware
    from bertkit.errors import InputError
    from bertkit.interop import load_with_report
    from bertkit.io import atomic_write
    from bertkit.model.batching import collate, length_batches
    from bertkit.model.pooling import pool
    from bertkit.progress import progress
    from bertkit.tokenizer import BertTokenizer

    suffix = args.output.suffix.lower()
    if suffix not in (".npy", ".jsonl"):
        raise InputError(args.output, None, "output must end in .npy or .jsonl")
    if args.batch_size < 1:
        raise InputError(None, None, "--batch-size must be >= 1")
    model, _ = load_with_report(args.model, "BertModel", allow_pickle=args.allow_pickle)
    tok = BertTokenizer.from_pretrained(args.model)
    texts = _read_lines(args.input, args.encoding_errors)
    limit = min(args.max_length or 512, model.config.max_position_embeddings)
    start = time.perf_counter()
    encodings = tok.encode_batch(texts, max_length=limit)
    dim = model.config.hidden_size
    vectors = np.zeros((len(texts), dim), dtype=np.float32)
    batches = length_batches([len(e.input_ids) for e in encodings], args.batch_size)
    with torch.inference_mode(), hardware.autocast(args.precision, "cpu"):
        for idx in progress(batches, desc="embed", unit="batch"):
            batch = collate(
                [encodings[i].input_ids for i in idx],
                [encodings[i].token_type_ids for i in idx],
                tok.pad_token_id or 0,
            )
            hidden = model(**batch).last_hidden_state
            out = pool(hidden.float(), batch["attention_mask"], args.pooling, args.normalize)
            vectors[idx] = out.numpy()
    with atomic_write(args.output, "wb" if suffix == ".npy" else "w") as f:
        if suffix == ".npy":
            np.save(f, vectors)
        else:
            for n, vec in enumerate(vectors, start=1):
                f.write(json.dumps({"line": n, "embedding": [float(x) for x in vec]}) + "\n")
    seconds = time.perf_counter() - start
    print(
        f"embedded {len(texts)} lines -> {args.output} ({len(texts)} x {dim}, {args.pooling} pooling"
        f"{', normalised' if args.normalize else ''}; {len(texts) / max(seconds, 1e-9):.1f} lines/s)",
        file=sys.stderr,
    )
    return 0
