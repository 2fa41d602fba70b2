"""Learning-rate schedule: linear warmup, then linear decay to zero, as a pure function of the step.

The schedule is stateless: the learning rate of update ``step`` (0-based count of optimizer updates
already applied) depends only on ``step`` and the settings, so resuming needs only the step number.
The formula is the one of Hugging Face's ``get_linear_schedule_with_warmup`` (and google-research/bert's
``polynomial_decay`` with power 1 plus warmup):

    factor(step) = step / warmup                        if step < warmup
                 = max(0, (total - step) / (total - warmup))   otherwise

With ``restart_at`` the run has two such segments, as NVIDIA's BERT recipe runs its 128- and
512-token phases as two runs: the first warms up and decays to zero at ``restart_at``, the second
warms up again over ``restart_warmup_steps`` to ``restart_peak`` times the peak and decays to
zero at ``total_steps``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bertkit.errors import ConfigError


@dataclass(frozen=True)
class ScheduleConfig:
    """Linear warmup then linear decay over ``total_steps`` optimizer updates."""

    total_steps: int
    """Optimizer updates in the whole run (all sequence-length phases together)."""
    warmup_steps: int = 0
    """Updates over which the learning rate rises linearly from 0 to its peak."""
    restart_at: int = 0
    """Update at which a second warmup-and-decay segment starts (0: one segment)."""
    restart_warmup_steps: int = 0
    """Warmup updates of the second segment."""
    restart_peak: float = 1.0
    """The second segment's peak as a multiple of the first's."""

    def __post_init__(self) -> None:
        if self.total_steps <= 0:
            raise ConfigError(f"total_steps must be positive, got {self.total_steps}")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ConfigError(
                f"warmup_steps must be in [0, total_steps={self.total_steps}], got {self.warmup_steps}"
            )
        if self.restart_at:
            room = self.total_steps - self.restart_at
            if not self.warmup_steps <= self.restart_at < self.total_steps:
                raise ConfigError(
                    f"restart_at must be in [warmup_steps={self.warmup_steps}, "
                    f"total_steps={self.total_steps}), got {self.restart_at}"
                )
            if not 0 <= self.restart_warmup_steps <= room:
                raise ConfigError(
                    f"restart_warmup_steps must be in [0, {room}], got {self.restart_warmup_steps}"
                )
            if not self.restart_peak > 0:
                raise ConfigError(f"restart_peak must be positive, got {self.restart_peak}")

    @classmethod
    def from_proportion(cls, total_steps: int, warmup_proportion: float) -> ScheduleConfig:
        """Warmup over ``ceil(proportion * total)`` steps (google's ``warmup_proportion``)."""
        if not 0.0 <= warmup_proportion <= 1.0:
            raise ConfigError(f"warmup proportion must be in [0, 1], got {warmup_proportion}")
        return cls(total_steps, math.ceil(warmup_proportion * total_steps))


def _segment(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return step / warmup
    decay = total - warmup
    if decay == 0:
        return 1.0 if step < total else 0.0
    return max(0.0, (total - step) / decay)


def lr_factor(step: int, config: ScheduleConfig) -> float:
    """Multiplier of the peak learning rate for update ``step`` (0-based).

    >>> cfg = ScheduleConfig(total_steps=10, warmup_steps=4)
    >>> [lr_factor(s, cfg) for s in (0, 2, 4, 7, 10)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    >>> two = ScheduleConfig(10, 2, restart_at=6, restart_warmup_steps=2, restart_peak=0.5)
    >>> [lr_factor(s, two) for s in range(11)]
    [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0, 0.25, 0.5, 0.25, 0.0]
    """
    if config.restart_at and step >= config.restart_at:
        local = step - config.restart_at
        room = config.total_steps - config.restart_at
        return config.restart_peak * _segment(local, room, config.restart_warmup_steps)
    end = config.restart_at or config.total_steps
    return _segment(step, end, config.warmup_steps)


def set_lr(optimizer, peak_lrs: list[float], step: int, config: ScheduleConfig) -> float:
    """Set every param group's ``lr`` for update ``step``; returns the first group's value.

    ``peak_lrs`` holds each group's peak rate (in group order); it is kept outside the optimizer so
    that the value written here never feeds back into the next step's computation.
    """
    factor = lr_factor(step, config)
    for group, peak in zip(optimizer.param_groups, peak_lrs, strict=True):
        group["lr"] = peak * factor
    return optimizer.param_groups[0]["lr"]
