"""One optimizer update, shared by pre-training and fine-tuning.

Over a step's micro-batches: forward under the run's precision, the objective's loss term,
backward (through a GradScaler for fp16, without gradient all-reduce except on the last
micro-batch under DDP), then unscaling, clipping and the optimizer step. An update whose loss or
gradient norm is not finite is skipped: gradients are dropped and ``None`` is returned (the
caller does not advance its step counter or schedule; its batch is consumed).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from bertkit import precision as P
from bertkit.errors import BertkitError
from bertkit.training import distributed as D
from bertkit.training.objectives import Objective


class TrainingError(BertkitError):
    """Training cannot continue (e.g. too many non-finite updates in a row)."""


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
    flops_fn: Callable[[dict[str, torch.Tensor]], float] | None = None

    def __post_init__(self) -> None:
        self.info = self.info or D.DistInfo()
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None

    def __call__(
        self, model: nn.Module, batches: Sequence[dict[str, torch.Tensor]], *, poison: bool = False
    ) -> dict[str, float] | None:
        """Run the update; returns summed statistics (``loss``, the objective's keys, ``tokens``,
        ``flops``, ``grad_norm``, ``steps``) or None when it was skipped. ``poison`` makes the loss
        NaN (fault injection, tests only)."""
        info, obj = self.info, self.objective
        assert info is not None
        own = [obj.counts(b) for b in batches]  # read once per micro-batch (host syncs)
        totals = D.all_reduce_sum([sum(c) for c in zip(*own, strict=True)], info)
        stats = dict.fromkeys(("loss", *obj.stat_keys, "tokens"), 0.0)
        flops = 0.0
        for j, b in enumerate(batches):
            sync = j == len(batches) - 1 or not info.distributed
            with (
                contextlib.nullcontext() if sync else model.no_sync(),
                P.autocast(self.precision, self.device),
            ):
                out = model(**b)
                term = obj.term(out, own[j], totals)
                if poison:
                    term = term * float("nan")
            # DDP averages gradients over ranks; the step's loss is their sum, so scale back up.
            scaled = term * info.world_size
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            stats["loss"] += float(term.detach())
            obj.accumulate(stats, out, own[j])
            stats["tokens"] += (
                float(b["attention_mask"].sum())
                if "attention_mask" in b
                else b["input_ids"].numel()
            )
            if self.flops_fn is not None:
                flops += self.flops_fn(b)
        keys = list(stats)
        reduced = D.all_reduce_sum([*stats.values(), flops], info)
        stats = dict(zip(keys, reduced[:-1], strict=True))
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.clip_norm))
        if not (math.isfinite(stats["loss"]) and math.isfinite(grad_norm)):
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
        return {**stats, "flops": reduced[-1], "grad_norm": grad_norm, "steps": 1.0}
