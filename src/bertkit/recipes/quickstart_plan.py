"""The quickstart's step planner: short calibration runs measure seconds per update of each phase
on this machine, the update count is fitted to what is left of the job's budget, phase 2's count
is fitted again when phase 1 ends, and the plan is kept in ``OUTPUT/plan.json`` so that a rerun
resumes the same runs."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertkit.errors import ConfigError
from bertkit.io import atomic_write_text
from bertkit.recipes.quickstart_settings import QuickstartSettings, run_options
from bertkit.training.metrics import MetricsLog
from bertkit.training.pretraining import pretrain

CALIBRATION_STEPS = 24
FINAL_SECONDS = 5.0  # after training: input-blind baselines, loading the model, fill-mask


def calibrate(
    s: QuickstartSettings,
    out: Path,
    data: Path,
    threads: int,
    phase2: bool,
) -> float:
    """Seconds per update of one phase's settings on ``data``, from a short throw-away run of
    CALIBRATION_STEPS updates: its median window of 8 (robust to the first window's start-up)."""
    calib = out / "calibration"
    shutil.rmtree(calib, ignore_errors=True)
    opts = run_options(calib, data, None, CALIBRATION_STEPS, s, threads, phase2=phase2)
    opts.train.log_every = 8
    opts.train.show_progress = False
    pretrain(opts, log=lambda _m: None)
    rate = measured_rate(calib)
    shutil.rmtree(calib, ignore_errors=True)
    if rate is None:
        raise ConfigError(f"the calibration run in {calib} logged no update")
    return rate


def read_plan(out: Path) -> dict[str, Any]:
    """``OUTPUT/plan.json`` (empty before the first plan): max_steps, the calibrated seconds per
    update of each phase, phase2_steps once fitted."""
    plan_file = out / "plan.json"
    return json.loads(plan_file.read_text(encoding="utf-8")) if plan_file.exists() else {}


def _write_plan(out: Path, plan: dict[str, Any]) -> None:
    atomic_write_text(out / "plan.json", json.dumps(plan) + "\n")


def plan_steps(
    s: QuickstartSettings,
    out: Path,
    data: list[Path],
    threads: int,
    log: Callable[[str], None],
    spent: float = 0.0,
) -> int:
    """The run's update count: --max-steps, the stored plan (a rerun resumes), or fitted to
    what is left of --minutes after ``spent`` seconds (data preparation) and the calibration,
    from short calibration runs' seconds per update on each phase's data."""
    plan = read_plan(out)
    if s.max_steps is not None:
        plan = {"max_steps": s.max_steps}
    elif not plan:
        t0 = time.perf_counter()
        last = len(data) - 1 if len(data) > 1 else None
        per_phase = [calibrate(s, out, f, threads, phase2=i == last) for i, f in enumerate(data)]
        weights = [1.0] if len(data) == 1 else [1 - s.phase2_fraction, s.phase2_fraction]
        per_step = sum(w * r for w, r in zip(weights, per_phase, strict=True))
        left = max(s.minutes * 60 - spent - (time.perf_counter() - t0) - FINAL_SECONDS, 0.0)
        # ~3% of phase 1's time goes to its held-out evaluations and checkpoints; a slower
        # machine is met by the runs' deadlines (end_by), a faster one by phase 2's fit
        steps = max(50, int(left * 0.97 / per_step))
        plan = {"max_steps": steps, "seconds_per_update": per_phase}
        log(
            f"      calibration: {per_step:.3f} s/update -> {steps} updates in the "
            f"{left / 60:.1f} min left of {s.minutes:g}"
        )
    _write_plan(out, plan)
    return int(plan["max_steps"])


def measured_rate(run: Path) -> float | None:
    """The median seconds per update of a run's logged windows (None: none logged)."""
    records = MetricsLog(run / "metrics.jsonl").read()
    rates = sorted(r["seconds_per_step"] for r in records if r.get("type") == "train")
    return rates[len(rates) // 2] if rates else None


def phase2_updates(left: float, calibrated: list[float], phase1_ran_at: float | None) -> int:
    """Phase 2's update count for ``left`` seconds: the first calibration's phase-2 rate, scaled
    by how much slower (or faster) phase 1 ran than its own calibration said, i.e. by the
    machine's drift since then. Nothing is kept back: the run's deadline (``end_by``) shortens
    the decay if phase 2 then runs slower."""
    rate1, rate2 = calibrated[0], calibrated[-1]
    drift = phase1_ran_at / rate1 if phase1_ran_at else 1.0
    return max(1, int(left / (rate2 * drift)))


def fit_phase2(
    s: QuickstartSettings,
    out: Path,
    planned: int,
    deadline: float,
    log: Callable[[str], None],
) -> int:
    """Phase 2's update count, decided when phase 1 ends: the planned share under --max-steps,
    the stored one on a rerun, else what fits before ``deadline`` (a ``time.perf_counter()``
    value) by :func:`phase2_updates`. Phase 2 has its own warmup and decay, so only it needs the
    count, and whatever phase 1 took more or less than planned is taken up here."""
    plan = read_plan(out)
    if s.max_steps is not None or "seconds_per_update" not in plan:
        return planned
    if "phase2_steps" not in plan:
        left = max(deadline - time.perf_counter(), 0.0)
        ran_at = measured_rate(out / "run-phase1")
        plan["phase2_steps"] = phase2_updates(left, plan["seconds_per_update"], ran_at)
        drift = f"phase 1 ran at {ran_at:.3f} s/update, " if ran_at else ""
        log(
            f"      phase 2: {plan['phase2_steps']} updates (planned {planned}) fill the "
            f"{left / 60:.1f} min left ({drift}calibrated "
            f"{plan['seconds_per_update'][0]:.3f} and {plan['seconds_per_update'][-1]:.3f})"
        )
        _write_plan(out, plan)
    return int(plan["phase2_steps"])
