"""One optimizer update, shared by pre-training and fine-tuning.

Over a step's micro-batches: forward under the run's precision, the objective's loss term,
backward (through a GradScaler for fp16, without gradient all-reduce except on the last
micro-batch under DDP; a model whose backward runs several passes, GradCache's, reduces on none
and its gradients are averaged over ranks after the last), then unscaling, clipping and the
optimizer step. An update whose loss or gradient norm is not finite is skipped: gradients are
dropped and ``None`` is returned (the caller does not advance its step counter or schedule; its
batch is consumed).

Nothing here waits for the device but one read per update (docs/gpu.md): what a micro-batch
holds (masked tokens, examples, real tokens, FLOPs, the packed layout) is counted on the CPU
when it is collated (:meth:`UpdateStep.prepare`, in the prefetching thread); the statistics stay
on the device as one vector (:class:`StepStats`), read by the caller once per log line; the one
read is the step's loss, NaN when the loss or the gradient norm is not finite, which decides
whether the optimizer steps.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from bertkit import precision as P
from bertkit.errors import BertkitError
from bertkit.model.batching import Layout, layout
from bertkit.training import distributed as D
from bertkit.training.objectives import Objective


class TrainingError(BertkitError):
    """Training cannot continue (e.g. too many non-finite updates in a row)."""


MAX_CONSECUTIVE_SKIPS = 100
"""The skip policy of every loop (pre-training and fine-tuning): an update whose loss or gradient
is not finite is skipped, its batch consumed, and this many in a row abort the run (the default
of both configs' ``max_consecutive_skips``)."""


def skip_warning(step: int, in_a_row: int, where: str = "") -> str:
    """The warning line for an update skipped at ``step``, ``in_a_row`` in a row (``where``
    names the run, e.g. ``"lr 1e-05 seed 1: "``)."""
    return (
        f"warning: {where}non-finite loss or gradient at step {step}; update skipped "
        f"({in_a_row} in a row)"
    )


def check_skips(step: int, in_a_row: int, limit: int, where: str = "") -> None:
    """Raise :class:`TrainingError` when ``in_a_row`` skipped updates reach ``limit``."""
    if in_a_row >= limit:
        raise TrainingError(
            f"{in_a_row} consecutive updates had a non-finite loss or gradient ({where}at step "
            f"{step}); lower the learning rate or check the data"
        )


@dataclass
class MicroBatch:
    """A micro-batch ready for the device: the model's inputs (tensors, and the ``layout`` of
    the padded batch) and what the update needs to know of it, all counted on the CPU."""

    inputs: dict[str, Any]
    counts: list[float]
    """The objective's counts (``Objective.counts``)."""
    tokens: float
    """Real (non-pad) tokens."""
    flops: float = 0.0
    targets: dict[str, torch.Tensor] = field(default_factory=dict)
    """The objective's own entries of the batch (``target_keys``), passed to its ``term``."""

    def to(self, device: str | torch.device, non_blocking: bool = False) -> MicroBatch:
        moved = {k: v.to(device, non_blocking=non_blocking) for k, v in self.inputs.items()}
        targets = {k: v.to(device, non_blocking=non_blocking) for k, v in self.targets.items()}
        return MicroBatch(moved, self.counts, self.tokens, self.flops, targets)

    def pin_memory(self) -> MicroBatch:
        pinned = {k: v.pin_memory() for k, v in self.inputs.items()}
        targets = {k: v.pin_memory() for k, v in self.targets.items()}
        return MicroBatch(pinned, self.counts, self.tokens, self.flops, targets)


@dataclass
class StepStats:
    """An update's summed statistics: ``loss`` read back (the one read), the rest (``keys``)
    still on the device in ``values`` until :meth:`read`."""

    loss: float
    keys: tuple[str, ...]
    values: torch.Tensor
    """(len(keys),) float64 on the device, all-reduced over ranks."""

    def read(self) -> dict[str, float]:
        return dict(zip(self.keys, self.values.tolist(), strict=True))

    def __getitem__(self, key: str) -> float:  # convenience for tests and small loops
        return self.loss if key == "loss" else self.read()[key]


def multi_pass_backward(model: nn.Module) -> bool:
    """Whether ``model`` (or the module DDP wraps) runs more than one backward pass into its
    parameters per ``backward()`` call: its ``multi_pass_backward`` attribute (the bi-encoder's
    GradCache, :mod:`bertkit.model.grad_cache`). Such a model is trained under DDP with
    gradient reduction off and :func:`~bertkit.training.distributed.average_gradients` after
    the update's last micro-batch."""
    if isinstance(model, DistributedDataParallel):
        model = model.module
    return bool(getattr(model, "multi_pass_backward", False))


@dataclass
class UpdateStep:
    optimizer: torch.optim.Optimizer
    objective: Objective
    params: list[torch.nn.Parameter]
    """What gradient clipping covers."""
    precision: str
    """A resolved precision (:func:`bertkit.precision.resolve`)."""
    device: str | torch.device
    clip_norm: float = 1.0
    info: D.DistInfo | None = None
    flops_fn: Callable[[Layout], float] | None = None
    """A micro-batch's training FLOPs from its :class:`Layout` (MFU)."""

    def __post_init__(self) -> None:
        # alone, the process runs where the update does (a default DistInfo says "cpu")
        self.info = self.info or D.DistInfo(device=str(self.device))
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.keys = ("loss", *self.objective.stat_keys, "tokens", "flops", "grad_norm", "steps")

    def prepare(self, batch: dict[str, torch.Tensor]) -> MicroBatch:
        """A collated CPU batch as a :class:`MicroBatch` (call it where the batch is collated)."""
        counts = [float(c) for c in self.objective.counts(batch)]
        mask = batch.get("attention_mask")
        full = mask if mask is not None else torch.ones_like(batch["input_ids"])
        labels = batch.get("labels")
        per_token = labels is not None and labels.shape == full.shape and full.dim() == 2
        # the one count of the batch's tokens and labelled positions (the FLOPs read it too)
        laid = layout(full.reshape(-1, full.shape[-1]), labels if per_token else None)
        flops = float(self.flops_fn(laid)) if self.flops_fn is not None else 0.0
        inputs: dict[str, Any] = dict(batch)
        targets = {k: inputs.pop(k) for k in getattr(self.objective, "target_keys", ())}
        if mask is not None:
            inputs["layout"] = laid
        return MicroBatch(inputs, counts, float(laid.tokens), flops, targets)

    def __call__(
        self,
        model: nn.Module,
        batches: Sequence[MicroBatch | dict[str, torch.Tensor]],
        *,
        poison: bool = False,
    ) -> StepStats | None:
        """Run the update; returns its :class:`StepStats` (``loss``, the objective's keys,
        ``tokens``, ``flops``, ``grad_norm``, ``steps``) or None when it was skipped. Plain dict
        batches are prepared here and moved to the update's device with their layout (the
        layout is counted on the host). ``poison`` makes the loss NaN (fault injection, tests
        only)."""
        info, obj = self.info, self.objective
        assert info is not None
        mbs = [b if isinstance(b, MicroBatch) else self.prepare(b).to(self.device) for b in batches]
        own = [m.counts for m in mbs]
        totals: list[float] | torch.Tensor = [sum(c) for c in zip(*own, strict=True)]
        if info.distributed:  # on the device, not read back: the terms divide by it there
            totals = D.all_reduce_tensor(self._on_device(totals), info)
        stats = {k: self._on_device([0.0])[0] for k in self.keys[:-4]}
        # DDP reduces the gradients in the hooks of a backward; a model whose one backward runs
        # several (GradCache's replay) would be reduced once per pass, so here DDP reduces none
        # and the update averages the gradients itself, once, after the last micro-batch.
        own_reduce = info.distributed and multi_pass_backward(model)
        for j, m in enumerate(mbs):
            sync = not info.distributed or (j == len(mbs) - 1 and not own_reduce)
            with (
                contextlib.nullcontext() if sync else model.no_sync(),
                P.autocast(self.precision, self.device),
            ):
                out = model(**m.inputs)
                term = obj.term(out, own[j], totals, **m.targets)
                if poison:
                    term = term * float("nan")
            # DDP averages gradients over ranks; the step's loss is their sum, so scale back up.
            scaled = term * info.world_size
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            stats["loss"] = stats["loss"] + term.detach().double()
            obj.accumulate(stats, out, own[j])
        if own_reduce:  # what DDP's reduction would have left: the mean over ranks
            D.average_gradients([p for p in model.parameters() if p.requires_grad], info)
        extra = self._on_device([sum(m.tokens for m in mbs), sum(m.flops for m in mbs)])
        values = D.all_reduce_tensor(torch.cat([torch.stack(list(stats.values())), extra]), info)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip_norm).double()
        # the one read of the update: the loss, NaN when it or the gradient norm is not finite
        loss = float(torch.where(torch.isfinite(grad_norm), values[0], math.nan))
        if not math.isfinite(loss):
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.update()  # lowers the loss scale after an overflow
            return None
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        one = self._on_device([1.0])
        return StepStats(loss, self.keys, torch.cat([values, grad_norm.reshape(1), one]))

    def _on_device(self, numbers: Sequence[float]) -> torch.Tensor:
        """(len,) float64 on the device, each number written by a fill kernel: no host-to-device
        copy from pageable memory, which would wait for the device."""
        return torch.stack(
            [torch.full((), float(x), dtype=torch.float64, device=self.device) for x in numbers]
        )
