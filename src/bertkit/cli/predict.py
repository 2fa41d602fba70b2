"""``bertkit predict``: run a model saved by ``bertkit finetune`` over a file.

Input: the task's own format, or for classification and regression models any CSV/TSV/JSONL
holding the text field(s) (``text``/``text_pair``, ``sentence1``/``sentence2``, the GLUE task's
column names, or the columns the model was trained with), whatever format it was trained from.

Output: JSON lines, one per example (classification: guid, label, probabilities; regression:
guid, score; tagging: tokens, tags; multiple choice: guid, label, probabilities). For SQuAD the
output is the official ``predictions.json`` (``{"question id": "answer text"}``, "" = no answer
under v2.0, decided with the null threshold saved at fine-tuning time).
"""

from __future__ import annotations

import argparse
import json
import sys

from bertkit.cli import options

HELP = "predict with a fine-tuned model: JSONL, or SQuAD predictions.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_model(parser, "folder written by `bertkit finetune`")
    parser.add_argument(
        "--input",
        required=True,
        help="data file in the task's format, or CSV/TSV/JSONL text fields",
    )
    parser.add_argument("--output", required=True, help="JSONL file (SQuAD: predictions.json)")
    parser.add_argument(
        "--split", default="test", help="GLUE folder split when --input is a folder"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    options.add_windows(parser, saved=True)
    options.add_precision(parser, inference=True)
    options.add_device(parser)
    options.add_allow_pickle(parser)
    options.add_split_special_tokens(parser)


def run(args: argparse.Namespace) -> int:
    from bertkit.inference import TaskModel
    from bertkit.io import atomic_write

    model = TaskModel.load(args.model, device=args.device, precision=args.precision,
                           batch_size=args.batch_size, allow_pickle=args.allow_pickle,
                           split_special_tokens=args.split_special_tokens)  # fmt: skip
    model = model.with_windows(**options.window_values(args))
    scored = model.predict_file(args.input, args.split)
    if scored.windows is not None:
        print(f"long inputs: {scored.windows.summary()}", file=sys.stderr)
    with atomic_write(args.output) as f:
        if model.adapter.family == "squad":
            json.dump(
                {p["id"]: p["answer"] for p in scored.predictions}, f, indent=2, ensure_ascii=False
            )
            f.write("\n")
        else:
            for p in scored.predictions:
                f.write(json.dumps(p, ensure_ascii=False) + "\n")
    print(f"wrote {len(scored.predictions)} predictions to {args.output}", file=sys.stderr)
    return 0
