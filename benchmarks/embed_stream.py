"""`bertkit embed` on a corpus: the single-file path (all lines and vectors in memory, one .npy)
against the streamed folder path (shards + manifest, memory bounded by --sort-window).

Each run is its own process (so peak RSS is that run's alone), timed around the CLI's ``main``
(model loading included). A tiny random 2-layer H=32 model and random lines of 5-50 words keep
the model cheap, so the numbers show the reading/holding/writing overhead, not the encoder.

    nice .venv/bin/python -m benchmarks.embed_stream [--sizes 20000 80000 320000] [--out DIR]
    # a real model on real text: the first N non-empty lines of a text file (cycled if shorter)
    .venv/bin/python -m benchmarks.embed_stream --sizes 20000 --model path/to/all-MiniLM-L6-v2 \\
        --text ../shared/data/pretraining_text/wikipedia/wiki_00
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from bertkit.cpu import cpu_info

WORDS = [f"w{i}" for i in range(500)]
_RUN = """
import json, resource, sys, time
from bertkit.cli.main import main
start = time.perf_counter()
rc = main(sys.argv[1:])
seconds = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rc": rc, "seconds": seconds, "peak_rss_mib": rss}))
"""


def make_model(folder: Path) -> Path:
    import torch

    from bertkit.config import BertConfig
    from bertkit.interop import save_pretrained
    from bertkit.model import BertModel
    from bertkit.tokenizer import BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (folder / "vocab.txt").write_text("\n".join(specials + WORDS) + "\n", encoding="utf-8")
    tok = BertTokenizer(folder / "vocab.txt")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    save_pretrained(BertModel(config), folder / "model", tokenizer=tok)
    return folder / "model"


def make_corpus(path: Path, lines: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choices(WORDS, k=rng.randint(5, 50))) + "\n")


def take_lines(source: Path, path: Path, lines: int) -> None:
    """The first ``lines`` non-empty lines of ``source`` (cycled if it has fewer) into ``path``."""
    text = [x for x in source.read_text(encoding="utf-8").splitlines() if x.strip()]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            f.write(text[i % len(text)] + "\n")


def run_one(argv: list[str], threads: int) -> dict:
    # a fixed thread count: on a shared 2-core machine torch's default 2 threads spin against the
    # other load (measured 177 lines/s at 2 threads vs 7,305 at 1 for 2,000 lines)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "BERTKIT_PROGRESS": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 80_000, 320_000])
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    ap.add_argument("--out", type=Path, default=None, help="keep files here (default: a temp dir)")
    ap.add_argument(
        "--model", type=Path, default=None, help="a model folder (default: tiny random)"
    )
    ap.add_argument("--text", type=Path, default=None, help="take lines from this file")
    args = ap.parse_args(argv)
    print(
        f"CPU: {cpu_info().label}; {args.threads} torch thread(s); model {args.model or 'tiny H=32'}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        model = args.model or make_model(root / "tiny")
        rows = []
        for n in args.sizes:
            corpus = root / f"corpus-{n}.txt"
            if args.text:
                take_lines(args.text, corpus, n)
            else:
                make_corpus(corpus, n)
            base = ["embed", "--model", str(model), "--input", str(corpus), "--precision", "fp32"]
            for mode, out in (
                ("in-memory .npy", root / f"v-{n}.npy"),
                ("streamed DIR/", root / f"v-{n}"),
            ):
                target = f"{out}/" if mode.startswith("streamed") else str(out)
                r = run_one([*base, "--output", target], args.threads)
                rows.append((n, mode, n / r["seconds"], r["peak_rss_mib"], r["seconds"]))
                print(
                    f"{n:>8} {mode:<15} {rows[-1][2]:>9.0f} lines/s {rows[-1][3]:>7.0f} MiB "
                    f"{rows[-1][4]:>7.1f} s",
                    flush=True,
                )
    print("\n| lines | output | lines/s | peak RSS (MiB) | seconds |\n|---:|---|---:|---:|---:|")
    for n, mode, rate, rss, seconds in rows:
        print(f"| {n:,} | {mode} | {rate:,.0f} | {rss:,.0f} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
