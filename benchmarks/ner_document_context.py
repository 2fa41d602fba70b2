"""CoNLL-2003 NER: sentence-level vs document context (``--document-context``), several seeds.

The paper (section 5.3) tagged CoNLL-2003 "using the maximal document context provided by the
data". Both settings train on the same subset (the first ``--docs`` documents of train.txt,
written whole to a temporary file so no document is split), select on valid.txt after each
epoch, and are then scored on test.txt with ``bertkit evaluate``. Model: all-MiniLM-L6-v2.

    flock /tmp/bertkit-cpu.lock python -m benchmarks.ner_document_context --json benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.long_inputs import DATA, evaluate, finetune, finish


def first_documents(path: Path, docs: int) -> str:
    """The text of the first ``docs`` -DOCSTART- documents of a CoNLL file."""
    out, seen = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-DOCSTART-"):
            seen += 1
            if seen > docs:
                break
        out.append(line)
    return "\n".join(out) + "\n"


def _spread(xs: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(xs),
        "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "min": min(xs),
        "max": max(xs),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"settings": vars(args) | {"json": None}, "runs": []}
    with tempfile.TemporaryDirectory(prefix="bertkit-ner-doc-") as tmp:
        root = Path(tmp)
        train = root / "train.txt"
        train.write_text(first_documents(DATA / "conll2003/train.txt", args.docs))
        doc = ["--document-context", "--batch-size", str(args.doc_batch_size)]
        for mode, extra in (("sentence", []), ("document", doc)):
            for seed in range(args.seed, args.seed + args.seeds):
                out = root / f"{mode}-{seed}"
                m = finetune(
                    "ner",
                    train,
                    DATA / "conll2003/valid.txt",
                    out,
                    args.max_seq_length,
                    seed,
                    extra,
                    args.epochs,
                    args.lr,
                )
                test, line = evaluate(out, DATA / "conll2003/test.txt", [])
                results["runs"].append(
                    {
                        "mode": mode,
                        "seed": seed,
                        "valid_f1": m["selected"]["dev"]["dev"]["f1"],
                        "test_f1": test["f1"],
                        "windows": m["windows"],
                        "test_windows": line,
                        "wall_s": m["wall_s"],
                        "command": m["command"],
                    }
                )
    for mode in ("sentence", "document"):
        runs = [r for r in results["runs"] if r["mode"] == mode]
        results[mode] = {k: _spread([r[k] for r in runs]) for k in ("valid_f1", "test_f1")}
    return results


def table(r: dict[str, Any]) -> str:
    lines = [
        "| context | valid F1 mean ± std (min-max) | test F1 mean ± std (min-max) | train inputs -> windows | runs |",
        "|---|---|---|---|---|",
    ]
    for mode in ("sentence", "document"):
        runs = [x for x in r["runs"] if x["mode"] == mode]
        w = runs[0]["windows"]["train"]
        cells = [
            f"{s['mean']:.4f} ± {s['std']:.4f} ({s['min']:.4f}-{s['max']:.4f})"
            for s in (r[mode]["valid_f1"], r[mode]["test_f1"])
        ]
        lines.append(
            f"| {mode} | {cells[0]} | {cells[1]} | {w['inputs']} -> {w['windows']} | {len(runs)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--docs", type=int, default=150, help="training documents (from the start)")
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument(
        "--doc-batch-size",
        type=int,
        default=4,
        help="document windows per update (sentence mode: 16 sentences; a document window "
        "holds ~4.7x the pieces, so 4 keeps the updates per epoch and tokens per "
        "update comparable)",
    )
    ap.add_argument("--lr", type=float, default=1e-4)
    return finish(ap, argv, run, table)


if __name__ == "__main__":
    raise SystemExit(main())
