"""The GPU check's driver: each stage in a subprocess of its own, stopped at its cap.

    python -m benchmarks.gpu_check [--out DIR] [--work DIR] [--stages 0,1,2,3,4] [--compile]
    python -m benchmarks.gpu_check --stage5 --corpus FILE_OR_DIR... --glue GLUE_DIR
    python -m benchmarks.gpu_check --dry-run --out DIR      # the same on the CPU, tiny sizes

Writes into OUT (default ``$OUT``): each stage's ``stageN_<name>.json`` (as it goes),
``gpu_check.log`` (every stage's output, in order) and ``gpu_check.json`` (the environment, each
stage's status: passed / failed / skipped / timed out, with the reason, its seconds and cap,
and its JSON; rewritten after every stage), then prints the markdown summary
(``report.markdown``, also in the JSON as ``table_markdown``). At most 8 files land in OUT (the
device tool's limit); shards, runs and weights go to WORK (default: a fresh temporary folder).

A stage that runs past its cap is stopped with its whole process group (pytest's and the
command line's children too), so one hang cannot spend the next stages' time; what it wrote
so far stays. The caps of stages 0-4 add up to 470 s on one H200; stage 5 (``--stage5``)
runs alone, for ``--stage5-minutes`` of pre-training plus ``STAGE5_EXTRA_S``. Exit status 0
when no stage failed or timed out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.gpu_check import report
from benchmarks.gpu_check.common import COMPILE_EXTRA_S, STAGE5_EXTRA_S, STAGES, stage_args

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 5.0
"""After SIGTERM, how long a stopped stage gets before SIGKILL."""


def environment() -> dict[str, Any]:
    """Versions, the device and the commit: what every figure needs beside it."""
    import torch

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cpu_count": os.cpu_count(),
        "transformers": version("transformers"),
        "sentence_transformers": version("sentence-transformers"),
        "device": "cpu (no CUDA)",
    }
    if torch.cuda.is_available():
        env.update(
            device=torch.cuda.get_device_name(0),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
        )
    try:
        env_commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
        # the device machine's copy of the tree may have no .git: the session notes the commit
        env["commit"] = env_commit.stdout.strip() if env_commit.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        env["commit"] = "unknown"
    return env


def run_stage(stage, cap: float, out: Path, work: Path, passthrough: list[str]) -> dict[str, Any]:
    """Run one stage to its end or its cap; returns its summary entry."""
    log = out / "gpu_check.log"
    cmd = [
        sys.executable,
        "-m",
        f"benchmarks.gpu_check.{stage.name}",
        "--out",
        str(out),
        "--work",
        str(work),
        "--budget",
        str(cap),
        *passthrough,
    ]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    if stage.name == "correctness":
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # cuBLAS may then be deterministic (resume)
    (out / stage.file).unlink(missing_ok=True)
    start = log.stat().st_size if log.exists() else 0
    t0 = time.perf_counter()
    timed_out = False
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n===== stage {stage.number} {stage.name} (cap {cap:.0f} s) =====\n")
        f.flush()
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = _stop(proc)
    seconds = round(time.perf_counter() - t0, 2)
    result = _read(out / stage.file)
    status, reason = result.get("status", "failed"), result.get("reason", "")
    if timed_out:
        status, reason = "timed out", f"stopped at its {cap:.0f} s cap"
    elif status == "running" or not result:
        status, reason = "failed", f"exit {code}: {_last_line(log, start)}"
    return {
        "number": stage.number,
        "status": status,
        "reason": reason,
        "seconds": seconds,
        "budget_s": cap,
        "exit_code": code,
        "result": result,
    }


def _stop(proc: subprocess.Popen) -> int | None:
    """End a stage and every process it started (its own process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            continue
    return proc.poll()


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _last_line(log: Path, start: int) -> str:
    """The last line a stage printed (a crash's exception)."""
    with open(log, encoding="utf-8", errors="replace") as f:
        f.seek(start)
        lines = [x for x in f.read().splitlines() if x.strip()]
    return lines[-1][:300] if lines else "no output"


def selected(args: argparse.Namespace) -> list:
    """The stages to run: --stages (default 0-4); --stage5 runs stage 5, alone unless --stages
    names others too."""
    names = {str(s.number): s for s in STAGES} | {s.name: s for s in STAGES}
    wanted = [x for x in (args.stages or "").split(",") if x]
    unknown = [x for x in wanted if x not in names]
    if unknown:
        raise SystemExit(
            f"unknown stage(s) {unknown}: use numbers 0-5 or {[s.name for s in STAGES]}"
        )
    chosen = {names[x].number for x in wanted}
    if not wanted and not args.stage5:
        chosen = {0, 1, 2, 3, 4}
    if args.stage5:
        chosen.add(5)
    elif 5 in chosen:
        raise SystemExit("stage 5 runs with --stage5 (with --corpus and --glue)")
    return [s for s in STAGES if s.number in sorted(chosen)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--out", type=Path, default=os.environ.get("OUT"), help="results folder (default: $OUT)"
    )
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="shards, runs, weights (default: a fresh temporary folder)",
    )
    ap.add_argument("--stages", default="", help="comma list of stages (numbers or names)")
    ap.add_argument(
        "--stage5", action="store_true", help="run stage 5 (a session of its own: ~10 minutes)"
    )
    stage_args(ap)
    args = ap.parse_args(argv)
    if args.out is None:
        ap.error("give --out DIR or set OUT")
    stages = selected(args)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="bertkit-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    env = environment()
    if not args.dry_run and env["device"].startswith("cpu"):
        print("no CUDA device: the GPU check runs on a GPU machine (--dry-run runs it on the CPU)")
        return 2
    passthrough = ["--stage5-minutes", str(args.stage5_minutes)]
    passthrough += ["--dry-run"] if args.dry_run else []
    passthrough += ["--compile"] if args.compile else []
    passthrough += ["--corpus", *map(str, args.corpus)] if args.corpus else []
    passthrough += ["--glue", str(args.glue)] if args.glue else []
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    command = " ".join(["python -m benchmarks.gpu_check", *(argv or sys.argv[1:])])
    summary: dict[str, Any] = {
        "started": started,
        "command": command,
        "dry_run": args.dry_run,
        "work": str(work),
        "env": env,
        "stages": {},
    }
    t0 = time.perf_counter()
    for stage in stages:
        cap = stage.budget_s or args.stage5_minutes * 60 + STAGE5_EXTRA_S
        cap += COMPILE_EXTRA_S if args.compile and stage.name == "pretrain_speed" else 0
        print(f"stage {stage.number} {stage.name}: {stage.title} (cap {cap:.0f} s) ...", flush=True)
        entry = run_stage(stage, cap, out, work, passthrough)
        summary["stages"][stage.name] = entry
        summary["seconds"] = round(time.perf_counter() - t0, 2)
        print(
            f"stage {stage.number} {stage.name}: {entry['status']} in {entry['seconds']:.0f} s"
            + (f" ({entry['reason']})" if entry["reason"] else ""),
            flush=True,
        )
        _write(out, summary)
    summary["table_markdown"] = report.markdown(summary)
    _write(out, summary)
    print("\n" + summary["table_markdown"], flush=True)
    bad = [n for n, e in summary["stages"].items() if e["status"] in ("failed", "timed out")]
    return 1 if bad else 0


def _write(out: Path, summary: dict[str, Any]) -> None:
    tmp = out / "gpu_check.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / "gpu_check.json")


if __name__ == "__main__":
    sys.exit(main())
