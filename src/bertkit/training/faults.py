"""Test-only fault injection and negative controls for the training loop, in one place.

Production code never sets these; the resume, NaN and kill tests do (through ``Trainer(faults=)``
or the hidden ``bertkit pretrain --debug-*`` flags). Each switch exists so that a test can show
that a piece of state matters: drop it and the run must differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Faults:
    restore_rng: bool = True
    """False: a resume does not restore the RNG streams (control for exact resume)."""
    restore_cursor: bool = True
    """False: a resume restarts the data order (control for exact resume)."""
    checkpoint_write_delay: float = 0.0
    """Seconds to sleep between checkpoint files, so kill tests can land inside a write."""
    nan_at_attempts: frozenset[int] = field(default_factory=frozenset)
    """Update attempts (0-based, skipped ones included) whose loss is made NaN."""
    drop_attempts: frozenset[int] = field(default_factory=frozenset)
    """Update attempts whose batch is consumed without training (control for skipped updates)."""


NONE = Faults()
