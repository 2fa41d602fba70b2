"""``bertkit finetune {glue,ner,squad,swag,classify,tag}``: fine-tune a checkpoint on a task.

Examples::

    bertkit finetune glue --task RTE --data-dir glue_data --model M --output out/rte
    bertkit finetune glue --task MRPC --data-dir glue_data --model M --output out/mrpc \\
        --learning-rate 5e-5 4e-5 3e-5 2e-5 --restarts 3
    bertkit finetune squad --train train-v2.0.json --dev dev-v2.0.json --version-2-with-negative ...
    bertkit finetune classify --train a.csv --dev b.csv --text-column review --label-column stars ...

OUTPUT receives the selected model (config.json, model.safetensors, vocab.txt,
bertkit_task.json) and metrics.json (every run's lr, seed and dev score, mean and spread,
the selected run).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

HELP = "fine-tune a BERT checkpoint on GLUE, NER, SQuAD, SWAG or your own CSV/JSONL data"

FAMILIES = {
    "glue": "a GLUE task, from a folder laid out like the official download",
    "ner": "named-entity tagging on CoNLL column files (BIO/IOB1/IOB2)",
    "squad": "extractive QA on SQuAD v1.1 / v2.0 JSON",
    "swag": "multiple choice on SWAG-format CSV",
    "classify": "text or text-pair classification (or regression) on your CSV/TSV/JSONL",
    "tag": "token tagging on your CSV/TSV/JSONL (token and tag lists)",
}


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and run")
    g.add_argument("--model", required=True, help="bertkit or Hugging Face checkpoint folder")
    g.add_argument("--output", required=True, help="folder for the selected model and metrics.json")
    g.add_argument(
        "--learning-rate",
        type=float,
        nargs="+",
        default=[5e-5],
        metavar="LR",
        help="peak learning rate(s); several values are each tried and the best on dev kept (default 5e-5)",
    )
    g.add_argument(
        "--restarts",
        type=int,
        default=1,
        help="runs per learning rate, with seeds SEED, SEED+1, ...",
    )
    g.add_argument("--epochs", type=int, default=3)
    g.add_argument("--batch-size", type=int, default=32)
    g.add_argument("--max-seq-length", type=int, default=None, help="default 128 (384 for squad)")
    g.add_argument("--seed", type=int, default=42)
    g.add_argument(
        "--max-steps", type=int, default=None, help="cap optimizer updates per run (smoke runs)"
    )
    g.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    g.add_argument("--warmup-proportion", type=float, default=0.1)
    g.add_argument("--weight-decay", type=float, default=0.01)
    g.add_argument("--dropout", type=float, default=0.1, help="encoder and head dropout")
    g.add_argument("--eval-batch-size", type=int, default=64)
    g.add_argument(
        "--bucket-batches",
        type=int,
        default=1,
        help="length-bucket training batches within chunks of N batches (default 1: random)",
    )
    g.add_argument(
        "--max-train-examples",
        type=int,
        default=None,
        help="use only the first N training examples",
    )
    g.add_argument(
        "--allow-pickle", action="store_true", help="permit pytorch_model.bin checkpoints"
    )
    g.add_argument("--device", default="cpu")  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="family", metavar="FAMILY", required=True)
    parsers = {
        name: sub.add_parser(name, help=text, description=text) for name, text in FAMILIES.items()
    }
    for name, p in parsers.items():
        if name == "glue":
            p.add_argument(
                "--task",
                required=True,
                help="CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE or WNLI",
            )
            p.add_argument(
                "--data-dir", required=True, help="GLUE root (holding TASK/) or the task folder"
            )
        else:
            p.add_argument("--train", required=True, help="training file")
            p.add_argument(
                "--dev", required=True, help="dev file (scored each epoch, used for selection)"
            )
        _common(p)
    parsers["ner"].add_argument(
        "--tag-column", type=int, default=-1, help="column of the tag (default: last)"
    )
    parsers["ner"].add_argument(
        "--scheme", default="auto", help="tag scheme of the files: auto, IOB1, IOB2/BIO, IOBES"
    )
    q = parsers["squad"]
    q.add_argument(
        "--version-2-with-negative",
        action="store_true",
        help="SQuAD v2.0: questions may have no answer",
    )
    q.add_argument("--doc-stride", type=int, default=128)
    q.add_argument("--max-query-length", type=int, default=64)
    q.add_argument("--n-best-size", type=int, default=20)
    q.add_argument("--max-answer-length", type=int, default=30)
    c = parsers["classify"]
    c.add_argument("--text-column", required=True)
    c.add_argument("--text-pair-column", default=None)
    c.add_argument("--label-column", default="label")
    c.add_argument(
        "--regression", action="store_true", help="float labels, MSE loss, Pearson/Spearman"
    )
    c.add_argument(
        "--format",
        choices=("csv", "tsv", "jsonl"),
        default=None,
        help="default: from the extension",
    )
    t = parsers["tag"]
    t.add_argument("--tokens-field", default="tokens")
    t.add_argument("--tags-field", default="tags")
    t.add_argument("--format", choices=("csv", "tsv", "jsonl"), default=None)


def build_task(args: argparse.Namespace) -> tuple[Any, list[Any], dict[str, list[Any]]]:
    """The adapter, training examples and dev sets (name -> examples) the arguments describe."""
    from bertkit.training import tasks_runtime as R

    fam = args.family
    msl = args.max_seq_length or (384 if fam == "squad" else 128)
    if fam == "glue":
        from bertkit.data.tasks.glue import glue_task, read_glue_split

        task = glue_task(args.task)
        adapter: R.TaskAdapter = R.ClassificationAdapter(
            "glue", task.name, msl, labels=list(task.labels or []), metric=task.metric
        )
        train = read_glue_split(args.data_dir, task, "train")
        dev = {s: read_glue_split(args.data_dir, task, s) for s in task.dev_splits}
        return adapter, train, dev
    if fam == "classify":
        from bertkit.data.tasks.custom import read_classification

        cols = {
            "text": args.text_column,
            "text_pair": args.text_pair_column,
            "label": args.label_column,
        }
        data = read_classification(args.train, text=cols["text"], text_pair=cols["text_pair"],
                                   label=cols["label"], regression=args.regression, format=args.format)  # fmt: skip
        metric = (
            "pearson_spearman"
            if args.regression
            else ("accuracy_f1" if len(data.labels) == 2 else "accuracy")
        )
        adapter = R.ClassificationAdapter("classify", Path(args.train).stem, msl, labels=data.labels,
                                          metric=metric, columns=cols, file_format=args.format)  # fmt: skip
        return adapter, data.examples, {"dev": adapter.read(args.dev)}
    if fam in ("ner", "tag"):
        cols = (
            {"tag_column": args.tag_column, "scheme": args.scheme}
            if fam == "ner"
            else {"tokens": args.tokens_field, "tags": args.tags_field}
        )
        adapter = R.TaggingAdapter(
            fam, Path(args.train).stem, msl, columns=cols, file_format=getattr(args, "format", None)
        )
        train = adapter.read(args.train)
        adapter.labels = R.tag_label_list(train)
        return adapter, train, {"dev": adapter.read(args.dev)}
    if fam == "swag":
        adapter = R.MultipleChoiceAdapter("swag", "swag", msl)
        return adapter, adapter.read(args.train), {"dev": adapter.read(args.dev)}
    adapter = R.SquadAdapter(
        "squad", "squad2" if args.version_2_with_negative else "squad1", msl,
        version_2=args.version_2_with_negative, doc_stride=args.doc_stride,
        max_query_length=args.max_query_length, n_best_size=args.n_best_size,
        max_answer_length=args.max_answer_length,
    )  # fmt: skip
    return adapter, adapter.read(args.train), {"dev": adapter.read(args.dev)}


def run(args: argparse.Namespace) -> int:
    import torch

    from bertkit import hardware
    from bertkit.interop import load_pretrained
    from bertkit.io import atomic_write_text
    from bertkit.tokenizer import BertTokenizer
    from bertkit.training.finetune import FinetuneConfig, TaskData, finetune

    config = FinetuneConfig(
        learning_rates=tuple(args.learning_rate), restarts=args.restarts, epochs=args.epochs,
        batch_size=args.batch_size, warmup_proportion=args.warmup_proportion,
        weight_decay=args.weight_decay, dropout=args.dropout, seed=args.seed,
        max_steps=args.max_steps, precision=args.precision, eval_batch_size=args.eval_batch_size,
        bucket_batches=args.bucket_batches,
    )  # fmt: skip
    adapter, train, dev = build_task(args)
    if args.max_train_examples is not None:
        train = train[: args.max_train_examples]
    tokenizer = BertTokenizer.from_pretrained(args.model)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    train_features = adapter.encode(tokenizer, train, training=True)
    dev_sets = {
        name: (ex, adapter.encode(tokenizer, ex, training=False)) for name, ex in dev.items()
    }
    log(f"{args.family} {adapter.name}: {len(train)} training examples ({len(train_features)} features), "
        + ", ".join(f"{k} {len(v[0])}" for k, v in dev_sets.items()))  # fmt: skip
    overrides = dict(adapter.config_overrides())
    if config.dropout is not None:
        overrides.update(
            hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout
        )

    def build_model() -> torch.nn.Module:
        return load_pretrained(
            args.model, adapter.head_class, allow_pickle=args.allow_pickle, **overrides
        )

    output = Path(args.output)
    result = finetune(build_model, adapter, TaskData(train_features, dev_sets), tokenizer, output, config,
                      log=log, device=hardware.resolve_device(args.device))  # fmt: skip
    metrics = {
        "task": {"family": args.family, "name": adapter.name},
        "model": str(args.model),
        "train_examples": len(train),
        "config": {**asdict(config), "learning_rates": list(config.learning_rates)},
        # what this machine ran: bf16 without native support runs fp32 (bertkit.hardware)
        "precision_run": hardware.resolve_precision(config.precision, args.device),
        "hardware": {k: d.choice for k, d in hardware.decisions().items()},
        **result.to_dict(),
    }
    atomic_write_text(output / "metrics.json", json.dumps(metrics, indent=2, default=float) + "\n")
    log(f"wrote the selected model and metrics.json to {output}")
    return 0
