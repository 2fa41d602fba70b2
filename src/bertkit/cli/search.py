"""``bertkit search``: query a corpus already embedded into a folder by ``bertkit embed``::

    bertkit embed --model minilm --input corpus.txt --output index/
    bertkit search --index index/ --queries queries.txt --output hits.jsonl --top-k 10

``--queries``: one query per line (its id the line number) or JSONL with ``_id`` (or ``id``)
and ``text`` (a BEIR ``queries.jsonl``). The queries are embedded by the index's model (or
``--model``, whose vectors must have the index's size) with the index's settings and the
folder's "query" prompt, then searched exactly (:mod:`bertkit.inference.index_search`). One JSON
line per query: ``{"query": id, "hits": [{"line": n, "score": s, "text": ...}]}``, ``line`` the
1-based line of the embedded input and ``text`` that line when the input file is still there
with the size the index recorded. ``--reranker`` (a cross-encoder folder) reorders each query's
first ``--rerank-top-k`` hits and adds their ``rerank_score``. A flag that would change nothing
is refused, not ignored: ``--rerank-top-k`` without ``--reranker``, ``--rescore-multiplier`` on
an index that is not quantized.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

from bertkit.cli import options, rerank_options

HELP = "search a folder of vectors written by `bertkit embed --output DIR/` with queries"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.inference.index_search import TOP_K
    from bertkit.inference.quantize import RESCORE_MULTIPLIER

    p.add_argument(
        "--index", type=Path, required=True, help="folder written by `bertkit embed --output DIR/`"
    )
    p.add_argument(
        "--queries",
        type=Path,
        required=True,
        help="one query per line (id: the line number), or JSONL with _id (or id) and text",
    )
    p.add_argument("--output", type=Path, required=True, help="hits, one JSON line per query")
    p.add_argument(
        "--model",
        default=None,
        help="query encoder folder (default: the model the index was embedded with)",
    )
    p.add_argument("--top-k", type=int, default=TOP_K, help=f"hits per query (default {TOP_K})")
    rerank_options.add_reranker(p)
    p.add_argument(
        "--rescore-multiplier",
        type=int,
        default=None,
        help="a quantized index (`bertkit embed --quantize`) only: candidates per hit found with "
        f"the quantized query and rescored with the float one (default {RESCORE_MULTIPLIER})",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="queries per forward pass (default: the index's batch size)",
    )
    options.add_device(p)
    options.add_allow_pickle(p)


def run(args: argparse.Namespace) -> int:
    from bertkit.data.tasks.retrieval import read_queries
    from bertkit.errors import ConfigError, InputError
    from bertkit.inference import Classifier
    from bertkit.inference.index_search import (
        EmbeddedIndex,
        line_texts,
        query_encoder,
        rerank_hits,
        search_index,
    )
    from bertkit.inference.quantize import RESCORE_MULTIPLIER
    from bertkit.input_files import require_file
    from bertkit.io import atomic_write
    from bertkit.progress import counted, took

    for flag in ("top_k", "rescore_multiplier"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be at least 1")
    rerank_top_k = rerank_options.rerank_top_k(args)
    require_file(args.queries)
    index = EmbeddedIndex.open(args.index)  # an unfinished folder is refused before any loading
    if warning := index.route_warning():
        print(warning, file=sys.stderr)
    if args.rescore_multiplier is not None and index.quantization is None:
        raise ConfigError(
            f"--rescore-multiplier applies to a quantized index (`bertkit embed --quantize`); "
            f"{index.folder} holds {'SPLADE' if index.sparse else 'float'} vectors, searched "
            "exactly: leave it out"
        )
    if args.reranker and index.source() is None:  # refused before any model loads
        where = (index.manifest.get("inputs") or [{}])[0].get("path")
        raise InputError(
            where or index.folder,
            None,
            "--reranker reads the hits' text from the file the index was embedded from, "
            "which is gone or no longer has the size the manifest recorded",
        )
    queries = read_queries(args.queries)
    common = {"device": args.device, "allow_pickle": args.allow_pickle}
    encoder = query_encoder(index, args.model, batch_size=args.batch_size, **common)
    reranker = Classifier.load(args.reranker, **common) if args.reranker else None
    start = time.perf_counter()
    lines, scores = search_index(
        index,
        encoder,
        [t for _, t in queries],
        args.top_k,
        rescore_multiplier=args.rescore_multiplier or RESCORE_MULTIPLIER,  # None: the default
    )
    texts = line_texts(index, set(lines.ravel().tolist()))
    order, reranked = None, None
    if reranker is not None and texts is not None:
        order, reranked = rerank_hits(reranker, [t for _, t in queries], lines, texts, rerank_top_k)
    seconds = time.perf_counter() - start
    with atomic_write(args.output, "w") as f:
        for r, (qid, _) in enumerate(queries):
            hits = []
            for c in order[r] if order is not None else range(lines.shape[1]):
                n = int(lines[r, c])
                hit = {"line": n, "score": float(scores[r, c])}
                if reranked is not None and not math.isnan(reranked[r, len(hits)]):
                    hit["rerank_score"] = float(reranked[r, len(hits)])
                if texts is not None:
                    hit["text"] = texts[n]
                hits.append(hit)
            f.write(json.dumps({"query": qid, "hits": hits}, ensure_ascii=False) + "\n")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(
        f"searched {counted(len(queries), 'query')} over {counted(index.lines, 'line')} ({index.folder}, "
        f"{'SPLADE' if index.sparse else _dense_kind(index)}) -> {args.output} "
        f"{took(seconds, len(queries), 'queries')}; peak RSS {peak:.0f} MiB"
        + ("" if texts is not None else "; no text: the embedded file is gone or changed"),
        file=sys.stderr,
    )
    return 0


def _dense_kind(index) -> str:
    quant = index.quantization
    return "dense" if quant is None else f"dense {quant.precision}, rescored"
