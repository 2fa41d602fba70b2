"""int8 accuracy: fp32 vs bertkit's native int8 vs ONNX Runtime int8, on MiniLM fine-tuned here.

Each row fine-tunes all-MiniLM-L6-v2 with bertkit on a training subset (short runs: the point is the
int8 drop, not the fp32 score), then scores the same dev examples four ways: bertkit fp32,
bertkit ``--precision int8``, and the exported file in ONNX Runtime (``bertkit export onnx
--optimize``, fp32, and ``--optimize --quantize int8``). It also prints the export's parity (max
abs difference of every output against bertkit fp32, at real tokens) on the fine-tuned head.

Rows: sst2 (accuracy), mrpc (F1), conll (entity F1 on CoNLL-2003 valid), squad (F1 on the "24/24"
split of SQuAD v1.1 dev, ``finetune_quality.squad_split``).

    python -m benchmarks.int8_quality --threads 2
    python -m benchmarks.int8_quality --rows sst2 --max-train 3000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from benchmarks.finetune_quality import bertkit_run, glue_examples, squad_split
from bertkit.recipes.finetune import TaskExamples

ROWS = ("sst2", "mrpc", "conll", "squad")
# (train subset, dev subset, lr, epochs) per row: sized for ~2-5 minutes of fine-tuning each on 2 cores
PLAN: dict[str, tuple[int | None, int | None, float, int]] = {
    "sst2": (3000, None, 5e-5, 1),
    "mrpc": (None, None, 5e-5, 2),
    "conll": (3000, 1000, 1e-4, 1),
    "squad": (1500, 500, 1e-4, 1),
}
METRIC = {"sst2": "accuracy", "mrpc": "f1", "conll": "f1", "squad": "f1"}


def _data(row: str, root: Path, train_n: int | None, dev_n: int | None):
    """(adapter, train examples, dev examples, description)."""
    if row in ("sst2", "mrpc"):
        task = glue_examples("SST-2" if row == "sst2" else "MRPC", root, train_n, dev_n)
        return task.adapter, task.train, task.dev["dev"], f"{row.upper()} dev"
    if row == "conll":
        from bertkit.data.tasks.conll import read_conll
        from bertkit.tasks import TaggingAdapter, tag_label_list

        train = read_conll(root / "conll2003" / "train.txt")[:train_n]
        dev = read_conll(root / "conll2003" / "valid.txt")[:dev_n]
        return (
            TaggingAdapter("ner", "conll2003", 128, labels=tag_label_list(train)),
            train,
            dev,
            "CoNLL-2003 valid",
        )
    from bertkit.data.tasks.squad import read_squad
    from bertkit.tasks import SquadAdapter

    train_file, eval_file = squad_split(root)
    train, dev = read_squad(train_file)[:train_n], read_squad(eval_file)[:dev_n]
    return SquadAdapter("squad", "squad1", 256), train, dev, "SQuAD v1.1 24/24 split"


def parity(reference: Any, exported: Any, adapter: Any, features: list, pad_id: int) -> float:
    """Max abs difference of every output, at real tokens, on the first 64 dev features."""
    from bertkit.inference import to_torch

    batch = to_torch(adapter.collate(features[:64], pad_id, training=False), "cpu")
    with torch.inference_mode():
        a, b = reference.eval()(**batch), exported(**batch)
    mask = batch["attention_mask"].bool()
    worst = 0.0
    for name in vars(b):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            continue
        d = (x.float() - y.float()).abs()
        if d.dim() >= 2 and d.shape[:2] == mask.shape:  # per token: real positions only
            d = d[mask]
        worst = max(worst, float(d.max()))
    return worst


def run_row(row: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from bertkit.export import OnnxExportConfig, OnnxModel, export_onnx
    from bertkit.inference import TaskModel

    train_n, dev_n, lr, epochs = PLAN[row]
    train_n, dev_n = args.max_train or train_n, args.max_dev or dev_n
    adapter, train, dev, what = _data(row, root, train_n, dev_n)
    ns = argparse.Namespace(epochs=epochs, max_steps=None, progress=False, bucket_batches=1)
    t0 = time.perf_counter()
    if row in args.folder:  # already fine-tuned on the same subset: score only
        folder = Path(args.folder[row])
    else:
        _, folder = bertkit_run(TaskExamples(adapter, train, {"dev": dev}), [lr], 1, 42, ns)
    t_train = time.perf_counter() - t0
    scores: dict[str, float] = {}
    key = METRIC[row]
    for precision in ("fp32", "int8"):
        tm = TaskModel.load(folder, device="cpu", precision=precision, batch_size=64)
        scores[f"bertkit {precision}"] = tm.run(dev).metrics[key]
    onnx_dir = Path(tempfile.mkdtemp(prefix=f"int8q-{row}-"))
    ratio, diff = 0.0, 0.0
    for name, cfg in (
        ("fp32", OnnxExportConfig(optimize=True)),
        ("int8", OnnxExportConfig(optimize=True, quantize="int8")),
    ):
        out = export_onnx(folder, onnx_dir / name / "model.onnx", cfg)
        model = OnnxModel(out.path)
        tm = TaskModel.load(
            out.path.parent, device="cpu", precision="fp32", model=model, batch_size=64
        )
        scores[f"ORT {name}"] = tm.run(dev).metrics[key]
        if name == "fp32":
            fp32_bytes = out.bytes
            ref = TaskModel.load(folder, device="cpu", precision="fp32")
            feats = adapter.encode(ref.tokenizer, dev[:64], training=False)
            diff = parity(ref.model, model, adapter, feats, ref.tokenizer.pad_token_id or 0)
        else:
            ratio = out.bytes / fp32_bytes
    result = {
        "row": row,
        "folder": str(folder),
        "what": what,
        "train": len(train),
        "dev": len(dev),
        "lr": lr,
        "epochs": epochs,
        "metric": key,
        "scores": scores,
        "onnx_parity_max_abs": diff,
        "int8_size_ratio": ratio,
        "train_seconds": t_train,
    }
    print(json.dumps(result), flush=True)
    return result


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| task (dev subset) | metric | bertkit fp32 | bertkit int8 | drop | ORT fp32 (fused) "
        "| ORT int8 | drop | ORT parity max abs | int8 file / fp32 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        scale = 1 if r["row"] == "squad" else 100  # the SQuAD script reports percentages already
        s = {k: v * scale for k, v in r["scores"].items()}
        lines.append(
            f"| {r['what']} (train {r['train']}, dev {r['dev']}) | {r['metric']} | {s['bertkit fp32']:.2f} | "
            f"{s['bertkit int8']:.2f} | {s['bertkit fp32'] - s['bertkit int8']:+.2f} | {s['ORT fp32']:.2f} | "
            f"{s['ORT int8']:.2f} | {s['bertkit fp32'] - s['ORT int8']:+.2f} | {r['onnx_parity_max_abs']:.1e} | "
            f"{r['int8_size_ratio']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--max-train", type=int, default=None, help="override every row's training subset"
    )
    ap.add_argument("--max-dev", type=int, default=None, help="override every row's dev subset")
    ap.add_argument(
        "--folder",
        nargs="+",
        default=[],
        metavar="ROW=DIR",
        help="score a folder this script fine-tuned before (its log names it) instead of training again",
    )
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    args.folder = dict(f.split("=", 1) for f in args.folder)
    torch.set_num_threads(args.threads)
    from bertkit.cpu import cpu_info

    print(
        f"# int8 quality on {cpu_info().label}, torch {torch.__version__}, {args.threads} thread(s)",
        flush=True,
    )
    results = [run_row(row, args, Path(args.data)) for row in args.rows]
    print("\n" + markdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    sys.exit(main())
