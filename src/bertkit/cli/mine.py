"""``bertkit mine``: hard negatives for (query, positive) pairs, the step before
``bertkit finetune embeddings`` (or ``finetune rerank``), as sentence-transformers'
``util.mine_hard_negatives`` does it (:mod:`bertkit.inference.mining`)::

    bertkit mine --model minilm --input pairs.jsonl --output mined.jsonl --num-negatives 5 \\
        --relative-margin 0.05
    bertkit finetune embeddings --model minilm --train mined.jsonl --output out/embed

``--input`` is a pairs file (JSONL, CSV or TSV: query, positive, the file ``finetune embeddings
--train`` reads) or a BEIR folder (its ``--split`` judgements give the pairs, its corpus the
candidates). The candidates are the distinct positives plus any ``--corpus`` texts (one per line,
or JSONL with ``text``). The output (JSONL, CSV or TSV by its extension, written atomically):
``n-tuple`` rows query, positive, negative_1..n; ``triplet`` rows; or ``labeled-pair`` rows
(query, passage, label) for ``finetune rerank``.

``--cross-encoder RERANKER`` rescores each query's candidates and positives with a one-output
cross-encoder (a ``finetune rerank`` folder, a sentence-transformers CrossEncoder or a Hugging
Face one-label classifier) and filters and ranks by its scores; ``--output-scores`` writes them
(a ``scores`` list per row), the teacher's scores for ``finetune embeddings --loss margin-mse`` (or distill-kl)::

    bertkit mine --model minilm --cross-encoder reranker --input pairs.jsonl --output t.jsonl \
        --num-negatives 4 --output-scores
    bertkit finetune embeddings --model minilm --train t.jsonl --loss margin-mse --output out/d
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.cli import options

HELP = "mine hard negatives for (query, positive) pairs with an embedding model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.inference.embedder import Embedder
    from bertkit.inference.mining import OUTPUT_FORMATS, SIMILARITIES, MineOptions
    from bertkit.inference.negatives import SAMPLINGS, MiningConfig

    options.add_model(p, "embedding model folder (sentence-transformers or any BERT encoder)")
    p.add_argument(
        "--input",
        type=Path,
        required=True,
        help="pairs file (JSONL, CSV or TSV: query, positive) or a BEIR folder",
    )
    p.add_argument("--split", default="train", help="the BEIR folder's qrels split (default train)")
    p.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="more candidate texts: one per line, or JSONL with text (and title)",
    )
    p.add_argument("--output", type=Path, required=True, help="mined rows: .jsonl, .csv or .tsv")
    p.add_argument(
        "--cross-encoder",
        default=None,
        metavar="RERANKER",
        help="one-output cross-encoder folder (finetune rerank, sentence-transformers "
        "CrossEncoder): rescores the candidates and positives; filters and ranking use its scores",
    )
    g = p.add_argument_group("which candidates become negatives")
    options.add_fields(
        g,
        MiningConfig,
        [f for f in MiningConfig.__dataclass_fields__],
        choices={"sampling": SAMPLINGS},
    )
    options.add_fields(
        p,
        MineOptions,
        [f for f in MineOptions.__dataclass_fields__],
        choices={"similarity": SIMILARITIES, "output_format": OUTPUT_FORMATS},
    )
    options.add_batch_size(p, Embedder)
    options.add_max_length(p)
    options.add_windows(p, length="--max-length")
    options.add_precision(p, inference=True)
    options.add_device(p)
    options.add_allow_pickle(p)
    options.add_split_special_tokens(p)


def read_input(path: Path, split: str, corpus: Path | None):
    """(pairs, extra candidate texts) from a pairs file or a BEIR folder, and ``--corpus``."""
    from bertkit.data.tasks import retrieval as R
    from bertkit.input_files import require_file

    texts: list[str] = []
    if R.is_beir(path):
        data = R.read_beir(path, split)
        pairs = R.retrieval_pairs(data)
        texts = list(data.corpus.values())
    else:
        pairs = R.read_pairs(require_file(path))
    if corpus is not None:
        texts += R.read_texts(require_file(corpus))
    return pairs, texts


def check_one_output(reranker, folder) -> None:
    """A cross-encoder gives one score per pair (a classifier with labels is refused)."""
    from bertkit.errors import ConfigError

    if getattr(reranker.adapter, "labels", None):
        raise ConfigError(
            f"{folder}: a classifier with labels {reranker.adapter.labels}; --cross-encoder "
            f"needs one output per pair (finetune rerank, a sentence-transformers CrossEncoder)"
        )


def run(args: argparse.Namespace) -> int:
    from bertkit.data.tasks import pairs_writer as W
    from bertkit.errors import ConfigError
    from bertkit.inference import Classifier, Embedder
    from bertkit.inference.mining import MineOptions, mine
    from bertkit.inference.negatives import MiningConfig
    from bertkit.inference.retrieval import activation_of
    from bertkit.tasks.windows import WindowConfig

    config = options.values(args, MiningConfig)  # bad settings fail before anything is read
    mining = options.values(args, MineOptions)
    W.output_format(args.output)
    pairs, texts = read_input(args.input, args.split, args.corpus)
    loading = options.loading_values(args)
    windows = options.values(args, WindowConfig, options.WINDOW_FIELDS)
    embedder = Embedder.load(args.model, max_length=args.max_length, windows=windows, **loading)
    reranker = None
    if args.cross_encoder is not None:
        reranker = Classifier.load(args.cross_encoder, **loading)
        check_one_output(reranker, args.cross_encoder)
        activation = activation_of(reranker.source)  # one mining cannot apply fails here
    # finetune rerank reads a labeled-pair score column as labels in [0, 1]: a sigmoid's only
    scores_as_labels = mining.output_format == "labeled-pair" and mining.output_scores
    if scores_as_labels and (reranker is None or activation != "sigmoid"):
        raise ConfigError(
            "--output-scores on labeled-pair rows writes scores as the labels finetune "
            "rerank reads, in [0, 1]: it needs a --cross-encoder with a sigmoid (the "
            f"{'bi-encoder similarities' if reranker is None else 'identity logits'} are not)"
        )
    mined = mine(embedder, pairs, config, mining, texts, reranker=reranker)
    rows = mined.rows(mining.output_format, mining.output_scores)
    if mining.output_format == "labeled-pair":
        column = "score" if mining.output_scores else "label"
        W.write_labelled_pairs(args.output, rows, column)  # type: ignore[arg-type]
    else:
        W.write_pairs(args.output, rows)  # type: ignore[arg-type]
    print(f"{mined.summary(mining.output_format)} -> {args.output}", file=sys.stderr)
    return 0
