"""The pre-training loop: accumulation, clipping, mixed precision, phases, logging, eval, checkpoints.

Generic over the model and data: ``model(**batch)`` must return an object with ``loss`` (and, for
BERT, ``mlm_loss``/``nsp_loss``/``mlm_correct``/``mlm_count``/``nsp_correct``); a phase's dataset is a
sequence of examples and ``collate(examples, epochs)`` (``epochs[i]``: the data epoch example ``i``
is drawn in, for dynamic masking) turns a list of them into a dict of tensors with
``input_ids``, ``attention_mask`` and optionally ``labels`` (-100 = not predicted) and
``next_sentence_label``.

One optimizer update ("step") consumes ``batch_size`` examples in total (all ranks and all
accumulation micro-batches together; see ``sharding.micro_batch``). The loss of a step is
normalised over the whole global batch: MLM cross-entropy summed over every masked token of the step
divided by their total count, plus the NSP cross-entropy averaged over every example. So the step is
the same computation for any world size and accumulation (up to float summation order).

An update whose loss or gradient norm is not finite is skipped: gradients are dropped, the step
counter and schedule do not advance (its batch is consumed), and ``max_consecutive_skips`` skips in a
row abort the run.

With ``TrainConfig.end_by`` the run keeps a wall-clock deadline: at each log line the rate since
the first one (evaluations and checkpoints included) says how many updates still fit, and when
fewer than the schedule's do, the total shrinks (see ``_meet_deadline``), so the decay still ends
at zero, on time.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit import precision as P
from bertkit.errors import ConfigError
from bertkit.progress import progress
from bertkit.training import checkpoint as ckpt
from bertkit.training import distributed as D
from bertkit.training import sharding as S
from bertkit.training.faults import NONE as NO_FAULTS
from bertkit.training.faults import Faults
from bertkit.training.metrics import MetricsLog, SpikeDetector, peak_flops, plot_curves
from bertkit.training.objectives import MlmNsp, Objective
from bertkit.training.optim import optimizer_state_from_tensors, optimizer_state_to_tensors
from bertkit.training.prefetch import Prefetcher, default_depth
from bertkit.training.schedule import ScheduleConfig, set_lr
from bertkit.training.settings import Collate, Phase, TrainConfig, TrainResult
from bertkit.training.update import MicroBatch, StepStats, TrainingError, UpdateStep

DEADLINE_SLACK = 0.02
"""The share of the updates that still fit which a deadline's shrink gives up (see _meet_deadline)."""


