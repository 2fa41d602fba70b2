"""Progress bars (rate and ETA) that stay quiet when stderr is not a terminal unless asked."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def progress(iterable: Iterable[T] | None = None, *, enabled: bool | None = None, **kwargs: Any):
    """A tqdm bar on stderr. ``enabled=None`` shows it on a TTY, or when BERTKIT_PROGRESS=1."""
    from tqdm.auto import tqdm

    if enabled is None:
        env = os.environ.get("BERTKIT_PROGRESS")
        enabled = sys.stderr.isatty() if env is None else env not in ("0", "", "false")
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("mininterval", 0.5)
    return tqdm(iterable, disable=not enabled, file=sys.stderr, **kwargs)


def took(seconds: float, count: float, unit: str) -> str:
    """The time and rate of a summary line: ``in 2.0s (50.0 lines/s)``."""
    return f"in {seconds:.1f}s ({count / max(seconds, 1e-9):.1f} {unit}/s)"


def plural(noun: str) -> str:
    """``line`` -> ``lines``, ``query`` -> ``queries``, ``batch`` -> ``batches``."""
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def counted(n: int, noun: str) -> str:
    """A count and its noun for summary lines, agreeing in number: ``1 shard``, ``3 shards``,
    ``0 queries`` (``noun`` singular)."""
    return f"{n} {noun if n == 1 else plural(noun)}"
