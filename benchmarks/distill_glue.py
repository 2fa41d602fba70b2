"""Task distillation on a GLUE task: the same student fine-tuned without and with a teacher, per seed.

For each seed it runs ``bertkit finetune glue`` twice from the same student start: plain (gold labels
only) and distilled (``--teacher``, ``--distill-alpha``, ``--distill-temperature``); the two runs of
a seed share the head initialisation and data order, so the per-seed difference is a paired one.
It reads each run's ``metrics.json`` and prints a markdown table: the dev metric per seed, mean ± std
(sample standard deviation) of each arm, the paired difference (distilled - plain) per seed with its
mean ± std, and the training wall time of every run. A mean difference within the seeds' spread is
no evidence either way.

    python -m benchmarks.distill_glue --teacher /tmp/kd/teacher --student /tmp/kd/student2l \\
        --data-dir /work/shared/data/glue --task SST-2 --seeds 42 43 44 \\
        --max-train-examples 4000 --epochs 2 --batch-size 32 --learning-rate 1e-4 \\
        --max-seq-length 64 --out /tmp/kd/seeds

Each run writes its model to ``--out``/``<arm>-s<seed>``; ``--reuse`` keeps a run whose folder
already holds a ``metrics.json`` (to resume an interrupted benchmark). ``--agreement`` also predicts
dev with the teacher and every run's model (``bertkit predict --precision fp32``) and prints a second
table: how often each student's label is the teacher's, the sign that the soft labels are followed
(with ``--alpha 1`` the gold labels are unused and the student can learn only from the teacher).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.cpu import cpu_info


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0.0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def summary_table(
    metric: str, seeds: Sequence[int], plain: Sequence[float], distilled: Sequence[float]
) -> str:
    """Markdown rows: one per seed (plain, distilled, paired difference), then mean ± std.

    Scores are fractions; the table shows them (and the difference) in points (x 100).
    """
    if not (len(seeds) == len(plain) == len(distilled)) or not seeds:
        raise ValueError("one plain and one distilled score per seed expected")
    rows = [
        f"| seed | plain {metric} | distilled {metric} | distilled - plain |",
        "|---|---|---|---|",
    ]
    diffs = [100 * (d - p) for p, d in zip(plain, distilled, strict=True)]
    for seed, p, d, diff in zip(seeds, plain, distilled, diffs, strict=True):
        rows.append(f"| {seed} | {100 * p:.2f} | {100 * d:.2f} | {diff:+.2f} |")
    (pm, ps), (dm, ds), (fm, fs) = (
        mean_std([100 * v for v in plain]),
        mean_std([100 * v for v in distilled]),
        mean_std(diffs),
    )
    rows.append(
        f"| mean ± std (n={len(seeds)}) | {pm:.2f} ± {ps:.2f} | {dm:.2f} ± {ds:.2f} "
        f"| {fm:+.2f} ± {fs:.2f} |"
    )
    return "\n".join(rows)


def finetune_command(args: argparse.Namespace, seed: int, out: Path, teacher: bool) -> list[str]:
    """The ``bertkit finetune glue`` command line of one run."""
    cmd = [sys.executable, "-m", "bertkit", "finetune", "glue", "--task", args.task]
    cmd += ["--data-dir", args.data_dir, "--model", args.student, "--output", str(out)]
    cmd += ["--overwrite"]  # without --reuse, a run replaces the last one's folder
    cmd += ["--seed", str(seed), "--epochs", str(args.epochs)]
    cmd += ["--batch-size", str(args.batch_size), "--learning-rate", str(args.learning_rate)]
    cmd += ["--max-seq-length", str(args.max_seq_length), "--precision", args.precision]
    if args.max_train_examples is not None:
        cmd += ["--max-train-examples", str(args.max_train_examples)]
    if teacher:
        cmd += ["--teacher", args.teacher, "--distill-alpha", str(args.alpha)]
        cmd += ["--distill-temperature", str(args.temperature)]
    return cmd + list(args.extra)


def run_once(args: argparse.Namespace, seed: int, arm: str) -> dict[str, Any]:
    """Fine-tune one arm for one seed (or reuse its metrics.json); return that metrics.json."""
    out = Path(args.out) / f"{arm}-s{seed}"
    metrics_file = out / "metrics.json"
    if not (args.reuse and metrics_file.exists()):
        cmd = finetune_command(args, seed, out, teacher=arm == "distilled")
        print(f"  {arm} seed {seed}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        print(f"  {arm} seed {seed}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return json.loads(metrics_file.read_text(encoding="utf-8"))


def predict_dev(args: argparse.Namespace, model: str, out: Path) -> list[str]:
    """The dev labels ``model`` predicts, in dev order (``bertkit predict``, cached in ``out``)."""
    if not (args.reuse and out.exists()):
        cmd = [sys.executable, "-m", "bertkit", "predict", "--model", model, "--precision", "fp32"]
        cmd += ["--input", str(Path(args.data_dir) / args.task), "--split", "dev"]
        subprocess.run([*cmd, "--output", str(out)], check=True, stdout=subprocess.DEVNULL)
    lines = out.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["label"] for line in lines if line.strip()]


def agreement(labels: Sequence[str], reference: Sequence[str]) -> float:
    """The fraction of positions where ``labels`` equals ``reference`` (of the same length)."""
    if len(labels) != len(reference) or not labels:
        raise ValueError(f"{len(labels)} and {len(reference)} labels: one per dev example expected")
    return sum(a == b for a, b in zip(labels, reference, strict=True)) / len(labels)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--teacher", required=True, help="fine-tuned teacher folder")
    ap.add_argument("--student", required=True, help="the student's start (a model folder)")
    ap.add_argument("--data-dir", required=True, help="GLUE folder (holding <task>/train.tsv ...)")
    ap.add_argument("--task", default="SST-2")
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    ap.add_argument("--alpha", type=float, default=0.5, help="--distill-alpha of the distilled arm")
    ap.add_argument("--temperature", type=float, default=2.0, help="--distill-temperature")
    ap.add_argument("--max-train-examples", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--learning-rate", type=float, default=1e-4)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument(
        "--precision",
        default="fp32",
        help="both arms' --precision; not auto, which times bf16 against fp32 anew per run and on a "
        "busy machine can give the two arms of a seed different precisions",
    )
    ap.add_argument("--out", required=True, help="folder for the runs' models and metrics")
    ap.add_argument("--reuse", action="store_true", help="keep runs that already have metrics")
    ap.add_argument(
        "--agreement", action="store_true", help="also score agreement with the teacher"
    )
    ap.add_argument("extra", nargs="*", help="after --: more `bertkit finetune glue` flags")
    args = ap.parse_args(argv)
    cpu = cpu_info()
    print(
        f"# distillation, {args.task}: student {args.student}, teacher {args.teacher}, "
        f"alpha {args.alpha}, T {args.temperature}, seeds {args.seeds}, {args.precision}; "
        f"CPU {cpu.label}, {cpu.logical_cores} logical cores",
        flush=True,
    )
    t0 = time.perf_counter()
    scores: dict[str, list[float]] = {"plain": [], "distilled": []}
    agree: dict[str, list[float]] = {"plain": [], "distilled": []}
    walls: list[str] = []
    metric = ""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    teacher = predict_dev(args, args.teacher, out / "teacher.dev.jsonl") if args.agreement else []
    for seed in args.seeds:
        for arm in ("plain", "distilled"):
            metrics = run_once(args, seed, arm)
            metric = metrics["metric"]
            if metrics["precision_run"] != args.precision:
                raise SystemExit(
                    f"{arm} seed {seed} ran {metrics['precision_run']}, not {args.precision}"
                )
            scores[arm].append(metrics["selected"]["score"])
            wall = sum(r["wall_s"] for r in metrics["runs"])
            walls.append(f"{arm} s{seed} {wall:.0f} s")
            if args.agreement:
                labels = predict_dev(
                    args, str(out / f"{arm}-s{seed}"), out / f"{arm}-s{seed}.jsonl"
                )
                agree[arm].append(agreement(labels, teacher))
    print("\n" + summary_table(metric, args.seeds, scores["plain"], scores["distilled"]))
    if args.agreement:
        name = "agreement with the teacher"
        print("\n" + summary_table(name, args.seeds, agree["plain"], agree["distilled"]))
    print(f"\ntraining wall time per run ({cpu.label}): " + ", ".join(walls))
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
