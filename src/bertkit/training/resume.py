"""A Trainer's run in its checkpoints: what :func:`save` writes of it (weights, optimizer, RNG
streams and the loop's state) and how :func:`resume` puts it back, exactly.

The file format (atomic writes, validation, which checkpoint is newest) is
:mod:`bertkit.training.checkpoint`'s; this module decides what of the Trainer a checkpoint holds.
Both functions are collective: every rank calls them.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bertkit.training import checkpoint as ckpt
from bertkit.training import distributed as D
from bertkit.training import rng_state
from bertkit.training.deadline import shrink
from bertkit.training.optim import optimizer_state_from_tensors, optimizer_state_to_tensors
from bertkit.training.phase_batches import PhaseBatches

if TYPE_CHECKING:
    from bertkit.training.loop import Trainer


def _cursor(t: Trainer) -> PhaseBatches:
    """The source whose cursor a checkpoint keeps: a Trainer with a run_dir draws from phases."""
    assert isinstance(t.batches, PhaseBatches)
    return t.batches


def loop_state(t: Trainer) -> ckpt.LoopState:
    """The loop's state at ``t``'s current step (all but the tensors)."""
    return ckpt.LoopState(
        step=t.step,
        phase=_cursor(t).phase_index,
        position=_cursor(t).position,
        seed=t.cfg.seed,
        total_steps=t.schedule.total_steps,
        warmup_steps=t.schedule.warmup_steps,
        peak_lrs=t.peak_lrs,
        scaler=t.scaler.state_dict() if t.scaler else None,
        attempts=t.attempts,
        skipped=t.skipped,
        consecutive_skips=t.consecutive_skips,
        window=t.window,
        spike_history=t.spikes.state(),
        world_size=t.info.world_size,
        settings=t.settings,
        precision=t.precision,
    )


def save(t: Trainer) -> None:
    """Checkpoint the current step (rank 0 writes; the RNG streams of every rank are gathered)."""
    D.mark("checkpoint", t.step)
    rng = D.gather_tensors(rng_state.capture_rng(), t.info)
    if t.info.is_main:
        D.mark("checkpoint write", t.step, publish=False)
        opt_tensors, opt_meta = optimizer_state_to_tensors(t.optimizer)
        state = loop_state(t)
        state.optimizer = opt_meta
        path = ckpt.save_checkpoint(
            t.run_dir / "checkpoints",
            t.step,
            model=t.core.state_dict(),
            optimizer=opt_tensors,
            rng=rng,
            state=state.to_json(),
            keep_last=t.cfg.keep_last,
            write_delay=t.faults.checkpoint_write_delay,
            fail=t.step in t.faults.fail_checkpoint_at,
        )
        t.metrics.append({"type": "checkpoint", "step": t.step, "path": path.name})
    D.barrier(t.info)


def kept_note(run_dir: str | Path) -> str | None:
    """What an interrupted pre-training run's folder keeps, for the line the command ends with
    (``run keeps checkpoint step-000000010; the same command resumes from it``); None when
    ``run_dir`` is not a folder."""
    if not Path(run_dir).is_dir():
        return None
    found = ckpt.list_checkpoints(Path(run_dir) / "checkpoints")
    if not found:
        return f"{run_dir} keeps no checkpoint yet; the same command starts the run over"
    return f"{run_dir} keeps checkpoint {found[0].name}; the same command resumes from it"


def start(t: Trainer) -> None:
    """Resume ``t`` from its newest checkpoint, else start it fresh with every global RNG seeded,
    so that two fresh runs (and so a resumed one) have identical RNG states throughout; dropout
    streams differ per rank, as on separate machines."""
    if resume(t):
        return
    rank_seed = t.cfg.seed * 1_000_003 + t.info.rank + 1
    torch.manual_seed(rank_seed)
    random.seed(rank_seed)
    np.random.seed(rank_seed % 2**32)
    if t.info.is_main:
        t.metrics.truncate_after(0)


def resume(t: Trainer) -> bool:
    """Load the newest valid checkpoint of ``t.run_dir`` if any; returns whether one was loaded.

    A run that its deadline had shortened stays shortened while it keeps a deadline; resumed
    without one, it runs its full schedule."""
    root = t.run_dir / "checkpoints"
    if t.info.is_main:
        ckpt.clean_stale(root)
    D.barrier(t.info)
    c = ckpt.load_latest(root, warn=t.log if t.info.is_main else lambda _m: None)
    if c is None:
        return False
    ckpt.check_resume_settings(c, t.settings)
    ckpt.load_model_weights(c, t.core)
    s = ckpt.LoopState.from_json(c.state)
    t.optimizer.load_state_dict(optimizer_state_from_tensors(c.optimizer, s.optimizer))
    t.peak_lrs = list(s.peak_lrs or t.peak_lrs)
    t.step = s.step
    if t.cfg.precision == "auto" and s.precision not in (None, t.precision):
        # auto's bf16 choice rests on a timed probe, which can flip between runs on a busy
        # machine: a resumed run keeps the precision its steps so far were computed in
        t.log(f"precision {s.precision}, as {c.path.name} was trained (--precision auto)")
        t.precision = t.update.precision = s.precision
    if t.scaler is not None and s.scaler:
        t.scaler.load_state_dict(s.scaler)
    t.attempts, t.skipped = s.attempts, s.skipped
    t.consecutive_skips = s.consecutive_skips
    t.window = dict(s.window or {})
    t.spikes.load(s.spike_history or [])
    cursor = _cursor(t)
    if t.faults.restore_cursor:
        cursor.phase_index, cursor.position = s.phase, s.position
    else:  # negative control: the data order restarts
        cursor.phase_index = cursor.phase_at(t.step)[0]
    if t.faults.restore_rng:
        if s.world_size != t.info.world_size:
            t.log(
                f"warning: {c.path.name} was written by {s.world_size} processes, "
                f"this run has {t.info.world_size}; RNG streams are not continued exactly"
            )
        mine = ckpt.rank_rng(c, t.info.rank)
        if mine:
            rng_state.restore_rng(mine)
    if t.info.is_main:
        t.metrics.truncate_after(t.step)
    if t.deadline is not None and s.total_steps < t.schedule.total_steps:
        t.schedule, t.phases = shrink(t.schedule, t.phases, s.total_steps)
        # the checkpoint's warmup: shrunk twice, the share is rounded twice
        t.schedule = dataclasses.replace(t.schedule, warmup_steps=s.warmup_steps)
    t.log(f"resumed from {c.path} (step {t.step})")
    return True


def finished(t: Trainer) -> tuple[bool, dict[str, float] | None]:
    """Whether ``t`` reran a run that had already finished (its log holds the evaluation at the
    last update), and that evaluation, reused rather than logged twice (rank 0 decides for all
    ranks; the others get None)."""
    total = t.schedule.total_steps
    done = [
        r
        for r in (t.metrics.read() if t.info.is_main else [])
        if r.get("type") == "eval" and r["step"] == total
    ]
    if not D.broadcast_flag(bool(done), t.info):
        return False, None
    return True, (
        {k: v for k, v in done[-1].items() if k not in ("type", "step")} if done else None
    )
