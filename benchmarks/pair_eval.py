"""Labelled sentence pairs: ``bertkit evaluate`` beside sentence-transformers' evaluators.

One process, the same pairs read once by bertkit's reader (a GLUE folder or TSV, or any pairs
file ``bertkit evaluate`` reads): ``bertkit evaluate --precision P`` for each ``--precisions``
value, then sentence-transformers' ``BinaryClassificationEvaluator`` (0/1 labels) or
``EmbeddingSimilarityEvaluator`` (gold scores) with all four similarities, each with its wall
time. Prints a table of the cosine metrics and writes every number to ``--json``::

    python benchmarks/pair_eval.py --model MINILM --data ../shared/data/glue/MRPC \\
        --json benchmarks/results/DATE-pair-eval-mrpc-xeon-amx.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SIMS = ["cosine", "dot", "euclidean", "manhattan"]


def bertkit_run(model: str, data: str, split: str, precision: str, out: Path) -> dict:
    from bertkit.cli.main import main

    start = time.perf_counter()
    argv = ["evaluate", "--model", model, "--data", data, "--split", split]
    assert main([*argv, "--precision", precision, "--output", str(out)]) == 0
    wall = time.perf_counter() - start
    return {**json.loads(out.read_text()), "wall_s": wall}


def reference_run(model: str, pairs) -> dict:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import (
        BinaryClassificationEvaluator,
        EmbeddingSimilarityEvaluator,
    )

    start = time.perf_counter()
    st = SentenceTransformer(model, device="cpu")
    if pairs.kind == "sts":
        ev = EmbeddingSimilarityEvaluator(
            pairs.texts_a, pairs.texts_b, pairs.labels, similarity_fn_names=SIMS, write_csv=False
        )
    else:
        labels = [int(y) for y in pairs.labels]
        ev = BinaryClassificationEvaluator(
            pairs.texts_a, pairs.texts_b, labels, similarity_fn_names=SIMS, write_csv=False
        )
    metrics = {k: float(v) for k, v in ev(st).items()}
    return {"metrics": metrics, "wall_s": time.perf_counter() - start}


def _cpu_name() -> str | None:
    """The ``model name`` of /proc/cpuinfo (what ``lscpu`` shows), with the AMX flag noted."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    name = next(
        (ln.split(":", 1)[1].strip() for ln in text.splitlines() if "model name" in ln), None
    )
    return None if name is None else name + (" (AMX)" if "amx_bf16" in text else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", required=True, help="embedding model folder")
    ap.add_argument("--data", required=True, help="labelled pairs: GLUE task folder or a file")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--precisions", default="fp32,auto", help="bertkit runs, comma-separated")
    ap.add_argument("--json", default=None, help="write every number here")
    args = ap.parse_args(argv)

    import platform

    import torch

    from bertkit.data.tasks.sentence_pairs import read_sentence_pairs

    pairs = read_sentence_pairs(args.data, args.split)
    out = Path("/tmp/bertkit-pair-eval.json")
    result: dict = {
        "data": f"{args.data} ({args.split}): {pairs.describe()}",
        "machine": {
            "cpu": _cpu_name() or platform.machine(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "bertkit": {},
    }
    for precision in args.precisions.split(","):
        result["bertkit"][precision] = bertkit_run(
            args.model, args.data, args.split, precision, out
        )
    result["sentence-transformers"] = reference_run(args.model, pairs)
    ref = result["sentence-transformers"]["metrics"]
    cols = (
        ["pearson_cosine", "spearman_cosine"]
        if pairs.kind == "sts"
        else [f"cosine_{m}" for m in ("accuracy", "f1", "precision", "recall", "ap")]
    )
    print("| run | " + " | ".join(cols) + " | wall s |", file=sys.stderr)
    for name, run in result["bertkit"].items():
        row = " | ".join(f"{run['metrics'][c]:.4f}" for c in cols)
        print(f"| bertkit {name} | {row} | {run['wall_s']:.1f} |", file=sys.stderr)
    row = " | ".join(f"{ref[c]:.4f}" for c in cols)
    wall = result["sentence-transformers"]["wall_s"]
    print(f"| sentence-transformers | {row} | {wall:.1f} |", file=sys.stderr)
    fp32 = result["bertkit"].get("fp32")
    if fp32:
        worst = max(fp32["metrics"], key=lambda k: abs(fp32["metrics"][k] - ref[k]))
        diff = abs(fp32["metrics"][worst] - ref[worst])
        result["max_abs_diff_fp32"] = {"metric": worst, "diff": diff}
        print(
            f"largest difference, bertkit fp32 against the evaluator: {diff:.2e} ({worst})",
            file=sys.stderr,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
