"""``--reranker`` and ``--rerank-top-k`` of the commands that rank a corpus (``evaluate`` on a
BEIR folder, ``search``): a cross-encoder reorders each query's first hits. ``--rerank-top-k``
defaults to None, read as :data:`~bertkit.evaluation.retrieval.RERANK_TOP_K`, so that a value
given without ``--reranker`` is refused rather than ignored."""

from __future__ import annotations

import argparse


def add_reranker(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    from bertkit.evaluation.retrieval import RERANK_TOP_K

    parser.add_argument(
        "--reranker", default=None, help="cross-encoder folder to rerank the hits with"
    )
    parser.add_argument(
        "--rerank-top-k",
        type=int,
        default=None,
        help=f"hits per query the --reranker reorders (default {RERANK_TOP_K})",
    )


def rerank_top_k(args: argparse.Namespace) -> int:
    """The hits per query the reranker reorders: ``--rerank-top-k``, or its default when not
    given; ConfigError in one line when it is below 1 or given without ``--reranker``."""
    from bertkit.errors import ConfigError
    from bertkit.evaluation.retrieval import RERANK_TOP_K

    if args.rerank_top_k is None:
        return RERANK_TOP_K
    if not args.reranker:
        raise ConfigError(
            "--rerank-top-k sets how many hits --reranker reorders, and no --reranker is "
            "given: pass a cross-encoder with --reranker, or leave --rerank-top-k out"
        )
    if args.rerank_top_k < 1:
        raise ConfigError(f"--rerank-top-k must be at least 1, got {args.rerank_top_k}")
    return args.rerank_top_k
