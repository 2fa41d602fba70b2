"""``bertkit evaluate``: score a model on labelled data: a fine-tuned model on its task's file, an
embedding model on sentence pairs or a BEIR folder, a pre-trained checkpoint on prepared data.

The task (reader, labels, windows, SQuAD v2.0 null threshold) comes from the model folder's
``bertkit_task.json``, so only the data is named::

    bertkit evaluate --model out/mrpc --data glue_data            # GLUE layout, dev split
    bertkit evaluate --model out/ner --data test.txt --output test_metrics.json

A BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) as ``--data`` evaluates retrieval,
and so does a file of (query, positive[, negatives]) rows as ``finetune embeddings --dev`` reads
it (its positives and negatives are the corpus; each query's positives are relevant): the model
embeds (any encoder or sentence-transformers folder), exact search by cosine, MRR@10,
NDCG@10, MAP@100, Recall/Accuracy/Precision@1/3/5/10 (and 100); ``--reranker`` reorders each
query's top ``--rerank-top-k`` with a cross-encoder first::

    bertkit evaluate --model out/embed --data squad-retrieval/test --reranker out/rerank

A sentence-transformers ``SparseEncoder`` folder (or ``--pooling splade``: any checkpoint with a
masked-LM head) is searched as ``SparseInformationRetrievalEvaluator`` searches it: SPLADE
vectors, behind the folder's query and document prompts (an inference-free ``Router`` folder:
queries by its static query route, the corpus by its SPLADE route), exact search by their dot product
(:func:`bertkit.inference.retrieval.sparse_search`), the same metrics plus the vectors' sparsity
(``query_active_dims``, ``corpus_active_dims``, ``avg_flops`` ...)::

    bertkit evaluate --model splade-folder --data nfcorpus --max-active-dims 64

An embedding model (a folder with no ``bertkit_task.json`` and no sequence-classifier head: a
sentence-transformers folder, one written by ``finetune embeddings``, any BERT encoder) on
labelled sentence pairs is scored as sentence-transformers' evaluators score it: gold scores
(STS-B) give Pearson and Spearman of each similarity, 0/1 labels (MRPC, QQP) accuracy, F1,
precision, recall and average precision at the best thresholds (:mod:`bertkit.evaluation.pairs`);
over-long texts are cut unless ``--no-truncate``::

    bertkit evaluate --model all-MiniLM-L6-v2 --data glue_data/MRPC --split dev
    bertkit evaluate --model out/embed --data sts.csv      # sentence1, sentence2, score

A folder written by ``bertkit prepare`` as ``--data`` scores a checkpoint with a masked-LM head
(a pre-training run's model/, a Hugging Face BertForPreTraining or BertForMaskedLM, a converted
TF checkpoint) with pre-training's held-out figures, on the same instances and masks for every
model (:mod:`bertkit.training.heldout`)::

    bertkit evaluate --model run/model --data wiki-prepared --eval-examples 2048
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bertkit.cli import options, pooling_options, rerank_options
from bertkit.progress import counted, took

HELP = (
    "score a fine-tuned model on a labelled file with the task's official metric, an "
    "embedding model on labelled sentence pairs or a BEIR folder, or a pre-trained checkpoint's "
    "masked LM and NSP on prepared data"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bertkit.data.tasks.sentence_pairs import PAIR_KINDS
    from bertkit.inference.task_model import TaskModel
    from bertkit.tasks import TaskSettings
    from bertkit.training.settings import TrainConfig

    options.add_model(
        parser,
        "folder written by `bertkit finetune`, an embedding model (no bertkit_task.json), or a "
        "checkpoint with a masked-LM head (--data prepared pre-training data)",
    )
    parser.add_argument(
        "--data",
        required=True,
        help="data file (GLUE: a file or the GLUE folder; any model: "
        "CSV/TSV/JSONL with the text fields and a label; an embedding model: labelled sentence "
        "pairs (a score or 0/1 label) or a BEIR folder)",
    )
    parser.add_argument(
        "--split",
        default="dev",
        help="GLUE folder split (dev, dev_mismatched, train ...); BEIR qrels split (dev, else test)",
    )
    g = parser.add_argument_group("retrieval (--data a BEIR folder)")
    rerank_options.add_reranker(g)
    g = parser.add_argument_group("embedding model (sentence pairs or a BEIR folder)")
    pooling_options.add_pooling(
        g,
        "token vectors -> one vector; splade: SPLADE vectors from the masked-LM head, searched "
        "by their dot product (a BEIR folder only; default: the folder's sentence-transformers "
        "pooling, splade for a SparseEncoder folder, else mean)",
    )
    g = parser.add_argument_group("labelled sentence pairs (an embedding model)")
    options.add_fields(g, TaskSettings, ("pair_kind",), choices={"pair_kind": PAIR_KINDS})
    g = parser.add_argument_group("pre-training metrics (--data a `bertkit prepare` folder)")
    options.add_fields(
        g,
        TrainConfig,
        ("eval_examples", "seed"),
        dest_prefix="heldout_",  # evaluate's --batch-size is not the training batch's
        help={
            "eval_examples": "instances scored: the first N of the held-out split",
            "seed": "masks of unmasked (--dynamic-masking) data: epoch 0's of this seed, as "
            "`bertkit pretrain --seed` evaluates (static masks are the data's own)",
        },
    )
    parser.add_argument("--output", default=None, help="also write the metrics to this JSON file")
    options.add_batch_size(parser, TaskModel)
    options.add_windows(parser, length="the model's max_seq_length", saved=True)
    options.add_precision(parser, inference=True)
    options.add_device(parser)
    options.add_allow_pickle(parser)
    options.add_split_special_tokens(parser)


def run(args: argparse.Namespace) -> int:
    from bertkit.data.shards import is_prepared
    from bertkit.data.tasks.retrieval import is_beir
    from bertkit.errors import ConfigError
    from bertkit.tasks.saved import has_task

    # a fine-tuned folder (bertkit_task.json, or a Hugging Face sequence classifier such as a
    # cross-encoder) scores its task; any other encoder is an embedding model on sentence pairs
    # (args.model is a folder by now: options.resolve_model)
    rerank_options.rerank_top_k(args)  # given without --reranker: refused, whatever the data
    if args.split != "dev" and (not Path(args.data).is_dir() or is_prepared(args.data)):
        raise ConfigError(
            f"--split {args.split} picks a split of a GLUE or BEIR folder; {args.data} is a "
            "file or prepared data, scored whole (pass the file of the split you want)"
        )
    if is_beir(args.data) or (not has_task(args.model) and _is_pairs_file(args.data)):
        route, what = _retrieval, "retrieval on a BEIR folder or a (query, positive) file"
    elif is_prepared(args.data):
        route, what = _pretraining, "pre-training's held-out figures on prepared data"
    elif not has_task(args.model):
        route, what = _pairs, ""
    else:
        route, what = _task, "a fine-tuned model on its task's data"
    if route is not _retrieval and args.reranker:
        raise ConfigError(
            f"--reranker reorders the hits of retrieval on a BEIR folder (corpus.jsonl, "
            f"queries.jsonl, qrels/) or a (query, positive) file; {args.data} is neither"
        )
    if route is not _pairs and args.pair_kind != "auto":
        raise ConfigError(
            f"--pair-kind {args.pair_kind} applies to an embedding model scored on labelled "
            f"sentence pairs, not to {what}"
        )
    embedding = {**pooling_options.splade_values(args), "pooling": args.pooling}
    given = [pooling_options.SPLADE_FLAGS.get(k, "--pooling") for k, v in embedding.items() if v]
    if route in (_task, _pretraining) and given:
        raise ConfigError(f"{given[0]} applies to an embedding model, not to {what}")
    return route(args)


def _task(args: argparse.Namespace) -> int:
    from bertkit.errors import InputError
    from bertkit.inference import TaskModel

    model = TaskModel.load(
        args.model,
        device=args.device,
        precision=args.precision,
        batch_size=args.batch_size,
        allow_pickle=args.allow_pickle,
        split_special_tokens=args.split_special_tokens,
    )
    model = model.with_windows(**options.window_values(args))
    start = time.perf_counter()
    scored = model.score_file(args.data, args.split)
    seconds = time.perf_counter() - start
    if scored.windows is not None:
        print(f"long inputs: {scored.windows.summary()}", file=sys.stderr)
    if not scored.predictions:
        raise InputError(args.data, None, "no examples to score (expected labelled data)")
    if not scored.metrics:
        raise InputError(
            args.data,
            None,
            "expected labelled data to score (use `bertkit predict` for unlabelled data)",
        )
    n = len(scored.predictions)
    done = f"scored {counted(n, 'example')} of {args.data} {took(seconds, n, 'examples')}"
    return _report(scored.metrics, args.output, done)


def _report(metrics: dict, output: str | None, done: str) -> int:
    """The metrics as JSON on stdout (and in ``output``), then the one-line summary ``done``
    (what was scored, how fast) on stderr, naming the file written."""
    from bertkit.io import atomic_write_text, report_json

    text = report_json(metrics)
    print(text)
    if output:
        atomic_write_text(output, text + "\n")
    print(done + (f"; wrote {output}" if output else ""), file=sys.stderr)
    return 0


def _is_pairs_file(data: str | Path) -> bool:
    """A file of (query, positive[, negatives]) rows: retrieval, searched as ``finetune
    embeddings --dev`` searches it (so the score that selected a model can be had again)."""
    from bertkit.data.tasks.dev_layout import dev_layout
    from bertkit.errors import InputError

    try:
        return Path(data).is_file() and dev_layout(data) == "retrieval"
    except InputError:  # neither layout (or both): the pairs reader says what it expected
        return False


def _retrieval(args: argparse.Namespace) -> int:
    from bertkit.data.tasks.retrieval import is_beir, pairs_as_retrieval, read_beir, read_pairs
    from bertkit.errors import ConfigError
    from bertkit.inference import Classifier, Embedder
    from bertkit.inference.retrieval import evaluate_retrieval
    from bertkit.inference.sparse import SparseEmbedder
    from bertkit.tasks.saved import has_task
    from bertkit.tasks.windows import WindowConfig

    top_k = rerank_options.rerank_top_k(args)
    if has_task(args.model):  # its pooled encoder is no retrieval model: refuse, not score it
        raise ConfigError(
            f"{args.model}: a fine-tuned task model (a cross-encoder scores pairs, it does not "
            "search a corpus); pass an embedding model as --model and this one as --reranker"
        )
    split = args.split
    if not is_beir(args.data):  # every positive and negative is the corpus, as in training's dev
        split, data = "a pairs file", pairs_as_retrieval(read_pairs(args.data))
    else:
        if split == "dev" and not (Path(args.data) / "qrels" / "dev.tsv").is_file():
            split = "test"
        data = read_beir(args.data, split)
    common = options.loading_values(args)
    # over-long texts are cut, as sentence-transformers reads them
    cut = WindowConfig(truncate=True)
    if pooling_options.is_sparse(args):
        splade = pooling_options.splade_values(args)
        embedder = SparseEmbedder.load(args.model, **splade, windows=cut, **common)
    else:
        embedder = Embedder.load(args.model, pooling=args.pooling, windows=cut, **common)
    reranker = Classifier.load(args.reranker, **common) if args.reranker else None
    print(
        f"{counted(len(data.judged()), 'judged query')} ({split}), "
        f"{counted(len(data.corpus), 'document')}",
        file=sys.stderr,
    )
    start = time.perf_counter()
    metrics = evaluate_retrieval(embedder, data, reranker=reranker, top_k=top_k)
    seconds = time.perf_counter() - start
    if "sparsity" in metrics:
        print(sparsity_line(metrics["sparsity"], embedder.vocab_size), file=sys.stderr)
    done = (
        f"scored {counted(len(data.judged()), 'query')} against "
        f"{counted(len(data.corpus), 'document')} of "
        f"{args.data} {took(seconds, len(data.corpus), 'documents')}"
    )
    return _report(metrics, args.output, done)


def sparsity_line(stats: dict[str, float], size: int) -> str:
    """The sparsity figures of :func:`bertkit.evaluation.retrieval.sparsity_stats` in a line."""
    return (
        f"SPLADE vectors: {stats['query_active_dims']:.1f} (queries) and "
        f"{stats['corpus_active_dims']:.1f} (documents) of {size} entries non-zero on average, "
        f"{stats['avg_flops']:.2f} shared per pair (avg FLOPS)"
    )


def _pretraining(args: argparse.Namespace) -> int:
    from bertkit.training.heldout import score_checkpoint

    score = score_checkpoint(
        args.model,
        args.data,
        eval_examples=args.heldout_eval_examples,
        seed=args.heldout_seed,
        batch_size=args.batch_size,
        precision=args.precision,
        device=args.device,
        allow_pickle=args.allow_pickle,
        log=lambda m: print(m, file=sys.stderr),
    )
    for note in score.notes:
        print(f"note: {note}", file=sys.stderr)
    done = (
        f"scored {score.examples} instances ({score.masked_tokens} masked tokens) of "
        f"{args.data} {took(score.seconds, score.examples, 'instances')}"
    )
    return _report(score.to_dict(), args.output, done)


def _pairs(args: argparse.Namespace) -> int:
    from bertkit.data.tasks.sentence_pairs import read_sentence_pairs
    from bertkit.errors import ConfigError, InputError
    from bertkit.inference import Embedder
    from bertkit.inference.sentence_pairs import evaluate_pairs
    from bertkit.tasks.windows import WindowConfig

    if pooling_options.is_sparse(args):
        raise ConfigError(
            f"{args.model}: SPLADE vectors are evaluated on a BEIR folder (retrieval), not on "
            "sentence pairs; pass --pooling mean|cls|max for dense vectors"
        )
    try:
        pairs = read_sentence_pairs(args.data, args.split, args.pair_kind)
    except InputError as e:
        if _reads_as_pairs(args.data):  # the embedding user's own pairs file: its error alone
            raise
        # most often the wrong --model: a pre-training checkpoint or a plain encoder given
        # where the folder `bertkit finetune` wrote for this data was meant
        raise InputError(
            e.path,
            e.line,
            f"{e.message} ({args.model} has no bertkit_task.json, so it is scored as an "
            "embedding model on labelled sentence pairs; to score a task's data pass the "
            "folder `bertkit finetune` wrote, and a pre-training checkpoint scores prepared "
            "pre-training data)",
        ) from None
    given = {k: v for k, v in options.window_values(args).items() if v is not None}
    # over-long texts are cut unless --no-truncate, as sentence-transformers reads them
    windows = WindowConfig(**{"truncate": True, **given})
    embedder = Embedder.load(
        args.model, pooling=args.pooling, windows=windows, **options.loading_values(args)
    )
    print(f"{counted(len(pairs.labels), 'pair')}: {pairs.describe()}", file=sys.stderr)
    start = time.perf_counter()
    result = evaluate_pairs(embedder, pairs)
    seconds = time.perf_counter() - start
    print(pair_table(result["kind"], result["metrics"]), file=sys.stderr)
    done = (
        f"scored {counted(result['pairs'], 'pair')} ({counted(result['texts'], 'distinct text')}) "
        f"of {args.data} as "
        f"{result['kind']}, {result['main_metric']} {result[result['main_metric']]:.4f} "
        f"{took(seconds, result['pairs'], 'pairs')}"
    )
    return _report(result, args.output, done)


def _reads_as_pairs(data: str) -> bool:
    """Whether ``data`` is laid out as labelled sentence pairs (a GLUE pair task, or a file
    whose header names a text pair and a label), so a reading error is about that file alone."""
    from bertkit.data.tasks.sentence_pairs import is_sentence_pairs
    from bertkit.errors import InputError

    try:
        return is_sentence_pairs(data)
    except InputError:  # not even a CSV/TSV/JSONL (a CoNLL file)
        return False


PAIR_COLUMNS = {
    "sts": ("pearson", "spearman"),
    "pair_classification": ("accuracy", "f1", "precision", "recall", "ap", "mcc"),
}


def pair_table(kind: str, metrics: dict[str, float]) -> str:
    """The metrics of :func:`bertkit.evaluation.pairs.sts_metrics` or
    ``pair_classification_metrics`` as a table, one row per similarity."""
    cols = PAIR_COLUMNS[kind]
    sims = list(dict.fromkeys(k.split("_")[-1 if kind == "sts" else 0] for k in metrics))

    def key(sim: str, col: str) -> str:
        return f"{col}_{sim}" if kind == "sts" else f"{sim}_{col}"

    lines = ["similarity " + "".join(f"{c:>10}" for c in cols)]
    lines += [f"{s:<10} " + "".join(f"{metrics[key(s, c)]:>10.4f}" for c in cols) for s in sims]
    return "\n".join(lines)
