"""Stage 4: a short real pre-training run through the command line, whose held-out loss falls.

``python -m bertkit pretrain`` on stage 0's shards (the built-in corpus, 128 tokens, an
``eval`` split held out), a small BERT (L=4, H=512), batch 256, bf16. The command takes an
update count, not a time, so a short calibration run (60 updates, logged in 3 windows) measures
seconds per update and start-up first, and the real run gets the updates that fit the stage's
cap (about 60 s of training). It evaluates the held-out split at 25/50/75/100% of the run: the
first and last held-out loss are recorded (the last must be lower), with the MFU and tokens/s
the trainer logs (``metrics.jsonl``) and the peak the trainer divides by.

:func:`pretrain_cli`, :func:`calibrate` and :func:`run_summary` are stage 5's too.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_check.common import context, finish

ROOT = Path(__file__).resolve().parents[2]
MARGIN_S = 8.0
"""Kept back from the stage's cap: the summary, and a run slower than its calibration."""


def bertkit_cli(ctx, args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``python -m bertkit ARGS`` on this stage's device, stopped after ``timeout`` seconds,
    its output echoed line by line to this stage's log (so a stage stopped at its cap still
    shows how far it got); returns the command, exit code (None: stopped), seconds, the
    output's end and its ``notes``: where and in what precision it ran, the peak of its MFU."""
    cmd = [sys.executable, "-m", "bertkit", *args, "--device", ctx.device]
    print("$ " + " ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    reader.join(timeout=5)
    output = "".join(lines)
    notes = [x for x in lines if x.startswith(("MFU peak", "1 process(es)"))]
    return {
        "command": " ".join(cmd[3:]),
        "exit_code": code,
        "notes": [x.strip() for x in notes],
        "seconds": round(time.perf_counter() - t0, 2),
        "output_tail": output[-1500:],
    }


def exit_text(got: dict[str, Any]) -> str:
    """How a :func:`bertkit_cli` run ended, for a stage's reason."""
    code = got["exit_code"]
    return "ran past its time and was stopped" if code is None else f"exited {code}"


def pretrain_cli(
    ctx,
    data: Path,
    run: Path,
    size: str,
    batch: int,
    steps: int,
    lr: float,
    evaluations: int,
    timeout: float,
) -> dict[str, Any]:
    """``bertkit pretrain`` of ``steps`` updates into ``run`` (a fresh folder), logging about 20
    windows, evaluating held-out data ``evaluations`` times, saving once at the end."""
    import shutil

    shutil.rmtree(run, ignore_errors=True)
    args = [
        "pretrain",
        "--data",
        str(data),
        "--output",
        str(run),
        "--model-size",
        size,
        "--max-steps",
        str(steps),
        "--batch-size",
        str(batch),
        "--learning-rate",
        str(lr),
        "--warmup-proportion",
        "0.05",
        "--log-every",
        str(max(1, steps // 20)),
        "--eval-every",
        str(max(1, steps // evaluations)),
        "--eval-examples",
        "64" if ctx.dry_run else "2048",
        "--save-every",
        str(steps),
        "--keep-last",
        "1",
        "--precision",
        "bf16" if ctx.cuda else "auto",
        "--no-progress",
    ]
    return {**bertkit_cli(ctx, args, timeout), **run_summary(run)}


def run_summary(run: Path) -> dict[str, Any]:
    """A run's figures from its ``metrics.jsonl``: held-out losses, and the trainer's MFU and
    tokens/s (medians over the logged windows after the first, which holds the start-up)."""
    from bertkit.training.metrics import MetricsLog

    records = MetricsLog(run / "metrics.jsonl").read()
    train = [r for r in records if r.get("type") == "train"]
    evals = [
        {k: r.get(k) for k in ("step", "loss", "mlm_loss", "mlm_acc", "nsp_acc")}
        for r in records
        if r.get("type") == "eval"
    ]
    steady = train[1:] or train

    def median(key: str) -> float | None:
        values = [r[key] for r in steady if r.get(key) is not None]
        return statistics.median(values) if values else None

    out: dict[str, Any] = {
        "updates": train[-1]["step"] if train else 0,
        "evals": evals,
        "trainer_mfu": median("mfu"),
        "tokens_per_s": median("tokens_per_s"),
        "seconds_per_update": median("seconds_per_step"),
    }
    if evals:
        out.update(
            first_heldout_loss=evals[0]["loss"],
            last_heldout_loss=evals[-1]["loss"],
            loss_fell=len(evals) > 1 and evals[-1]["loss"] < evals[0]["loss"],
        )
    return out


def calibrate(ctx, data: Path, size: str, batch: int, lr: float) -> dict[str, Any]:
    """A short run of ``calibration_steps`` updates: seconds per update (the median logged
    window, as the quickstart measures it) and the fixed cost of a run (start-up, the final
    evaluation and save: its wall time less its updates)."""
    from bertkit.recipes.quickstart_plan import measured_rate

    n = ctx.sizes.calibration_steps
    run = ctx.work / f"calibration-{ctx.stage.name}"
    got = pretrain_cli(ctx, data, run, size, batch, n, lr, 1, ctx.seconds_left() / 2)
    rate = measured_rate(run)
    if rate is not None:
        got.update(rate_s=rate, fixed_s=max(got["seconds"] - n * rate, 0.0))
    return got


def plan_steps(ctx, calibration: dict[str, Any], seconds: float) -> int:
    """Updates that fit ``seconds`` of wall time after a run's fixed cost, with 10% kept for the
    held-out evaluations along the way; the dry run's cap bounds it."""
    steps = int(0.9 * (seconds - calibration["fixed_s"]) / calibration["rate_s"])
    cap = ctx.sizes.run_steps_cap
    return max(4, min(steps, cap) if cap else steps)


def main(argv: list[str] | None = None) -> int:
    ctx = context(4, argv)
    s = ctx.sizes
    data = ctx.data_dir(s.lengths[0])
    if not (data / "manifest.json").exists():
        ctx.write(status="skipped", reason=f"no prepared shards in {data} (stage 0)")
        return 0
    lr = 5e-4
    settings = {"model_size": s.run_size, "batch": s.run_batch, "seq": s.lengths[0], "lr": lr}
    ctx.write(settings=settings)
    cal = calibrate(ctx, data, s.run_size, s.run_batch, lr)
    ctx.write(calibration=cal)
    if cal["exit_code"] != 0 or "rate_s" not in cal:
        return finish(ctx, False, f"the calibration run {exit_text(cal)}")
    steps = plan_steps(ctx, cal, ctx.seconds_left() - MARGIN_S)
    run = pretrain_cli(
        ctx,
        data,
        ctx.work / "run-stage4",
        s.run_size,
        s.run_batch,
        steps,
        lr,
        s.evaluations,
        ctx.seconds_left() - 2,
    )
    ctx.write(run=run)
    if run["exit_code"] != 0:
        return finish(ctx, False, f"bertkit pretrain {exit_text(run)}")
    if not run["evals"]:
        return finish(ctx, False, "no held-out evaluation was logged")
    if not run.get("loss_fell") and not ctx.dry_run:  # a few dry-run updates need not learn
        return finish(ctx, False, "the held-out loss did not fall")
    return finish(ctx, True)


if __name__ == "__main__":
    sys.exit(main())
