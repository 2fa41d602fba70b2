"""Interleaved timing: candidates run in alternation so machine noise hits every side alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved_seconds(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1
) -> dict[str, float]:
    """Median seconds per call of each function, calling them in turn (A B C A B C ...).

    Every function is warmed up ``warmup`` times first (allocator, caches, lazy init).
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(s) for name, s in samples.items()}
