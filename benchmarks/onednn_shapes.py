"""Memory and speed of a server's forward passes under each way of running the products.

    python -m benchmarks.onednn_shapes                    # 400 passes per mode, 3 modes
    python -m benchmarks.onednn_shapes --passes 100 --precision int8

A server sees a new token count in almost every pass, and oneDNN keeps memory for every shape it
has run. Each mode runs in a fresh process: all-MiniLM-L6-v2 embeds ``--passes`` batches of 1-12
random texts (8..256 tokens, the built-in Wikipedia sample, fixed seed; the same batches in every
mode) through the server's own path (``Embedder.embed_encodings``, ``malloc_trim`` after each
pass), and reports RSS every 50 passes and the seconds spent in the passes.

  aten      ``kernels.avoid_onednn``: BLAS for fp32, no fused GELU
  onednn    the process's defaults (oneDNN's fused GELU; oneDNN fp32 products where the probe
            chose them)
  bucketed  the defaults under ``kernels.bound_shapes``: rows rounded up to one of 96 buckets

The modes run in the order given, then again in reverse, so drift of the machine's speed hits
each alike; the table shows both rounds' pass seconds. Prints a table; ``--json`` writes it.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("aten", "onednn", "bucketed")


def _child(mode: str, passes: int, seed: int, precision: str, threads: int) -> dict:
    import ctypes

    import torch

    from benchmarks.serve_load import DEFAULT_CORPUS, make_texts, rss_bytes
    from benchmarks.tokenizer import minilm_dir
    from bertkit.inference import Embedder
    from bertkit.model import kernels

    torch.set_num_threads(threads)
    if mode == "aten":
        kernels.avoid_onednn("benchmark")
    elif mode == "bucketed":
        kernels.bound_shapes("benchmark")
    emb = Embedder.load(minilm_dir(), precision=precision, device="cpu")
    emb.show_progress = False
    texts, _ = make_texts(DEFAULT_CORPUS, emb.tokenizer, 2000, seed)
    rng = random.Random(seed)
    batches = [rng.sample(range(len(texts)), rng.randint(1, 12)) for _ in range(passes)]
    trim = ctypes.CDLL("libc.so.6").malloc_trim
    rss, seconds = {}, 0.0
    for i, idx in enumerate(batches, 1):
        encodings = emb.window(emb.encode([texts[j] for j in idx])).inputs
        t0 = time.perf_counter()
        emb.embed_encodings(encodings)
        seconds += time.perf_counter() - t0
        trim(0)
        if i % 50 == 0:
            rss[i] = rss_bytes() / 2**20
    return {"mode": mode, "rss_mib": rss, "pass_seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--passes", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        out = _child(args.child, args.passes, args.seed, args.precision, args.threads)
        print(json.dumps(out))
        return 0
    from bertkit import __version__, env_report
    from bertkit.cli.env import format_report

    env = env_report.report(__version__)
    print(format_report(env), flush=True)
    modes = args.modes.split(",")
    results: dict[str, list[dict]] = {m: [] for m in modes}
    for m in modes + modes[::-1]:
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.onednn_shapes",
            "--child",
            m,
            "--passes",
            str(args.passes),
            "--seed",
            str(args.seed),
            "--precision",
            args.precision,
            "--threads",
            str(args.threads),
        ]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        results[m].append(json.loads(done.stdout.strip().splitlines()[-1]))
        r = results[m][-1]
        print(
            f"  {m}: {r['pass_seconds']:.1f} s in passes, RSS {list(r['rss_mib'].values())[-1]:.0f} MiB",
            flush=True,
        )
    marks = list(results[modes[0]][0]["rss_mib"])
    print(f"\n{args.passes} passes of 1-12 texts, {args.precision}, {args.threads} threads")
    print("| mode | pass seconds (round 1, 2) | RSS MiB after " + ", ".join(marks) + " passes |")
    print("|---|---:|---|")
    for m in modes:
        first = results[m][0]
        secs = ", ".join(f"{r['pass_seconds']:.1f}" for r in results[m])
        print(
            f"| {m} | {secs} | " + ", ".join(f"{v:.0f}" for v in first["rss_mib"].values()) + " |"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "env": env,
                    "precision": args.precision,
                    "passes": args.passes,
                    "threads": args.threads,
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
