"""``bertkit predict``: run a model saved by ``bertkit finetune`` over a file.

Input: the task's own format, or for classification and regression models any CSV/TSV/JSONL
holding the text field(s) (``text``/``text_pair``, ``sentence1``/``sentence2``, the GLUE task's
column names, or the columns the model was trained with), whatever format it was trained from.

Output: JSON lines, one per example (classification: guid, label, probabilities, logits; regression:
guid, score; tagging: tokens, tags; multiple choice: guid, label, probabilities). For SQuAD the
output is the official ``predictions.json`` (``{"question id": "answer text"}``, "" = no answer
under v2.0, decided with the null threshold saved at fine-tuning time). A ``.tsv`` output of a
classifier or regressor is the GLUE benchmark's submission file (``index``, ``prediction``;
:mod:`bertkit.inference.prediction_files`).

A folder ``--output`` (``DIR/``, an existing folder or a name without suffix) gets the same JSON
lines as shards plus ``manifest.json``, computed one window of ``--sort-window`` examples at a
time, resumable after a crash and shared between torchrun ranks
(:func:`bertkit.inference.prediction_corpus.predict_to`).
"""

from __future__ import annotations

import argparse
import sys
import time

from bertkit.cli import options
from bertkit.progress import took

HELP = "predict with a fine-tuned model: JSONL, or SQuAD predictions.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bertkit.inference.task_model import TaskModel

    options.add_model(parser, "folder written by `bertkit finetune`")
    parser.add_argument(
        "--input",
        required=True,
        help="data file in the task's format, or CSV/TSV/JSONL text fields",
    )
    parser.add_argument(
        "--output",
        required=True,
        help="JSONL file (SQuAD: predictions.json, or JSON lines with spans for .jsonl; .tsv: "
        "a GLUE submission file of a classifier or regressor: index, prediction; .csv: the same "
        "with commas); a folder (DIR/, an existing folder or a name without suffix): JSONL "
        "shards + manifest.json, resumable",
    )
    parser.add_argument(
        "--split", default="test", help="GLUE folder split when --input is a folder"
    )
    options.add_batch_size(parser, TaskModel)
    options.add_windows(parser, length="the model's max_seq_length", saved=True)
    options.add_streaming(parser)  # folder output only
    options.add_precision(parser, inference=True)
    options.add_device(parser)
    options.add_allow_pickle(parser)
    options.add_split_special_tokens(parser)


def _load(args: argparse.Namespace, device: str | None):
    from bertkit.inference import TaskModel

    model = TaskModel.load(
        args.model,
        device=device,
        precision=args.precision,
        batch_size=args.batch_size,
        allow_pickle=args.allow_pickle,
        split_special_tokens=args.split_special_tokens,
    )
    return model.with_windows(**options.window_values(args))


def _run_folder(args: argparse.Namespace) -> int:
    """Shards + manifest in the folder ``args.output``; under torchrun every rank predicts its
    share of the windows (rank 0's kernel choices); alone, the group is a no-op."""
    from bertkit.inference.sharded import file_size
    from bertkit.training import distributed as D

    info = D.init_from_env(args.device)
    with D.reported(info):
        options.resume_precision(args)
        model = _load(args, info.device)
        examples = model.iter_read(args.input, args.split)  # parsed as windows are pulled
        size = file_size(args.input)
        source = {"path": str(args.input), "size": size, "split": args.split}
        summary = model.predict_to(
            examples,
            args.output,
            config=options.streaming_values(args),
            source=source,
            total=None if size is None else model.adapter.count_examples(args.input),
            show_progress=None if info.is_main else False,
            rank=info.rank,
            world=info.world_size,
            barrier=lambda: D.barrier(info),
        )
    who = f"rank {info.rank}/{info.world_size}: " if info.distributed else ""
    print(
        f"{who}{summary.line(args.output, 'predicted', 'example')}; long inputs: "
        f"{summary.counts.summary('example')}",
        file=sys.stderr,
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from bertkit.inference.prediction_files import write_predictions

    if options.is_folder_output(args.output):
        return _run_folder(args)
    model = _load(args, args.device)
    start = time.perf_counter()
    scored = model.predict_file(args.input, args.split)
    if scored.windows is not None:
        print(f"long inputs: {scored.windows.summary()}", file=sys.stderr)
    write_predictions(args.output, model.adapter.family, scored.predictions)
    n, seconds = len(scored.predictions), time.perf_counter() - start
    print(
        f"wrote {n} predictions to {args.output} ({model.precision}) "
        f"{took(seconds, n, 'examples')}",
        file=sys.stderr,
    )
    return 0
