"""Run the speed benchmarks side by side and print a markdown table (+ JSON).

python -m benchmarks                 # all rows (about 20-30 minutes on 2 cores)
python -m benchmarks --quick         # fewer repeats, no base rows
python -m benchmarks --json out.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys

import torch

from benchmarks.flops import matmul_peaks_gflops
from benchmarks.speed import Row, finetune_row, inference_row, inference_stream_row, pretraining_row

IMPLS = ("bertkit", "hf-sdpa", "hf-eager")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer repeats; skip the base rows")
    ap.add_argument(
        "--only", default="", help="comma list of row groups: pretrain,finetune,infer,tokenizer"
    )
    ap.add_argument("--sizes", default="", help="pre-training sizes (default tiny,mini,small,base)")
    ap.add_argument("--precisions", default="fp32,bf16", help="comma list: fp32,bf16")
    ap.add_argument("--json", default="benchmarks/results.json", help="where to write the results")
    ap.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's, all cores)"
    )
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    groups = (
        set(args.only.split(",")) if args.only else {"pretrain", "finetune", "infer", "tokenizer"}
    )
    unknown = groups - {"pretrain", "finetune", "infer", "tokenizer"}
    if unknown:
        ap.error(f"unknown row group(s) {sorted(unknown)}: use pretrain,finetune,infer,tokenizer")
    reps = 3 if args.quick else 5
    precisions = args.precisions.split(",")

    from bertkit import __version__, env_report, hardware
    from bertkit.cli.env import format_report

    # the machine and each kernel decision, first: every figure needs it
    env = env_report.report(__version__)
    print(format_report(env), flush=True)

    # only the precisions asked for: without native bf16, a 2048^3 bf16 matmul takes minutes
    dtypes = {"fp32": "float32", "bf16": "bfloat16"}
    by_kernel = {dtypes[p]: matmul_peaks_gflops(dtypes[p]) for p in precisions}
    peaks = {p: max(v.values()) for p, v in by_kernel.items()}
    described = "; ".join(
        f"{p} " + ", ".join(f"{k} {v:.0f}" for k, v in kernels.items())
        for p, kernels in by_kernel.items()
    )
    print(
        f"matmul peak (2048^3, best of 10, GFLOP/s): {described}; "
        f"torch threads {torch.get_num_threads()}"
    )
    rows: list[Row] = []
    if "pretrain" in groups:
        sizes = ["tiny", "mini", "small"] + ([] if args.quick else ["base"])
        if args.sizes:
            sizes = args.sizes.split(",")
        for precision in precisions:
            for size in sizes:
                batch = 32 if size != "base" else 8
                rows.append(
                    pretraining_row(size, precision, batch, 128, reps if size != "base" else 2)
                )
                _print_row(rows[-1], peaks)
    if "finetune" in groups:
        for precision in precisions:
            rows.append(finetune_row(precision, 32, 128, reps))
            _print_row(rows[-1], peaks)
    if "infer" in groups:
        rng = random.Random(0)
        mixed = [rng.randint(8, 128) for _ in range(32)]
        stream = [rng.randint(8, 128) for _ in range(256)]
        for precision in precisions:
            rows.append(inference_row(precision, 32, [128] * 32, "uniform 128", reps))
            _print_row(rows[-1], peaks)
            rows.append(inference_row(precision, 32, mixed, "mixed 8..128 one batch", reps))
            _print_row(rows[-1], peaks)
            rows.append(inference_stream_row(precision, 32, stream, "mixed 8..128 stream", reps))
            _print_row(rows[-1], peaks)
    table = markdown_table(rows, peaks)
    extra = ""
    if "tokenizer" in groups:
        from benchmarks.tokenizer import summary_rows

        extra = summary_rows()
    print()
    print("command: python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(
        f"Measured {dt.date.today().isoformat()} on {hardware.cpu_info().label}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; kernels: "
        + ", ".join(f"{k} {d['choice']}" for k, d in env["decisions"].items())
    )
    print(table)
    if extra:
        print(extra)
    results = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(),
        "env": env,
        "peak_gflops": peaks,
        "peak_gflops_by_kernel": by_kernel,
        "rows": [
            {
                "name": r.name,
                "precision": r.precision,
                "unit": r.unit,
                "rate": {i: r.rate(i) for i in r.seconds},
                "mfu": {i: r.mfu(i, _peak(r, peaks)) for i in r.seconds},
                "seconds": r.seconds,
                "peak_gflops": _peak(r, peaks),
            }
            for r in rows
        ],
    }
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    return 0


def _peak(row: Row, peaks: dict[str, float]) -> float:
    """The row's own interleaved matmul rate, or at least the start-up peak (whichever is higher:
    a matmul slowed by load is still the best the machine offered at that moment)."""
    return max(row.peak_gflops, peaks.get("bfloat16" if row.precision == "bf16" else "float32", 0))


def _print_row(row: Row, peaks: dict[str, float]) -> None:
    parts = [
        f"{i} {row.rate(i):,.0f} {row.unit} (MFU {row.mfu(i, _peak(row, peaks)):.0%})"
        for i in row.seconds
    ]
    print(f"{row.name} [{row.precision}]: " + "; ".join(parts), flush=True)


def markdown_table(rows: list[Row], peaks: dict[str, float]) -> str:
    lines = [
        "| benchmark | precision | bertkit | HF sdpa | HF eager | bertkit / sdpa | MFU bertkit "
        "| MFU sdpa | matmul peak GFLOP/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = _peak(r, peaks)
        lines.append(
            f"| {r.name} | {r.precision} | {r.rate('bertkit'):,.0f} {r.unit} | {r.rate('hf-sdpa'):,.0f} | "
            f"{r.rate('hf-eager'):,.0f} | {r.rate('bertkit') / r.rate('hf-sdpa'):.2f}x | "
            f"{r.mfu('bertkit', p):.0%} | {r.mfu('hf-sdpa', p):.0%} | {p:.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
