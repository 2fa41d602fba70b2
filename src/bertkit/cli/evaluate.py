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

from bertkit.cli import options

HELP = "score a fine-tuned model on a labelled file with the task's official metric"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_model(parser, "folder written by `bertkit finetune`")
    parser.add_argument(
        "--data", required=True, help="data file (GLUE: a file or the GLUE folder; any model: "
        "CSV/TSV/JSONL with the text fields and a label)"
    )  # fmt: skip
    parser.add_argument(
        "--split", default="dev", help="GLUE folder split (dev, dev_mismatched, train ...)"
    )
    parser.add_argument("--output", default=None, help="also write the metrics to this JSON file")
    parser.add_argument("--batch-size", type=int, default=64)
    options.add_windows(parser, saved=True)
    options.add_precision(parser, inference=True)
    options.add_device(parser)
    options.add_allow_pickle(parser)
    options.add_split_special_tokens(parser)


def run(args: argparse.Namespace) -> int:
    from bertkit.errors import InputError
    from bertkit.inference import TaskModel
    from bertkit.io import atomic_write_text

    model = TaskModel.load(args.model, device=args.device, precision=args.precision,
                           batch_size=args.batch_size, allow_pickle=args.allow_pickle,
                           split_special_tokens=args.split_special_tokens)  # fmt: skip
    model = model.with_windows(**options.window_values(args))
    scored = model.score_file(args.data, args.split)
    if scored.windows is not None:
        print(f"long inputs: {scored.windows.summary()}", file=sys.stderr)
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
