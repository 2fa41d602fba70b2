"""Load test of ``bertkit serve``'s /rerank against a sentence-transformers CrossEncoder server.

    python -m benchmarks.rerank_load --cross-encoder DIR          # concurrency 8 and 64
    python -m benchmarks.rerank_load --cross-encoder DIR --quick  # a smoke run

Each request is TEI's ``{"query", "texts"}`` with ``--texts-per-request`` passages (default 10)
cut from the built-in Wikipedia sample to lengths spread over 32..200 tokens, and a query of 6-16
words from the same corpus; request i carries the same body on both sides. Two sides, same
threads, same run, levels alternating:

  bertkit   ``bertkit serve --model rr=DIR`` in a subprocess: the (query, text) windows of
            concurrent requests are merged into token-budget forward passes
  baseline  benchmarks/baseline_server.py --cross-encoder DIR: FastAPI + sentence-transformers,
            one ``CrossEncoder.predict(pairs)`` per request in a sync route (its thread pool)

Throughput is pairs scored per second (requests x texts). Both sides run ``--precision``
(fp32 by default: sentence-transformers' CrossEncoder runs fp32 on the CPU). The client is
bounded in requests and seconds per level and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
from pathlib import Path

from benchmarks.serve_load import (
    DEFAULT_CORPUS,
    CpuWatch,
    Level,
    ServerProcess,
    drive,
    free_port,
    make_texts,
    metrics_delta,
    scrape,
)

ROOT = Path(__file__).resolve().parents[1]


def payloads(corpus: Path, tokenizer, n: int, k: int, seed: int) -> list[bytes]:
    texts, _ = make_texts(corpus, tokenizer, n * k, seed, 32, 200)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = texts[rng.randrange(len(texts))].split()
        start = rng.randrange(max(1, len(words) - 16))
        query = " ".join(words[start : start + rng.randint(6, 16)])
        out.append(json.dumps({"query": query, "texts": texts[i * k : (i + 1) * k]}).encode())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cross-encoder", required=True, help="a CrossEncoder folder (one output)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--concurrency", default="8,64")
    ap.add_argument("--requests", type=int, default=96, help="requests per level")
    ap.add_argument("--texts-per-request", type=int, default=10)
    ap.add_argument("--max-seconds", type=float, default=180.0, help="time limit per level")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "auto"))
    ap.add_argument("--quick", action="store_true", help="a smoke run: 16 requests per level")
    ap.add_argument("--json", type=Path, default=None, help="write the levels here")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.requests = min(args.requests, 16)

    import torch

    from bertkit import hardware
    from bertkit.tokenizer import BertTokenizer

    threads = args.threads or hardware.idle_threads()
    torch.set_num_threads(threads)
    print(
        f"{hardware.cpu_info().label}; {threads} threads on both sides; torch {torch.__version__}; "
        f"precision {args.precision}",
        flush=True,
    )
    k = args.texts_per_request
    bodies = payloads(
        args.corpus, BertTokenizer.from_pretrained(args.cross_encoder), args.requests, k, args.seed
    )

    servers: dict[str, ServerProcess] = {}
    levels: list[Level] = []
    try:
        port = free_port()
        servers["bertkit"] = ServerProcess(
            "bertkit",
            [
                sys.executable,
                "-m",
                "bertkit",
                "serve",
                "--model",
                f"rr={args.cross_encoder}",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--threads",
                str(threads),
                "--precision",
                args.precision,
                "--max-client-batch-size",
                str(max(32, k)),
            ],
            port,
        )
        port = free_port()
        baseline = [
            sys.executable,
            str(ROOT / "benchmarks/baseline_server.py"),
            "--cross-encoder",
            args.cross_encoder,
            "--port",
            str(port),
            "--threads",
            str(threads),
        ]
        if args.precision != "fp32":
            print("note: the baseline runs fp32 whatever --precision says", flush=True)
        servers["baseline"] = ServerProcess("baseline", baseline, port)
        for s in servers.values():
            print(f"{s.name}: healthy after {s.wait_healthy():.1f} s", flush=True)
        for c in [int(x) for x in args.concurrency.split(",")]:
            for name, s in servers.items():
                watch = CpuWatch([s.proc.pid])
                level = Level(name, c)
                before = scrape(s.url) if name == "bertkit" else None
                asyncio.run(
                    drive(
                        s.url + "/rerank",
                        bodies,
                        k,
                        c,
                        args.requests,
                        args.max_seconds,
                        level,
                        alive=s.alive,
                    )
                )
                level.others_cores, level.client_cores = watch.others_cores(), None
                if before is not None:  # how many requests' pairs each forward pass held
                    level.server = metrics_delta(before, scrape(s.url), level.seconds)
                levels.append(level)
                print(
                    f"{name:>8} c={c:<3} {level.requests:>4} requests {level.failures} failed  "
                    f"{level.ips:7.1f} pairs/s  p50 {level.pct(50):7.0f} ms  p99 {level.pct(99):7.0f} ms  "
                    f"(others kept {level.others_cores:.2f} cores busy)"
                    + (
                        f"; {level.server['forward_passes']:.0f} forward passes "
                        f"of {level.server['mean_batch_size']:.1f} pairs"
                        if level.server.get("forward_passes")
                        else ""
                    ),
                    flush=True,
                )
    finally:
        for s in servers.values():
            s.stop()
    by = {(lv.side, lv.concurrency): lv for lv in levels}
    print(f"\n{'concurrency':>11} {'bertkit pairs/s':>16} {'baseline pairs/s':>17} {'ratio':>6}")
    for c in sorted({lv.concurrency for lv in levels}):
        a, b = by.get(("bertkit", c)), by.get(("baseline", c))
        if a and b:
            print(
                f"{c:>11} {a.ips:>16.1f} {b.ips:>17.1f} {a.ips / b.ips if b.ips else float('nan'):>6.2f}"
            )
    if args.json:
        args.json.write_text(json.dumps([lv.summary() for lv in levels], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
