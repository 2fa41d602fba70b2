"""What a training run is given: its phases (data + steps) and how to train (``TrainConfig``).

The loop itself is :mod:`bertkit.training.loop`; these are the typed options it reads, one field
each (``bertkit pretrain`` builds its flags from them).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from bertkit import precision as P
from bertkit.errors import ConfigError
from bertkit.training.update import MAX_CONSECUTIVE_SKIPS, MicroBatch

Collate = Callable[[list[Any], list[int]], dict[str, torch.Tensor]]


@dataclass
class Phase:
    """A stretch of training on one dataset (BERT: 90% of steps at length 128, then 512)."""

    dataset: Sequence[Any]
    steps: int
    name: str = "phase"
    collate: Collate | None = None
    """This phase's collate function (None: the Trainer's)."""
    shards: tuple[tuple[int, int], ...] | None = None
    """The dataset's shards as (start, stop) index ranges: the data order is then shard-local
    (``TrainConfig.shard_window``); None: one permutation over all examples."""
    batch_size: int | None = None
    """Examples per update in this phase (None: ``TrainConfig.batch_size``); NVIDIA's BERT recipe
    runs its long phase with half the batch of its short one."""


class BatchSource(Protocol):
    """Where a Trainer's updates draw their data: pre-training's phases
    (:class:`bertkit.training.phase_batches.PhaseBatches`, the default) or fine-tuning's epochs
    (:class:`bertkit.training.epochs.EpochBatches`). ``step`` is the count of successful updates
    so far; a key names one update's batch (the prefetching thread makes batches by key)."""

    def next_key(self, step: int) -> Hashable | None:
        """The next update's key, or None when the data are used up."""
        ...

    def upcoming(self, step: int, count: int) -> list[Hashable]:
        """The keys of the ``count`` updates after the next one, should each succeed."""
        ...

    def advance(self) -> None:
        """Move past the next update's batch (trained on or skipped)."""
        ...

    def make(
        self, key: Any, prepare: Callable[[dict[str, torch.Tensor]], MicroBatch]
    ) -> list[MicroBatch]:
        """This rank's micro-batches of the update at ``key``."""
        ...


@dataclass
class TrainConfig:
    """How to train (the what, model and data, is passed to ``Trainer`` directly)."""

    batch_size: int = 32
    """Examples per optimizer update, all ranks and micro-batches together."""
    grad_accum: int = 1
    """Micro-batches per update on each rank, run one after the other with their gradients
    summed: the same update in about 1/grad_accum of the activation memory."""
    seed: int = 0
    """Seeds the data order (with phase and epoch), masking and the dropout RNG."""
    precision: str = P.DEFAULT
    """One of :data:`bertkit.precision.CHOICES`: auto, fp32, bf16 (autocast on CPU or CUDA) or
    fp16 (CUDA only, with a GradScaler)."""
    clip_norm: float = 1.0
    """Gradient clipping norm (over all parameters)."""
    log_every: int = 10
    """A metrics.jsonl line every N updates."""
    eval_every: int = 0
    """Held-out evaluation every N updates (0: at the end only)."""
    eval_examples: int = 2048
    """Held-out examples per evaluation."""
    save_every: int = 1000
    """A checkpoint every N updates."""
    keep_last: int = 3
    """Checkpoints to keep."""
    max_consecutive_skips: int = MAX_CONSECUTIVE_SKIPS
    """Non-finite updates in a row that abort the run (each is skipped, its batch consumed)."""
    collective_timeout: float = 300.0
    """Seconds a process waits for the others (joining the group, each collective) before every
    process stops with an error naming the rank that did not answer (distributed runs only)."""
    spike_factor: float = 2.0
    """A loss this many times the recent mean is logged as a spike (``math.inf``: never)."""
    shard_window: int = 8
    """Shards shuffled together (a phase with shards): each rank caches at most twice this many;
    data with no more shards than this keep one permutation over all instances."""
    prefetch: int | None = None
    """Updates whose micro-batches are collated ahead in a background thread (0: in series;
    None: 2 on an accelerator, 0 on the CPU, where the thread competes with the compute)."""
    peak_flops: float | None = None
    """FLOP/s counted as 100% MFU; None measures a matmul at start-up."""
    show_progress: bool | None = None
    end_by: float | None = None
    """A wall-clock deadline (``time.time()`` seconds) for the whole run, the final evaluation
    included. Measured against it at every log line, the run ends its decay sooner when the
    updates left would not fit: the schedule's total shrinks (never grows) so that the learning
    rate still reaches zero at the last update. None: the step count is fixed."""
    reserve_updates: float = 0.0
    """With ``end_by``: this many updates' worth of time (at the measured rate) is kept back for
    work after the last update that the loop does not time (fine-tuning's last dev scoring and
    save), when more than the longest pause measured so far."""
    reserve_seconds: float = 0.0
    """With ``end_by``: seconds kept back besides ``reserve_updates`` (fine-tuning's last save,
    whose time depends on the model's bytes, not on the rate of its updates)."""

    def __post_init__(self) -> None:
        P.check(self.precision)
        at_least_one = (
            "batch_size",
            "grad_accum",
            "log_every",
            "save_every",
            "keep_last",
            "eval_examples",
            "max_consecutive_skips",
            "shard_window",
        )
        for name in at_least_one:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.reserve_updates < 0:
            raise ConfigError(f"reserve_updates must be >= 0, got {self.reserve_updates}")
        if self.reserve_seconds < 0:
            raise ConfigError(f"reserve_seconds must be >= 0, got {self.reserve_seconds}")
        if self.eval_every < 0:
            raise ConfigError(f"eval_every must be >= 0, got {self.eval_every}")
        if self.prefetch is not None and self.prefetch < 0:
            raise ConfigError(f"prefetch must be >= 0, got {self.prefetch}")
        if not self.collective_timeout > 0:
            raise ConfigError(f"collective_timeout must be > 0, got {self.collective_timeout}")


@dataclass
class TrainResult:
    step: int
    """The update count reached (the run's total, earlier runs' updates included)."""
    skipped: int
    final_eval: dict[str, float] | None
    seconds: float
    start_step: int = 0
    """The update count this run started from (a resume's checkpoint; 0 for a fresh run)."""

    @property
    def summary(self) -> str:
        """One line: the updates made by this run and by the whole job."""
        ran = self.step - self.start_step
        if self.start_step and not ran:
            return f"nothing to train: the run had finished its {self.step} steps"
        resumed = f", {ran} this run from step {self.start_step}" if self.start_step else ""
        return f"{self.step} steps ({self.skipped} skipped{resumed}) in {self.seconds:.1f}s"
