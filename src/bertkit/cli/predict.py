"""``bertkit predict``: run a model saved by ``bertkit finetune`` over a file.

Output: JSON lines, one per example (classification: guid, label, probabilities; regression:
guid, score; tagging: tokens, tags; multiple choice: guid, label, probabilities). For SQuAD the
output is the official ``predictions.json`` (``{"question id": "answer text"}``, "" = no answer
under v2.0, decided with the null threshold saved at fine-tuning time).
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "predict with a fine-tuned model: JSONL, or SQuAD predictions.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="folder written by `bertkit finetune`")
    parser.add_argument(
        "--input", required=True, help="data file in the task's format (labels not needed*)"
    )
    parser.add_argument("--output", required=True, help="JSONL file (SQuAD: predictions.json)")
    parser.add_argument(
        "--split", default="test", help="GLUE folder split when --input is a folder"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--device", default="cpu")


def run(args: argparse.Namespace) -> int:
    from bertkit.cli.evaluate import load_for_inference
    from bertkit.io import atomic_write
    from bertkit.training.finetune import predict_rows

    adapter, tokenizer, model = load_for_inference(args.model, args.device)
    examples = adapter.read(args.input, args.split)
    feats = adapter.encode(tokenizer, examples, training=False)
    rows = predict_rows(model, adapter, feats, pad_id=tokenizer.pad_token_id, batch_size=args.batch_size,
                        precision=args.precision)  # fmt: skip
    scored = adapter.score(examples, feats, rows)
    with atomic_write(args.output) as f:
        if adapter.family == "squad":
            json.dump(
                {p["id"]: p["answer"] for p in scored.predictions}, f, indent=2, ensure_ascii=False
            )
            f.write("\n")
        else:
            for p in scored.predictions:
                f.write(json.dumps(p, ensure_ascii=False) + "\n")
    print(f"wrote {len(scored.predictions)} predictions to {args.output}", file=sys.stderr)
    return 0
