"""The training loop: phases or epochs, logging, evaluation, checkpoints, deadline.

Generic over the model and data: ``model(**batch)`` returns an object with ``loss`` (and, for BERT,
``mlm_loss``/``nsp_loss``/``mlm_correct``/``nsp_correct``). The updates draw their batches from a
source (:class:`~bertkit.training.settings.BatchSource`): by default the phases
(:class:`~bertkit.training.phase_batches.PhaseBatches`), where a phase's dataset is a sequence of
examples and ``collate(examples, epochs)`` (``epochs[i]``: the data epoch example ``i`` is drawn
in, for dynamic masking) turns a list of them into a dict of tensors.

One update ("step") consumes ``batch_size`` examples, all ranks and accumulation micro-batches
together (:func:`bertkit.training.sharding.update_micro_batches`); what it computes, normalised
over the global batch, is the objective's (:mod:`bertkit.training.objectives`) and how, skipping
non-finite updates, :class:`~bertkit.training.update.UpdateStep`'s.

Fine-tuning is a run of the same loop: a :class:`~bertkit.training.objectives.TaskLoss` objective,
its data drawn from another source (:class:`~bertkit.training.epochs.EpochBatches`: an epoch
order rather than the phases'), an ``on_update`` hook that scores dev when an epoch ends, and no
``run_dir`` (no checkpoints, no metrics file; the caller seeds the RNGs).

With ``TrainConfig.end_by`` the run keeps a wall-clock deadline (:mod:`bertkit.training.deadline`).
What a checkpoint holds of the run and how it is resumed is :mod:`bertkit.training.resume`'s.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit import precision as P
from bertkit.errors import ConfigError
from bertkit.model.batching import Layout
from bertkit.progress import progress
from bertkit.training import distributed as D
from bertkit.training import resume as R
from bertkit.training.deadline import DeadlineSchedule, meet_deadline
from bertkit.training.faults import NONE as NO_FAULTS
from bertkit.training.faults import Faults
from bertkit.training.metrics import (
    MetricsLog,
    SpikeDetector,
    peak_flops,
    plot_curves,
    train_record,
)
from bertkit.training.objectives import MlmNsp, Objective, evaluate_heldout
from bertkit.training.phase_batches import PhaseBatches
from bertkit.training.prefetch import Prefetcher, default_depth
from bertkit.training.schedule import ScheduleConfig, set_lr
from bertkit.training.settings import BatchSource, Collate, Phase, TrainConfig, TrainResult
from bertkit.training.update import MicroBatch, StepStats, UpdateStep, check_skips, skip_warning


class Trainer:
    """Runs (or resumes) training into ``run_dir``: phases, logging, evaluation, checkpoints.

    What one update computes is the ``objective``'s (default: BERT's MLM + NSP); the update itself
    (accumulation, precision, clipping, non-finite skipping) is :class:`UpdateStep`'s.
    ``model`` is the bare module (wrapped in DDP here when distributed); ``optimizer`` is built over
    its parameters; ``peak_lrs`` are the groups' peak learning rates. ``flops_fn(layout)`` (optional)
    gives the model FLOPs of a training step on a micro-batch of that :class:`Layout` for MFU.

    The data: ``phases`` with ``collate`` (:class:`PhaseBatches`; their steps must add up to the
    schedule's), or another ``batches`` source (then ``phases`` and ``collate`` are None; the run
    ends at the schedule's total or when the source is used up, and has no ``run_dir``: a
    checkpoint holds the phases' cursor). ``on_update(trainer, stats)`` is called after every
    update attempt (``stats`` None: skipped); ``run_dir`` None trains without checkpoints, metrics
    file or resume; ``name`` labels the progress bar and the messages.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule: ScheduleConfig,
        phases: list[Phase] | None,
        collate: Collate | None,
        config: TrainConfig,
        run_dir: str | Path | None,
        info: D.DistInfo | None = None,
        eval_dataset: Sequence[Any] | None = None,
        eval_collate: Collate | None = None,
        flops_fn: Callable[[Layout], float] | None = None,
        settings: dict[str, Any] | None = None,
        log: Callable[[str], None] | None = None,
        objective: Objective | None = None,
        faults: Faults = NO_FAULTS,
        batches: BatchSource | None = None,
        on_update: Callable[[Trainer, StepStats | None], None] | None = None,
        name: str | None = None,
    ) -> None:
        self.core = model
        self.optimizer = optimizer
        self.peak_lrs = [g["lr"] for g in optimizer.param_groups]
        self.schedule, self.cfg = schedule, config
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.on_update, self.name = on_update, name
        self.info = info or D.DistInfo()
        self.eval_dataset, self.flops_fn = eval_dataset, flops_fn
        self.eval_collate = eval_collate or collate
        self.settings = settings or {}
        self._log = log or (lambda msg: print(msg, file=sys.stderr))
        if (phases is None) == (batches is None):
            raise ConfigError("a Trainer takes its data from phases or from a batches source")
        if phases is not None:
            if sum(p.steps for p in phases) != schedule.total_steps:
                raise ConfigError("the phases' steps must add up to the schedule's total steps")
            batches = PhaseBatches(phases, collate, config, self.info, self.log)
        elif run_dir is not None:
            raise ConfigError(
                "a run with a run_dir draws from phases (checkpoints keep their cursor)"
            )
        self.batches: BatchSource = batches
        # the precision this machine runs (bf16 without native support: fp32, with a notice)
        self.precision = P.resolve(config.precision, self.info.device)
        self.objective = objective or MlmNsp()
        self.faults = faults
        params = [p for g in optimizer.param_groups for p in g["params"]]
        self.update = UpdateStep(
            optimizer,
            self.objective,
            params,
            self.precision,
            self.info.device,
            config.clip_norm,
            self.info,
            flops_fn,
        )
        self.scaler = self.update.scaler
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl") if self.run_dir else None
        self.spikes = SpikeDetector(config.spike_factor)
        self.step = 0
        self.attempts = 0
        self.skipped = 0
        self.consecutive_skips = 0
        self.window: dict[str, float] = {}
        self.pending: StepStats | None = None
        """Statistics since the last fold into ``window``, still on the device."""
        self._prefetch: Prefetcher | None = None
        self.deadline = (
            DeadlineSchedule(
                config.end_by,
                config.log_every,
                time.time,
                reserve_updates=config.reserve_updates,
                reserve_seconds=config.reserve_seconds,
            )
            if config.end_by is not None
            else None
        )

    # ---- messages --------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        if self.info.is_main:
            self._log(msg)

    def record(self, rec: dict[str, Any]) -> None:
        """A line of ``metrics.jsonl`` (rank 0; nothing without a ``run_dir``)."""
        if self.info.is_main and self.metrics is not None:
            self.metrics.append(rec)

    # ---- one update -----------------------------------------------------------------------------

    @property
    def phases(self) -> list[Phase] | None:
        """The phases the run draws from (None with another source)."""
        return self.batches.phases if isinstance(self.batches, PhaseBatches) else None

    @phases.setter
    def phases(self, phases: list[Phase]) -> None:
        if not isinstance(self.batches, PhaseBatches):
            raise ConfigError("this run draws from a batches source, not from phases")
        self.batches.phases = phases

    def _make_micro_batches(self, *key: int) -> list[MicroBatch]:
        """This rank's micro-batches of the update at ``key`` (both sources' keys are pairs of
        ints; run ahead of time by the prefetching thread)."""
        return self.batches.make(key, self.update.prepare)

    def _micro_batches(self) -> list[MicroBatch]:
        key = self.batches.next_key(self.step)
        if self._prefetch is None:
            ready = self._make_micro_batches(*key)
        else:
            count = min(self._depth(), self.schedule.total_steps - self.step - 1)
            ready = self._prefetch.get(key, self.batches.upcoming(self.step, count))
        self.batches.advance()
        return [m.to(self.info.device, non_blocking=True) for m in ready]

    def _fold(self) -> None:
        """Read the pending statistics back (once per log line or checkpoint) into ``window``."""
        if self.pending is not None:
            for k, v in self.pending.read().items():
                self.window[k] = self.window.get(k, 0.0) + v
            self.pending = None

    def _train_step(self, model: nn.Module) -> StepStats | None:
        """One update attempt; returns its statistics, or None when the update was skipped."""
        attempt = self.attempts
        self.attempts += 1
        D.mark("update", self.step + 1)
        self.faults.at_step(self.info.rank, self.step + 1)
        batches = self._micro_batches()
        if attempt in self.faults.drop_attempts:
            return None
        set_lr(self.optimizer, self.peak_lrs, self.step, self.schedule)
        stats = self.update(model, batches, poison=attempt in self.faults.nan_at_attempts)
        if stats is not None:
            self.step += 1
        return stats

    # ---- evaluation -----------------------------------------------------------------------------

    def evaluate(self) -> dict[str, float] | None:
        """The objective's held-out figures on the first ``eval_examples`` examples (rank 0 only;
        :func:`bertkit.training.objectives.evaluate_heldout`)."""
        if self.eval_dataset is None or not self.info.is_main:
            return None
        n = min(len(self.eval_dataset), self.cfg.eval_examples)
        size = max(1, self.cfg.batch_size // (self.cfg.grad_accum * self.info.world_size))
        return evaluate_heldout(
            self.core,
            self.objective,
            [self.eval_dataset[i] for i in range(n)],
            self.eval_collate,
            batch_size=size,
            precision=self.precision,
            device=self.info.device,
        )

    # ---- the loop -------------------------------------------------------------------------------

    def fit(self) -> TrainResult:
        """Train until ``schedule.total_steps`` updates, resuming from ``run_dir`` when possible."""
        cfg, info = self.cfg, self.info
        t_start = time.perf_counter()
        if self.run_dir is not None:
            R.start(self)
        start_step = self.step  # a resume's checkpoint
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
            desc=self.name or "pretrain",
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
        return dataclasses.replace(self._finish(t_start), start_step=start_step)

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
            if self.batches.next_key(self.step) is None:
                break  # the source's data are used up (updates skipped on the way)
            stats = self._train_step(model)
            if self.deadline is not None:
                self.deadline.updated(self.step)
            if self.on_update is not None:
                self.on_update(self, stats)
            if stats is None:
                self._on_skip()
                continue
            self.consecutive_skips = 0
            if self.pending is None:
                self.pending = stats
            else:
                self.pending.values = self.pending.values + stats.values
            spike = self.spikes.update(stats.loss)
            if spike is not None:
                self.log(
                    f"warning: loss spike at step {self.step}: {stats.loss:.4f} vs recent "
                    f"mean {spike:.4f}"
                )
                self.record(
                    {"type": "spike", "step": self.step, "loss": stats.loss, "reference": spike}
                )
            bar.update(1)
            saving = self.step % cfg.save_every == 0 or self.step == total
            if saving:
                self._fold()  # the checkpoint holds the window
            if self.step % cfg.log_every == 0 or self.step == total:
                self._fold()
                now = time.perf_counter()
                lr = self.optimizer.param_groups[0]["lr"]
                figures, peaks = (
                    self.objective.figures(self.window),
                    peak and peak * info.world_size,
                )
                rec = train_record(
                    self.step, self.window, figures, lr, self.skipped, now - t_window, peaks
                )
                t_window, self.window = now, {}
                self.record(rec)
                if info.is_main:
                    bar.set_postfix(loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}")
                if self.deadline is not None and self.step < total:
                    meet_deadline(self)
                    total = self.schedule.total_steps
                    if hasattr(bar, "total"):
                        bar.total = total
            t_pause = time.perf_counter()  # evaluations and checkpoints are not training time
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < total:
                self._eval_and_log()
            if saving and self.run_dir is not None:
                R.save(self)
            paused = time.perf_counter() - t_pause
            if self.deadline is not None:
                self.deadline.paused(paused)
            t_window += paused

    def _finish(self, t_start: float) -> TrainResult:
        info, total = self.info, self.schedule.total_steps
        finished, last_eval = R.finished(self) if self.run_dir is not None else (False, None)
        if finished:
            self.log(f"already finished ({total} steps); nothing to train")
        else:
            last_eval = self._eval_and_log()
        if info.is_main and self.metrics is not None and self.run_dir is not None:
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
            self.record({"type": "eval", "step": self.step, **result})
            self.log(f"step {self.step} held-out: {self.objective.describe(result)}")
        D.barrier(self.info)
        return result

    def _on_skip(self) -> None:
        self.skipped += 1
        self.consecutive_skips += 1
        where = f"{self.name}: " if self.name else ""
        self.log(skip_warning(self.step, self.consecutive_skips, where))
        self.record({"type": "skip", "step": self.step + 1, "attempt": self.attempts - 1})
        check_skips(self.step, self.consecutive_skips, self.cfg.max_consecutive_skips, where)
