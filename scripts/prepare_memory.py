"""Peak memory of ``bertkit prepare-pretraining`` as the corpus grows (issue: bounded memory).

Runs the command on the first ``--small`` files and then on the first ``--large`` files of a corpus
folder (default: 5 and 25 WikiExtractor files of ~1 MB each), each in a fresh process, and reports
for each run (``--single-file``: the files concatenated into one): input MB, wall seconds,
instances, instances/s, the peak RSS summed over the whole process tree (main + workers, sampled
every 10 ms from /proc) and the largest single process's peak RSS (from the kernel, ``wait4``
ru_maxrss, exact). Passes when the larger input's peak tree RSS is within ``--tolerance`` (10%) of
the smaller one's.

    .venv/bin/python scripts/prepare_memory.py --corpus ../shared/data/pretraining_text/wikipedia \\
        --vocab MODEL_DIR/vocab.txt

``--repeats 1 4 16``: throughput as the corpus grows instead: every file of the corpus repeated
k times (links under new names, so each copy is a file of its own with its own RNG), one run per
k, a table of input MB, seconds, MB/s, MB/s per core (per worker process), instances/s and peak
RSS; ``--torchrun N`` runs each through ``torchrun --nproc-per-node N`` (``--workers`` per rank).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bertkit.cpu import cpu_info


def _tree_rss_kib(root: int) -> int:
    """Sum of VmRSS over ``root`` and all its descendants (KiB); 0 for processes gone."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


def measure(
    files: list[Path], vocab: Path, out: Path, workers: int, extra: list[str], ranks: int = 0
) -> dict:
    launch = [sys.executable, "-m", "bertkit"]
    if ranks:
        launch = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(ranks),
            "-m",
            "bertkit",
        ]
    cmd = [*launch, "prepare-pretraining", "--input", *map(str, files)]
    cmd += ["--vocab", str(vocab), "--output", str(out), "--max-seq-length", "128"]
    cmd += ["--num-workers", str(workers), *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kib(proc.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"prepare-pretraining failed:\n{stdout}")
    manifest = json.loads((out / "manifest.json").read_text())
    instances = sum(manifest["num_instances"].values())
    return {
        "files": len(files),
        "input_mb": sum(f.stat().st_size for f in files) / 1e6,
        "seconds": seconds,
        "instances": instances,
        "instances_per_s": instances / seconds,
        "tokens": manifest["splits"]["train"]["tokens"],
        "peak_tree_rss_mb": peak / 1024,
        "peak_single_process_rss_mb": usage.ru_maxrss / 1024,
        "summary": stdout.strip(),
    }


def concatenate(files: list[Path], target: Path) -> Path:
    with open(target, "wb") as out:
        for f in files:
            out.write(f.read_bytes())
    return target


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, required=True, help="folder of corpus files")
    p.add_argument("--vocab", type=Path, required=True)
    p.add_argument("--small", type=int, default=5, help="files in the small run")
    p.add_argument("--large", type=int, default=25, help="files in the large run")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument(
        "--single-file",
        action="store_true",
        help="concatenate the files into one input (exercises the in-file memory bounds)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        nargs="+",
        default=None,
        help="throughput table over the corpus repeated k times (e.g. 1 4 16)",
    )
    p.add_argument("--torchrun", type=int, default=0, metavar="N", help="ranks (with --repeats)")
    p.add_argument("--json", type=Path, default=None, help="write the --repeats rows here")
    p.add_argument("extra", nargs="*", help="more prepare-pretraining options (after --)")
    args = p.parse_args()
    if args.repeats:
        return scale(args)
    files = sorted(f for f in args.corpus.iterdir() if f.is_file())
    if len(files) < args.large:
        raise SystemExit(f"{args.corpus}: need {args.large} files, found {len(files)}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (args.small, args.large):
            inputs = files[:n]
            if args.single_file:
                inputs = [concatenate(inputs, Path(tmp) / f"corpus{n}.txt")]
            r = measure(inputs, args.vocab, Path(tmp) / f"out{n}", args.workers, args.extra)
            results.append(r)
            print(
                f"{r['files']:3d} files {r['input_mb']:6.1f} MB: {r['seconds']:6.1f} s, "
                f"{r['instances']} instances ({r['instances_per_s']:.0f}/s), {r['tokens']} tokens, "
                f"peak RSS tree {r['peak_tree_rss_mb']:.1f} MB, "
                f"largest process {r['peak_single_process_rss_mb']:.1f} MB"
            )
    small, large = results
    growth = large["peak_tree_rss_mb"] / small["peak_tree_rss_mb"] - 1
    single = large["peak_single_process_rss_mb"] / small["peak_single_process_rss_mb"] - 1
    ratio = large["input_mb"] / small["input_mb"]
    ok = growth <= args.tolerance
    print(
        f"input x{ratio:.1f}: peak tree RSS {growth:+.1%}, largest process {single:+.1%} "
        f"(limit {args.tolerance:+.0%}): {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


def scale(args: argparse.Namespace) -> int:
    """The ``--repeats`` table (see the module docstring)."""
    files = sorted(f for f in args.corpus.iterdir() if f.is_file())
    cores = args.workers * max(1, args.torchrun)
    how = f"{args.torchrun} torchrun ranks x " if args.torchrun else ""
    print(
        f"prepare-pretraining, {how}{args.workers} worker(s): {cores} processes building; "
        f"CPU: {cpu_info().label}, {os.cpu_count()} cores"
    )
    print(
        f"{'input':>8} {'MB':>8} {'s':>8} {'MB/s':>7} {'MB/s/core':>10} {'inst/s':>8} {'RSS MB':>8}"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.repeats:
            inputs = []
            for j in range(k):
                for f in files:
                    link = Path(tmp) / f"in{k}" / f"copy{j:03d}-{f.name}"
                    link.parent.mkdir(exist_ok=True)
                    link.symlink_to(f.resolve())
                    inputs.append(link)
            r = measure(
                inputs,
                args.vocab,
                Path(tmp) / f"out{k}",
                args.workers,
                args.extra,
                ranks=args.torchrun,
            )
            r.update(repeat=k, mb_per_s=r["input_mb"] / r["seconds"], cores=cores)
            r["mb_per_s_per_core"] = r["mb_per_s"] / cores
            rows.append(r)
            print(
                f"{f'{k}x':>8} {r['input_mb']:8.1f} {r['seconds']:8.1f} {r['mb_per_s']:7.2f} "
                f"{r['mb_per_s_per_core']:10.3f} {r['instances_per_s']:8.0f} "
                f"{r['peak_tree_rss_mb']:8.0f}"
            )
            shutil.rmtree(Path(tmp) / f"out{k}")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_info().label, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
