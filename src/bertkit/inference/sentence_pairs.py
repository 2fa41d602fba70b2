"""Scoring an embedding model on labelled sentence pairs (STS, pair classification).

Each distinct text is embedded once (as sentence-transformers' ``BinaryClassificationEvaluator``
does), with the folder's default prompt put before it where its
``config_sentence_transformers.json`` names one (as ``SentenceTransformer.encode`` does), and in
the Embedder's own settings (pooling and normalisation from the folder, batching, windows or
truncation). The metrics are :mod:`bertkit.evaluation.pairs`'s; the main one follows the
folder's ``similarity_fn_name`` (cosine without one), as the evaluators' primary metric does.
"""

from __future__ import annotations

import time
from typing import Any

from bertkit.data.tasks.sentence_pairs import SentencePairs
from bertkit.evaluation.pairs import SIMILARITIES, main_metric, pair_metrics
from bertkit.inference.embedder import Embedder
from bertkit.interop.sentence_folder import similarity_of
from bertkit.interop.sentence_prompts import task_prompt


def evaluate_pairs(embedder: Embedder, pairs: SentencePairs) -> dict[str, Any]:
    """``{"kind", "data", "pairs", "texts", "precision", "main_metric", <main metric>,
    "metrics", "seconds"}``: ``metrics`` holds every similarity's scores (module docstring)."""
    prompt, similarity = "", "cosine"
    if embedder.source is not None:
        prompt = task_prompt(embedder.source, None)  # encode's: the default prompt
        named = similarity_of(embedder.source)
        similarity = named if named in SIMILARITIES else "cosine"
    texts = pairs.texts()
    t0 = time.perf_counter()
    vectors = embedder([prompt + t for t in texts])
    t1 = time.perf_counter()
    metrics = pair_metrics(pairs.kind, *pairs.sides(vectors), pairs.labels)
    main = main_metric(pairs.kind, similarity)
    return {
        "kind": pairs.kind,
        "data": pairs.describe(),
        "pairs": len(pairs.labels),
        "texts": len(texts),
        "precision": embedder.precision,
        "main_metric": main,
        main: metrics[main],
        "metrics": metrics,
        "seconds": {"embed": t1 - t0, "score": time.perf_counter() - t1},
    }
