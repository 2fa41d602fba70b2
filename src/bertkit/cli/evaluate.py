"""``bertkit evaluate``: score a model saved by ``bertkit finetune`` on a labelled file.

The task (reader, labels, windows, SQuAD v2.0 null threshold) comes from the model folder's
``bertkit_task.json``, so only the data is named::

    bertkit evaluate --model out/mrpc --data glue_data            # GLUE layout, dev split
    bertkit evaluate --model out/ner --data test.txt --output test_metrics.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HELP = "score a fine-tuned model on a labelled file with the task's official metric"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="folder written by `bertkit finetune`")
    parser.add_argument("--data", required=True, help="data file (GLUE: a file or the GLUE folder)")
    parser.add_argument(
        "--split", default="dev", help="GLUE folder split (dev, dev_mismatched, train ...)"
    )
    parser.add_argument("--output", default=None, help="also write the metrics to this JSON file")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--device", default="cpu")


def load_for_inference(model_dir: str | Path, device: str = "cpu") -> tuple[Any, Any, Any]:
    """(adapter, tokenizer, model) of a fine-tuned model folder."""
    from bertkit import hardware
    from bertkit.interop import load_pretrained
    from bertkit.tokenizer import BertTokenizer
    from bertkit.training.tasks_runtime import load_adapter

    adapter = load_adapter(model_dir)
    tokenizer = BertTokenizer.from_pretrained(model_dir)
    model = load_pretrained(model_dir, adapter.head_class).to(hardware.resolve_device(device))
    return adapter, tokenizer, model


def score_file(model_dir: str | Path, data: str | Path, split: str = "dev", *, batch_size: int = 64,
               precision: str = "fp32", device: str = "cpu") -> Any:  # fmt: skip
    """Read ``data`` with the saved task's reader, predict and score: a ``Scored``."""
    from bertkit.training.finetune import predict_rows

    adapter, tokenizer, model = load_for_inference(model_dir, device)
    examples = adapter.read(data, split)
    feats = adapter.encode(tokenizer, examples, training=False)
    rows = predict_rows(model, adapter, feats, pad_id=tokenizer.pad_token_id, batch_size=batch_size,
                        precision=precision)  # fmt: skip
    return adapter.score(examples, feats, rows)


def run(args: argparse.Namespace) -> int:
    from bertkit.errors import InputError
    from bertkit.io import atomic_write_text

    scored = score_file(args.model, args.data, args.split, batch_size=args.batch_size,
                        precision=args.precision, device=args.device)  # fmt: skip
    if not scored.metrics:
        raise InputError(
            args.data,
            None,
            "expected labelled data to score (use `bertkit predict` for unlabelled data)",
        )
    text = json.dumps(scored.metrics, indent=2, default=float)
    print(text)
    if args.output:
        atomic_write_text(args.output, text + "\n")
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
