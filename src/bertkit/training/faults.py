"""Test-only fault injection and negative controls for the training loop, in one place.

Production code never sets these; the resume, NaN and kill tests do (through ``Trainer(faults=)``
or the hidden ``bertkit pretrain --debug-*`` flags). Each switch exists so that a test can show
that a piece of state matters: drop it and the run must differ.
"""

from __future__ import annotations

import sys
import threading
import time
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
    fail_checkpoint_at: frozenset[int] = field(default_factory=frozenset)
    """Steps whose checkpoint write fails (an OSError "no space left" after the first file)."""
    raise_at: tuple[int, int] | None = None
    """(rank, step): that rank raises a RuntimeError as update ``step`` starts."""
    hang_at: tuple[int, int] | None = None
    """(rank, step): that rank stops responding (blocks forever) as update ``step`` starts."""

    def at_step(self, rank: int, step: int) -> None:
        """Called by every rank as each update starts: raise or hang where asked to."""
        if self.raise_at == (rank, step):
            _say(f"rank {rank} raises at step {step}")
            raise RuntimeError(f"injected fault (rank {rank}, step {step})")
        if self.hang_at == (rank, step):
            _say(f"rank {rank} hangs at step {step}")
            threading.Event().wait()


NONE = Faults()


def _say(what: str) -> None:
    """Announce an injected fault with its wall-clock time (tests measure from it)."""
    print(f"debug: {what} (t={time.time():.3f})", file=sys.stderr, flush=True)
