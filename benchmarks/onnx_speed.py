"""bertkit vs ONNX Runtime on CPU inference: the real MiniLM, same inputs, one run, interleaved.

Candidates: bertkit fp32, bf16 (autocast) and int8 (``--precision int8``) against the exported
file in ONNX Runtime: plain (``bertkit export onnx``), fused (``--optimize``) and fused + int8
(``--optimize --quantize int8``). Rows, batch 32:

- *uniform 128*: one batch of 32 full-length sequences (nothing to skip or sort);
- *mixed, one padded batch*: one batch of 32 lengths drawn from 8..128, padded to its longest;
- *mixed stream*: 256 sequences of 8..128 tokens, 32 at a time, each side given both batchings:
  ``sorted`` (bertkit's: ``length_batches``, longest first) and ``arrival`` (padded arrival-order
  batches, what a DataLoader or a pipeline gives ONNX Runtime). Collation is inside every timed
  call.

Each thread count runs its own interleaved round (A B C ... A B C ..., median of ``--repeats``).
ONNX Runtime gets ``intra_op_num_threads`` = the torch thread count and spinning off (its pool
threads would otherwise spin after each call and take the cores from the next candidate).

    python -m benchmarks.onnx_speed --threads 1,2 --json benchmarks/results/onnx_speed.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.speed import minilm_dir
from benchmarks.timing import interleaved_seconds

EXPORTS = {
    "ort-plain": {},
    "ort-fused": {"optimize": True},
    "ort-int8": {"optimize": True, "quantize": "int8"},
}
BERTKIT = ("bertkit-fp32", "bertkit-bf16", "bertkit-int8")


def make_rows(lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [
        [101, *torch.randint(1000, 30522, (n - 2,), generator=g).tolist(), 102] for n in lengths
    ]


def build(
    threads: int, files: dict[str, Path], ablate_gelu: bool
) -> dict[str, Callable[[dict], None]]:
    """name -> run(batch) for every candidate at ``threads``."""
    from bertkit.export.runtime import OnnxModel
    from bertkit.interop import load_pretrained
    from bertkit.model import BertModel
    from bertkit.model.quantize import quantize_int8

    torch.set_num_threads(threads)
    fp32 = load_pretrained(minilm_dir(), BertModel).eval()
    int8 = quantize_int8(load_pretrained(minilm_dir(), BertModel))

    def ours(model, bf16: bool) -> Callable[[dict], None]:
        def run(batch: dict) -> None:
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                model(**batch)

        return run

    fns = {
        "bertkit-fp32": ours(fp32, False),
        "bertkit-bf16": ours(fp32, True),
        "bertkit-int8": ours(int8, False),
    }
    if ablate_gelu:  # the same fp32 model with the GELU outside the up-projection (an A/B)
        from bertkit.model import encoder

        plain = fns["bertkit-fp32"]

        def unfused(batch: dict) -> None:
            fused, encoder.linear_gelu = encoder.linear_gelu, lambda linear, x: None
            try:
                plain(batch)
            finally:
                encoder.linear_gelu = fused

        fns["bertkit-fp32-gelu-apart"] = unfused
    for name, path in files.items():
        session = OnnxModel(path, threads=threads, spinning=False).session

        def run(batch: dict, s=session) -> None:
            s.run(None, {k: v.numpy() for k, v in batch.items()})

        fns[name] = run
    return fns


def one_batch(lengths: list[int]) -> dict:
    from bertkit.model.batching import collate

    return collate(make_rows(lengths, 2), None, 0)


def measure(
    threads: int,
    files: dict[str, Path],
    repeats: int,
    mixed: list[int],
    stream: list[int],
    ablate_gelu: bool = False,
) -> list[dict]:
    from bertkit.model.batching import collate, length_batches

    fns = build(threads, files, ablate_gelu)
    out = []
    for label, lengths in (
        ("uniform 128, batch 32", [128] * 32),
        ("mixed 8..128, one padded batch of 32", mixed),
    ):
        batch = one_batch(lengths)
        secs = interleaved_seconds(
            {n: (lambda f=f, b=batch: f(b)) for n, f in fns.items()}, repeats
        )
        out.append({"row": label, "threads": threads, "seqs": len(lengths), "seconds": secs})
        print(_line(out[-1]), flush=True)
    rows = make_rows(stream, 3)
    arrival = [list(range(k, min(k + 32, len(rows)))) for k in range(0, len(rows), 32)]

    def over(fn, sort: bool) -> Callable[[], None]:
        def run() -> None:
            for idx in length_batches(stream, 32) if sort else arrival:
                fn(collate([rows[i] for i in idx], None, 0))

        return run

    cands = {
        f"{n} {b}": over(f, b == "sorted") for n, f in fns.items() for b in ("sorted", "arrival")
    }
    secs = interleaved_seconds(cands, repeats)
    out.append(
        {
            "row": f"mixed stream, 256 seqs of 8..128 ({sum(stream):,} tokens)",
            "threads": threads,
            "seqs": len(stream),
            "seconds": secs,
        }
    )
    print(_line(out[-1]), flush=True)
    return out


def _line(r: dict) -> str:
    rates = "; ".join(f"{n} {r['seqs'] / s:.1f}" for n, s in r["seconds"].items())
    return f"[{r['threads']} thread(s)] {r['row']}: {rates} seq/s"


def table(results: list[dict]) -> str:
    """One line per (row, batching, threads): seq/s of each candidate and the goal ratios."""
    lines = [
        "| row | threads | batching | bertkit fp32 | bf16 | int8 | ORT plain | ORT fused | ORT fused+int8 | "
        "fp32 / ORT fused | int8 / ORT int8 | int8 / bertkit fp32 |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        keys = [""] if "stream" not in r["row"] else [" sorted", " arrival"]
        for k in keys:
            rate = {n: r["seqs"] / r["seconds"][n + k] for n in (*BERTKIT, *EXPORTS)}
            lines.append(
                f"| {r['row']} | {r['threads']} | {k.strip() or 'same batch'} | "
                + " | ".join(f"{rate[n]:.1f}" for n in (*BERTKIT, *EXPORTS))
                + f" | {rate['bertkit-fp32'] / rate['ort-fused']:.2f}x | {rate['bertkit-int8'] / rate['ort-int8']:.2f}x"
                f" | {rate['bertkit-int8'] / rate['bertkit-fp32']:.2f}x |"
            )
        if keys != [""]:  # each side with its own batching
            s = r["seconds"]
            own = s["ort-fused arrival"] / s["bertkit-fp32 sorted"]
            best = min(s["ort-fused arrival"], s["ort-fused sorted"]) / s["bertkit-fp32 sorted"]
            own8 = s["ort-int8 arrival"] / s["bertkit-int8 sorted"]
            lines.append(
                f"| {r['row']} | {r['threads']} | own (bertkit sorted vs ORT arrival) | | | | | | | "
                f"{own:.2f}x (vs ORT sorted: {best:.2f}x) | {own8:.2f}x | |"
            )
    return "\n".join(lines)


def gelu_ab(results: list[dict]) -> str:
    """With --ablate-gelu: bertkit fp32 with the GELU fused into the up-projection / apart."""
    lines = []
    for r in results:
        for k in [""] if "stream" not in r["row"] else [" sorted", " arrival"]:
            apart = r["seconds"].get("bertkit-fp32-gelu-apart" + k)
            if apart is not None:
                ratio = apart / r["seconds"]["bertkit-fp32" + k]
                lines.append(
                    f"- {r['row']}{k}, {r['threads']} thread(s): GELU fused {ratio:.2f}x apart"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--ablate-gelu",
        action="store_true",
        help="also time bertkit fp32 with the GELU outside the up-projection",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from bertkit import __version__, env_report, hardware
    from bertkit.cli.env import format_report
    from bertkit.export import OnnxExportConfig, export_onnx

    print(format_report(env_report.report(__version__)), flush=True)
    rng = random.Random(0)
    mixed = [rng.randint(8, 128) for _ in range(32)]
    stream = [rng.randint(8, 128) for _ in range(256)]
    tmp = Path(tempfile.mkdtemp(prefix="onnx-speed-"))
    files = {
        n: export_onnx(minilm_dir(), tmp / n / "model.onnx", OnnxExportConfig(**o)).path
        for n, o in EXPORTS.items()
    }
    results = []
    for t in (int(x) for x in args.threads.split(",")):
        results += measure(t, files, args.repeats, mixed, stream, args.ablate_gelu)
    print(
        "\ncommand: python -m benchmarks.onnx_speed "
        + " ".join(argv if argv is not None else sys.argv[1:])
    )
    print(
        f"CPU: {hardware.cpu_info().label}; torch {torch.__version__}; kernels: "
        + ", ".join(f"{k} {d.choice}" for k, d in hardware.decisions().items())
    )
    print(table(results))
    print(gelu_ab(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