class Trainer:
    """Runs (or resumes) training into ``run_dir``: phases, logging, evaluation, checkpoints.

    What one update computes is the ``objective``'s (default: BERT's MLM + NSP); the update itself
    (accumulation, precision, clipping, non-finite skipping) is :class:`UpdateStep`'s.
    ``model`` is the bare module (wrapped in DDP here when distributed); ``optimizer`` is built over
    its parameters; ``peak_lrs`` are the groups' peak learning rates. ``flops_fn(batch)`` (optional)
    gives the model FLOPs of a training step on ``batch`` for MFU.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule: ScheduleConfig,
        phases: list[Phase],
        collate: Collate,
        config: TrainConfig,
        run_dir: str | Path,
        info: D.DistInfo | None = None,
        eval_dataset: Sequence[Any] | None = None,
        eval_collate: Collate | None = None,
        flops_fn: Callable[[dict[str, torch.Tensor]], float] | None = None,
        settings: dict[str, Any] | None = None,
        log: Callable[[str], None] | None = None,
        objective: Objective | None = None,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self.core = model
        self.optimizer = optimizer
        self.peak_lrs = [g["lr"] for g in optimizer.param_groups]
        self.schedule, self.phases, self.collate, self.cfg = schedule, phases, collate, config
        self.run_dir = Path(run_dir)
        self.info = info or D.DistInfo()
        self.eval_dataset, self.flops_fn = eval_dataset, flops_fn
        self.eval_collate = eval_collate or collate
        self.settings = settings or {}
        self._log = log or (lambda msg: print(msg, file=sys.stderr))
        if sum(p.steps for p in phases) != schedule.total_steps:
            raise ConfigError("the phases' steps must add up to the schedule's total steps")
        parts = config.grad_accum * self.info.world_size
        for size in {p.batch_size or config.batch_size for p in phases}:
            if size % parts:
                raise ConfigError(
                    f"batch size {size} must be divisible by grad_accum x world size = {parts}"
                )
        # the precision this machine runs (bf16 without native support: fp32, with a notice)
        self.precision = P.resolve(config.precision, self.info.device)
        self.objective = objective or MlmNsp()
        self.faults = faults
        params = [p for g in optimizer.param_groups for p in g["params"]]
        self.update = UpdateStep(optimizer, self.objective, params, self.precision,
                                 self.info.device, config.clip_norm, self.info, flops_fn)  # fmt: skip
        self.scaler = self.update.scaler
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")
        self.spikes = SpikeDetector(config.spike_factor)
        self.step = 0
        self.position = 0  # examples consumed in the current phase's stream
        self.phase_index = 0
        self.attempts = 0
        self.skipped = 0
        self.consecutive_skips = 0
        self.window: dict[str, float] = {}
        self.pending: StepStats | None = None
        """Statistics since the last fold into ``window``, still on the device."""
        self._prefetch: Prefetcher | None = None
        self._clock: tuple[float, int] | None = None
        """(time.time(), step) at this process's first log line: the deadline's rate is measured
        from there, so the first window's start-up (kernel creation, prefetch) does not count."""
        self._pause = 0.0
        """The longest evaluation-and-checkpoint pause so far: kept back for the final one."""

    # ---- messages --------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        if self.info.is_main:
            self._log(msg)

    # ---- state ------------------------------------------------------------------------------

    def _loop_state(self) -> ckpt.LoopState:
        return ckpt.LoopState(
            step=self.step, phase=self.phase_index, position=self.position, seed=self.cfg.seed,
            total_steps=self.schedule.total_steps, warmup_steps=self.schedule.warmup_steps,
            peak_lrs=self.peak_lrs, scaler=self.scaler.state_dict() if self.scaler else None,
            attempts=self.attempts, skipped=self.skipped,
            consecutive_skips=self.consecutive_skips, window=self.window,
            spike_history=self.spikes.state(), world_size=self.info.world_size,
            settings=self.settings,
        )  # fmt: skip

    def save(self) -> None:
        """Checkpoint the current step (collective: every rank calls it; rank 0 writes)."""
        D.mark("checkpoint", self.step)
        rng = D.gather_tensors(ckpt.capture_rng(), self.info)
        if self.info.is_main:
            D.mark("checkpoint write", self.step, publish=False)
            opt_tensors, opt_meta = optimizer_state_to_tensors(self.optimizer)
            state = self._loop_state()
            state.optimizer = opt_meta
            path = ckpt.save_checkpoint(
                self.run_dir / "checkpoints",
                self.step,
                model=self.core.state_dict(),
                optimizer=opt_tensors,
                rng=rng,
                state=state.to_json(),
                keep_last=self.cfg.keep_last,
                write_delay=self.faults.checkpoint_write_delay,
                fail=self.step in self.faults.fail_checkpoint_at,
            )
            self.metrics.append({"type": "checkpoint", "step": self.step, "path": path.name})
        D.barrier(self.info)

    def resume(self) -> bool:
        """Load the newest valid checkpoint of ``run_dir`` if any; returns whether one was loaded."""
        root = self.run_dir / "checkpoints"
        if self.info.is_main:
            ckpt.clean_stale(root)
        D.barrier(self.info)
        c = ckpt.load_latest(root, warn=self.log if self.info.is_main else lambda _m: None)
        if c is None:
            return False
        ckpt.check_resume_settings(c, self.settings)
        ckpt.load_model_weights(c, self.core)
        s = ckpt.LoopState.from_json(c.state)
        self.optimizer.load_state_dict(optimizer_state_from_tensors(c.optimizer, s.optimizer))
        self.peak_lrs = list(s.peak_lrs or self.peak_lrs)
        self.step = s.step
        if self.scaler is not None and s.scaler:
            self.scaler.load_state_dict(s.scaler)
        self.attempts, self.skipped = s.attempts, s.skipped
        self.consecutive_skips = s.consecutive_skips
        self.window = dict(s.window or {})
        self.spikes.load(s.spike_history or [])
        if self.faults.restore_cursor:
            self.phase_index, self.position = s.phase, s.position
        else:  # negative control: the data order restarts
            self.phase_index = self._phase_at(self.step)[0]
        if self.faults.restore_rng:
            if s.world_size != self.info.world_size:
                self.log(
                    f"warning: {c.path.name} was written by {s.world_size} processes, "
                    f"this run has {self.info.world_size}; RNG streams are not continued exactly"
                )
            mine = ckpt.rank_rng(c, self.info.rank)
            if mine:
                ckpt.restore_rng(mine)
        if self.info.is_main:
            self.metrics.truncate_after(self.step)
        if self.cfg.end_by is not None and s.total_steps < self.schedule.total_steps:
            self._shrink(s.total_steps)  # the deadline had already shortened this run
        self.log(f"resumed from {c.path} (step {self.step})")
        return True

    # ---- one update -----------------------------------------------------------------------------

    def _phase_at(self, step: int) -> tuple[int, Phase]:
        end = 0
        for i, p in enumerate(self.phases):
            end += p.steps
            if step < end:
                return i, p
        return len(self.phases) - 1, self.phases[-1]

    def _autocast(self):
        return P.autocast(self.precision, self.info.device)

    def _make_micro_batches(self, phase_index: int, position: int) -> list[MicroBatch]:
        """This rank's micro-batches of the update at ``position`` of phase ``phase_index``,
        collated and counted on the CPU: a pure function of its arguments (run ahead of time
        by the prefetching thread)."""
        cfg, info = self.cfg, self.info
        phase = self.phases[phase_index]
        batch, epochs = S.global_batch_indices(
            len(phase.dataset), position, self._batch_size(phase_index), cfg.seed, phase_index,
            phase.shards, cfg.shard_window,
        )  # fmt: skip
        epochs_arr = np.asarray(epochs, dtype=np.int64)
        out = []
        for j in range(cfg.grad_accum):
            idx = S.micro_batch(batch, j, cfg.grad_accum, info).tolist()
            ep = S.micro_batch(epochs_arr, j, cfg.grad_accum, info).tolist()
            mb = (phase.collate or self.collate)([phase.dataset[i] for i in idx], ep)
            out.append(self.update.prepare(mb))
        return out

    def _upcoming(self) -> list[tuple[int, int]]:
        """The (phase, position) keys of the next updates, should this one succeed."""
        phase = self.phase_index
        keys, position = [], self.position + self._batch_size(phase)
        for step in range(
            self.step + 1, min(self.step + 1 + self._depth(), self.schedule.total_steps)
        ):
            nxt = self._phase_at(step)[0]
            if nxt != phase:
                phase, position = nxt, 0
            keys.append((phase, position))
            position += self._batch_size(phase)
        return keys

    def _batch_size(self, phase_index: int) -> int:
        return self.phases[phase_index].batch_size or self.cfg.batch_size

    def _micro_batches(self, phase: Phase) -> list[MicroBatch]:
        key = (self.phase_index, self.position)
        if self._prefetch is None:
            ready = self._make_micro_batches(*key)
        else:
            ready = self._prefetch.get(key, self._upcoming())
        self.position += self._batch_size(self.phase_index)
        return [m.to(self.info.device, non_blocking=True) for m in ready]

    def _fold(self) -> None:
        """Read the pending statistics back (once per log line or checkpoint) into ``window``."""
        if self.pending is not None:
            for k, v in self.pending.read().items():
                self.window[k] = self.window.get(k, 0.0) + v
            self.pending = None

    def _train_step(self, model: nn.Module, phase: Phase) -> StepStats | None:
        """One update attempt; returns its statistics, or None when the update was skipped."""
        attempt = self.attempts
        self.attempts += 1
        D.mark("update", self.step + 1)
        self.faults.at_step(self.info.rank, self.step + 1)
        batches = self._micro_batches(phase)
        if attempt in self.faults.drop_attempts:
            return None
        set_lr(self.optimizer, self.peak_lrs, self.step, self.schedule)
        stats = self.update(model, batches, poison=attempt in self.faults.nan_at_attempts)
        if stats is not None:
            self.step += 1
        return stats

    # ---- evaluation -----------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float] | None:
        """The objective's held-out figures on the first ``eval_examples`` examples (rank 0 only).

        Examples are taken in order with epoch-0 masks, so every evaluation scores the same
        predictions and the curve shows only the model changing.
        """
        if self.eval_dataset is None or not self.info.is_main:
            return None
        was_training = self.core.training
        self.core.eval()
        n = min(len(self.eval_dataset), self.cfg.eval_examples)
        size = max(1, self.cfg.batch_size // (self.cfg.grad_accum * self.info.world_size))
        sums: np.ndarray | None = None
        for start in range(0, n, size):
            items = [self.eval_dataset[i] for i in range(start, min(n, start + size))]
            # always epoch 0: dynamic masking gives the same masks at every evaluation
            b = self.eval_collate(items, [0] * len(items))
            b = {k: v.to(self.info.device) for k, v in b.items()}
            with self._autocast():
                out = self.core(**b)
            part = np.asarray(self.objective.eval_sums(out, b))
            sums = part if sums is None else sums + part
        self.core.train(was_training)
        return self.objective.eval_metrics(sums if sums is not None else np.zeros(6))

    # ---- the loop -------------------------------------------------------------------------------

    def _record(
        self, window: dict[str, float], seconds: float, peak: float | None
    ) -> dict[str, Any]:
        w = window
        rec: dict[str, Any] = {"type": "train", "step": self.step, "loss": w["loss"] / w["steps"]}
        rec.update(self.objective.figures(w))
        rec["lr"] = self.optimizer.param_groups[0]["lr"]
        rec["grad_norm"] = w["grad_norm"] / w["steps"]
        rec["skipped"] = self.skipped
        if seconds > 0:
            rec["seconds_per_step"] = seconds / w["steps"]
            rec["tokens_per_s"] = w["tokens"] / seconds
            if peak and w.get("flops"):
                rec["mfu"] = w["flops"] / seconds / (peak * self.info.world_size)
        return rec

    def fit(self) -> TrainResult:
        """Train until ``schedule.total_steps`` updates, resuming from ``run_dir`` when possible."""
        cfg, info = self.cfg, self.info
        t_start = time.perf_counter()
        if not self.resume():
            # Seed every global RNG, so that two fresh runs (and so a resumed one) have identical
            # RNG states throughout; dropout streams differ per rank, as on separate machines.
            rank_seed = cfg.seed * 1_000_003 + info.rank + 1
            torch.manual_seed(rank_seed)
            random.seed(rank_seed)
            np.random.seed(rank_seed % 2**32)
            if info.is_main:
                self.metrics.truncate_after(0)
        model: nn.Module = self.core
        if info.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            cuda = torch.device(info.device)
            model = DDP(self.core, device_ids=[cuda.index] if cuda.type == "cuda" else None)
        model.train()
        peak = cfg.peak_flops
        if peak is None and self.flops_fn is not None and info.is_main:
            found = peak_flops(info.device, self.precision)
            peak = found.flops
            self.log(f"MFU peak: {peak / 1e12:.1f} TFLOP/s per process ({found.source})")
        total = self.schedule.total_steps
        bar = progress(
            total=total,
            initial=self.step,
            desc="pretrain",
            unit="step",
            enabled=cfg.show_progress if info.is_main else False,
        )
        self.start_prefetch()
        try:
            self._loop(model, bar, peak)
        finally:
            self._prefetch.close()
            self._prefetch = None
        bar.close()
        return self._finish(t_start)

    def _depth(self) -> int:
        """Updates collated ahead (``cfg.prefetch``, else by device: see TrainConfig)."""
        if self.cfg.prefetch is not None:
            return self.cfg.prefetch
        return default_depth(torch.device(self.info.device).type)

    def start_prefetch(self) -> None:
        """Collate ahead from now on (``fit`` does; depth 0: in series)."""
        self._prefetch = Prefetcher(
            lambda key: self._make_micro_batches(*key),
            self._depth(),
            pin=self.info.device.startswith("cuda"),
        )

    def _loop(self, model: nn.Module, bar: Any, peak: float | None) -> None:
        cfg, info, total = self.cfg, self.info, self.schedule.total_steps
        t_window = time.perf_counter()
        while self.step < total:
            phase_index, phase = self._phase_at(self.step)
            if phase_index != self.phase_index:
                self.phase_index, self.position = phase_index, 0
                self.log(f"step {self.step}: starting {phase.name}")
            stats = self._train_step(model, phase)
            if stats is None:
                self._on_skip()
                continue
            self.consecutive_skips = 0
            if self.pending is None:
                self.pending = stats
            else:
                self.pending.values = self.pending.values + stats.values
            spike = self.spikes.update(stats.loss)
            if spike is not None and info.is_main:
                self.log(
                    f"warning: loss spike at step {self.step}: {stats.loss:.4f} vs recent "
                    f"mean {spike:.4f}"
                )
                self.metrics.append(
                    {"type": "spike", "step": self.step, "loss": stats.loss, "reference": spike}
                )
            bar.update(1)
            saving = self.step % cfg.save_every == 0 or self.step == total
            if saving:
                self._fold()  # the checkpoint holds the window
            if self.step % cfg.log_every == 0 or self.step == total:
                self._fold()
                now = time.perf_counter()
                rec = self._record(self.window, now - t_window, peak)
                t_window, self.window = now, {}
                if info.is_main:
                    self.metrics.append(rec)
                    bar.set_postfix(loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}")
                if self._clock is None:
                    self._clock = (time.time(), self.step)
                elif cfg.end_by is not None and self.step < total:
                    self._meet_deadline(cfg.end_by)
                    total = self.schedule.total_steps
                    if hasattr(bar, "total"):
                        bar.total = total
            t_pause = (
                time.perf_counter()
            )  # evaluation and checkpoints do not count as training time
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < total:
                self._eval_and_log()
            if saving:
                self.save()
            paused = time.perf_counter() - t_pause
            self._pause = max(self._pause, paused)
            t_window += paused

    def _meet_deadline(self, end_by: float) -> None:
        """Shrink the schedule when the updates left would end past ``end_by``: at the rate of
        this process since its first log line (two windows at least; evaluations and checkpoints
        included), keeping back the longest pause for the final evaluation. Rank 0 decides for
        all ranks. The decay is linear, so the learning rate steps down once (to what the
        shorter schedule has at this update) and still reaches zero at the last update. Never
        below the last phase's first update, nor into a warmup."""
        assert self._clock is not None
        start, first = self._clock
        sch = self.schedule
        new = -1.0
        if self.info.is_main and self.step - first >= 2 * self.cfg.log_every:
            now = time.time()
            rate = (now - start) / (self.step - first)
            more = max(end_by - now - self._pause, 0.0) / rate
            restart = sch.restart_at + sch.restart_warmup_steps if sch.restart_at else 0
            floor = 1 + max(sch.warmup_steps, restart, sch.total_steps - self.phases[-1].steps)
            if self.step + int(more) < sch.total_steps:
                # DEADLINE_SLACK of the updates that fit is given up, so that a rate a little
                # slower at the next line does not shorten the schedule again by an update or two
                fits = self.step + int(more * (1 - DEADLINE_SLACK))
                new = float(max(fits, floor, self.step + 1))
        new = D.broadcast_float(new, self.info)
        if new > 0 and int(new) < sch.total_steps:
            was, total = sch.total_steps, int(new)
            self._shrink(total)
            self.log(
                f"step {self.step}: the time left fits {total - self.step} more updates, not "
                f"{was - self.step}: the schedule now ends at update {total}"
            )
            if self.info.is_main:
                rec = {"type": "deadline", "step": self.step, "total_steps": total, "was": was}
                self.metrics.append(rec)

    def _shrink(self, total: int) -> None:
        """End the run (the last phase and the schedule's decay) at update ``total``."""
        cut = self.schedule.total_steps - total
        last = self.phases[-1]
        self.phases = [*self.phases[:-1], dataclasses.replace(last, steps=last.steps - cut)]
        self.schedule = dataclasses.replace(self.schedule, total_steps=total)

    def _finish(self, t_start: float) -> TrainResult:
        info, total = self.info, self.schedule.total_steps
        # a rerun of a finished run reuses the final evaluation instead of logging it twice
        done = [
            r
            for r in (self.metrics.read() if info.is_main else [])
            if r.get("type") == "eval" and r["step"] == total
        ]
        last_eval = None
        if D.broadcast_flag(bool(done), info):  # rank 0 decides for all ranks
            if done:
                last_eval = {k: v for k, v in done[-1].items() if k not in ("type", "step")}
            self.log(f"already finished ({total} steps); nothing to train")
        else:
            last_eval = self._eval_and_log()
        if info.is_main:
            plot_curves(self.metrics.read(), self.run_dir / "curves.png")
        return TrainResult(
            step=self.step,
            skipped=self.skipped,
            final_eval=last_eval,
            seconds=time.perf_counter() - t_start,
        )

    def _eval_and_log(self) -> dict[str, float] | None:
        D.mark("evaluation", self.step)
        result = self.evaluate()
        if result is not None:
            self.metrics.append({"type": "eval", "step": self.step, **result})
            self.log(f"step {self.step} held-out: {self.objective.describe(result)}")
        D.barrier(self.info)
        return result

    def _on_skip(self) -> None:
        self.skipped += 1
        self.consecutive_skips += 1
        if self.info.is_main:
            self.log(
                f"warning: non-finite loss or gradient at step {self.step}; update skipped "
                f"({self.consecutive_skips} in a row)"
            )
            self.metrics.append(
                {"type": "skip", "step": self.step + 1, "attempt": self.attempts - 1}
            )
        if self.consecutive_skips >= self.cfg.max_consecutive_skips:
            raise TrainingError(
                f"{self.consecutive_skips} consecutive updates had a non-finite loss "
                f"or gradient (at step {self.step}); lower the learning rate or check "
                "the data"
            )
