"""`bertkit fill-mask`: the most likely tokens for each [MASK] in each input line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "print the top-k tokens and probabilities for every [MASK] in each text"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", type=Path, required=True, help="checkpoint directory with an MLM head"
    )
    p.add_argument(
        "texts", nargs="*", help="texts containing [MASK] (default: lines of --input or stdin)"
    )
    p.add_argument("--input", type=Path, default=None, help="text file, one item per line")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="permit pytorch_model.bin (torch.load weights_only)",
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from bertkit.errors import CheckpointError, InputError
    from bertkit.interop import load_with_report
    from bertkit.io import read_text_lines
    from bertkit.model import BertForMaskedLM
    from bertkit.model.batching import collate, length_batches
    from bertkit.progress import progress
    from bertkit.tokenizer import BertTokenizer

    if args.top_k < 1:
        raise InputError(None, None, "--top-k must be >= 1")
    model, report = load_with_report(args.model, BertForMaskedLM, allow_pickle=args.allow_pickle)
    if any(k.startswith("mlm.") for k in report.missing):
        raise CheckpointError(
            f"{args.model}: the checkpoint has no masked-LM head weights (cls.predictions.*)"
        )
    tok = BertTokenizer.from_pretrained(args.model)
    if args.texts:
        texts = list(args.texts)
    elif args.input is not None:
        texts = [line for _, line in read_text_lines(args.input)]
    else:
        texts = [line.rstrip("\r\n") for line in sys.stdin]
    limit = model.config.max_position_embeddings
    encodings = tok.encode_batch(texts, max_length=limit)
    results: list[list[list[tuple[str, float]]]] = [[] for _ in texts]
    k = min(args.top_k, model.config.vocab_size)
    batches = length_batches([len(e.input_ids) for e in encodings], args.batch_size)
    with torch.inference_mode():
        for idx in progress(batches, desc="fill-mask", unit="batch"):
            batch = collate([encodings[i].input_ids for i in idx], None, tok.pad_token_id or 0)
            is_mask = batch["input_ids"] == tok.mask_token_id  # (B, T)
            if not bool(is_mask.any()):
                continue
            hidden = model.bert(**batch).last_hidden_state[is_mask]  # (M, H) masked rows only
            probs = model.mlm(hidden, model.bert.embeddings.word.weight).softmax(-1)
            top = probs.topk(k, dim=-1)
            rows = is_mask.nonzero()[:, 0].tolist()
            for r, p, i in zip(rows, top.values.tolist(), top.indices.tolist()):
                results[idx[r]].append(list(zip(tok.convert_ids_to_tokens(i), p)))
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
        f"filled masks in {len(texts) - missing} of {len(texts)} texts"
        + (f" ({missing} had no [MASK])" if missing else ""),
        file=sys.stderr,
    )
    return 0
