"""``bertkit finetune {glue,ner,squad,swag,classify,tag,embeddings,rerank,sparse}``: fine-tune a checkpoint on a task.

Examples::

    bertkit finetune glue --task RTE --data-dir glue_data --model M --output out/rte
    bertkit finetune glue --task MRPC --data-dir glue_data --model M --output out/mrpc \\
        --learning-rate 5e-5 4e-5 3e-5 2e-5 --restarts 3
    bertkit finetune squad --train train-v2.0.json --dev dev-v2.0.json --version-2-with-negative ...
    bertkit finetune classify --train a.csv --dev b.csv --text-column review --label-column stars ...
    bertkit finetune sparse --model MLM_FOLDER --train triples.jsonl --dev beir_folder \\
        --output out/splade --query-regularizer-weight 5e-5 --document-regularizer-weight 3e-5
    bertkit finetune glue --task SST-2 --data-dir glue_data --model SMALL --output student \\
        --teacher out/sst2-base --distill-alpha 0.5 --distill-temperature 2

OUTPUT receives the selected model (config.json, model.safetensors, vocab.txt, tokenizer.json,
bertkit_task.json) and metrics.json (every run's lr, seed and dev score, mean and spread,
the selected run). Run options come from :class:`bertkit.training.finetune.FinetuneConfig`,
task options from :class:`bertkit.tasks.TaskSettings` and the SQuAD window/search configs; the
job is :func:`bertkit.recipes.finetune.run_finetune`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.cli import options

HELP = "fine-tune a BERT checkpoint on GLUE, NER, SQuAD, SWAG or your own CSV/JSONL data"

_RUN_FIELDS = (
    "learning_rates",
    "restarts",
    "epochs",
    "batch_size",
    "grad_accum",
    "seed",
    "max_steps",
    "warmup_proportion",
    "weight_decay",
    "layerwise_lr_decay",
    "dropout",
    "eval_batch_size",
    "bucket_batches",
    "minutes",
)
_WINDOWED = ("glue", "classify", "ner", "tag")
"""The families with the long-input flags; squad has its own --doc-stride, swag truncates (and
counts the inputs it cuts)."""
_DISTILLED = ("glue", "classify", "ner", "tag")
"""The families that take a teacher (:mod:`bertkit.training.distill`)."""
_DISTILL_FIELDS = ("distill_alpha", "distill_temperature")
_FAMILY_FIELDS = {
    "ner": ("tag_column", "scheme", "document_context"),
    "tag": ("tokens_field", "tags_field", "format"),
    "classify": ("text_column", "text_pair_column", "label_column", "regression", "format"),
    "squad": ("version_2_with_negative",),
    "embeddings": (
        "pooling",
        "normalize",
        "scale",
        "similarity_fn_name",
        "symmetric",
        "matryoshka_dims",
        "mini_batch_size",
        "loss",
        "temperature",
        "student_temperature",
        "teacher_temperature",
        "pair_kind",
        "query_prompt",
        "document_prompt",
        "format",
    ),
    "rerank": ("loss", "in_batch_negatives", "format"),
    "sparse": (
        "pooling_strategy",
        "activation_function",
        "query_regularizer_weight",
        "document_regularizer_weight",
        "mini_batch_size",
        "query_prompt",
        "document_prompt",
        "format",
    ),
}

_TRAIN_HELP = {
    "embeddings": (
        "pairs/triples (JSONL, CSV or TSV: query, positive[, negative ...]) "
        "or a BEIR folder (qrels/train.tsv)"
    ),
    "rerank": (
        "labelled pairs (query, passage, label in [0, 1]) or triples / n-tuples (query, "
        "positive, negative ...) (JSONL, CSV or TSV); --loss ranking / listnet: n-tuples or listwise "
        "JSONL (query, docs, labels)"
    ),
}
_TRAIN_HELP["sparse"] = _TRAIN_HELP["embeddings"]
_DEV_HELP = {
    "embeddings": (
        "BEIR folder (qrels/dev.tsv, else test.tsv) or a (query, positive) pairs file: searched "
        "each epoch, MRR@10 selects; or labelled sentence pairs (a GLUE STS-B/MRPC/QQP folder, "
        "or sentence1, sentence2 and a label or score): spearman_cosine (scores) or cosine_ap "
        "(0/1 labels) selects"
    ),
    "rerank": "labelled pairs or triples: each query's pairs ranked each epoch, MRR@10 selects",
    "sparse": (
        "BEIR folder (qrels/dev.tsv, else test.tsv) or a (query, positive) pairs file: searched "
        "by sparse dot product each epoch, MRR@10 selects"
    ),
}


def _common(p: argparse.ArgumentParser) -> None:
    from bertkit.tasks.squad_features import SQUAD_MAX_SEQ_LENGTH
    from bertkit.tasks.windows import DEFAULT_MAX_SEQ_LENGTH
    from bertkit.training.finetune import FinetuneConfig

    g = p.add_argument_group("model and run")
    options.add_model(g, "bertkit or Hugging Face checkpoint folder")
    g.add_argument(
        "--output",
        required=True,
        help="folder for the selected model and metrics.json (new, empty, or an interrupted "
        "run's; else --overwrite)",
    )
    options.add_overwrite(g)
    options.add_fields(g, FinetuneConfig, _RUN_FIELDS, flags={"learning_rates": "--learning-rate"})
    g.add_argument(
        "--max-seq-length",
        type=int,
        default=None,
        help=f"tokens per input (default {DEFAULT_MAX_SEQ_LENGTH}; {SQUAD_MAX_SEQ_LENGTH} for squad; "
        "embeddings and sparse: a sentence-transformers --model folder's max_seq_length)",
    )
    options.add_precision(g)
    g.add_argument(
        "--max-train-examples",
        type=int,
        default=None,
        help="use only the first N training examples",
    )
    options.add_allow_pickle(g)
    options.add_split_special_tokens(g)
    options.add_device(g)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bertkit.cli.pooling_options import SPLADE_FLAGS
    from bertkit.data.tasks.custom import FORMATS
    from bertkit.data.tasks.glue import GLUE_TASKS
    from bertkit.data.tasks.sentence_pairs import PAIR_KINDS
    from bertkit.recipes.finetune import FinetuneJob
    from bertkit.tasks import FAMILIES, TaskSettings, rerank
    from bertkit.tasks.embedding import LOSSES, POOLINGS, SIMILARITIES
    from bertkit.tasks.sparse import SPLADE_ACTIVATIONS, SPLADE_STRATEGIES
    from bertkit.tasks.squad_features import (
        SQUAD_DOC_STRIDE,
        SQUAD_MAX_SEQ_LENGTH,
        SquadFeatureConfig,
    )
    from bertkit.tasks.squad_post import SquadPostConfig
    from bertkit.tasks.windows import WindowConfig
    from bertkit.training.finetune import FinetuneConfig

    glue_names = list(GLUE_TASKS)
    sub = parser.add_subparsers(dest="family", metavar="FAMILY", required=True)
    for name, (_cls, text) in FAMILIES.items():
        p = sub.add_parser(name, help=text, description=text)
        if name == "glue":
            p.add_argument(
                "--task", required=True, help=f"{', '.join(glue_names[:-1])} or {glue_names[-1]}"
            )
            p.add_argument(
                "--data-dir",
                type=Path,
                required=True,
                help="GLUE root (holding TASK/) or the task folder",
            )
        else:
            p.add_argument(
                "--train", type=Path, required=True, help=_TRAIN_HELP.get(name, "training file")
            )
            p.add_argument(
                "--dev",
                type=Path,
                required=True,
                help=_DEV_HELP.get(name, "dev file (scored each epoch, used for selection)"),
            )
        fields = _FAMILY_FIELDS.get(name, ())
        options.add_fields(
            p,
            TaskSettings,
            fields,
            flags={k: v for k, v in SPLADE_FLAGS.items() if k in fields},
            choices={
                "format": FORMATS,
                "pooling": POOLINGS,
                "similarity_fn_name": SIMILARITIES,
                "loss": rerank.LOSSES if name == "rerank" else LOSSES,
                "pair_kind": PAIR_KINDS,
                "pooling_strategy": SPLADE_STRATEGIES,
                "activation_function": SPLADE_ACTIVATIONS,
            },
        )
        if name in _WINDOWED:
            options.add_windows(p, length="--max-seq-length")
        if name in _DISTILLED:
            g = p.add_argument_group("distillation")
            # by hand: FinetuneJob's other fields have flags of their own (allow_pickle ...)
            teacher_help = options.field_docs(FinetuneJob)["teacher"]
            g.add_argument("--teacher", metavar="FOLDER", default=None, help=teacher_help)
            options.add_fields(g, FinetuneConfig, _DISTILL_FIELDS)
        if name == "squad":
            stride_help = (
                "Context tokens shared by neighbouring windows of a long context "
                f"(default {SQUAD_DOC_STRIDE} at --max-seq-length {SQUAD_MAX_SEQ_LENGTH} and up; "
                "for shorter windows a third of --max-seq-length, at most half the context "
                "tokens a --max-query-length question leaves)"
            )
            options.add_fields(p, WindowConfig, ("doc_stride",), help={"doc_stride": stride_help})
            options.add_fields(p, SquadFeatureConfig, ("max_query_length",))
            options.add_fields(p, SquadPostConfig, ("n_best_size", "max_answer_length"))
        _common(p)


def settings_from_args(args: argparse.Namespace):
    """The :class:`~bertkit.tasks.TaskSettings` the arguments describe."""
    from bertkit.tasks import TaskSettings
    from bertkit.tasks.squad_features import SquadFeatureConfig
    from bertkit.tasks.squad_post import SquadPostConfig
    from bertkit.tasks.windows import WindowConfig

    extra = {}
    if args.family in _WINDOWED:
        extra = {"long_inputs": options.values(args, WindowConfig, options.WINDOW_FIELDS)}
    if args.family == "squad":
        window = options.values(args, WindowConfig, ("doc_stride",))
        windows = options.values(args, SquadFeatureConfig, ("max_query_length",), window=window)
        search = options.values(args, SquadPostConfig, ("n_best_size", "max_answer_length"))
        extra = {"windows": windows, "search": search}
    return options.values(args, TaskSettings, **extra)


def run(args: argparse.Namespace) -> int:
    """Fine-tune alone or, under torchrun, as one rank of a DDP job (rank 0 selects and saves):
    :func:`bertkit.recipes.finetune.run_finetune` on the job the arguments describe."""
    from bertkit.recipes.finetune import FinetuneJob, run_finetune
    from bertkit.training.finetune import FinetuneConfig

    job = FinetuneJob(
        task=settings_from_args(args),
        model=args.model,
        output=Path(args.output),
        config=options.values(args, FinetuneConfig),
        max_train_examples=args.max_train_examples,
        allow_pickle=args.allow_pickle,
        split_special_tokens=args.split_special_tokens,
        device=args.device,
        teacher=getattr(args, "teacher", None),
        overwrite=args.overwrite,
    )
    run_finetune(job)
    return 0
