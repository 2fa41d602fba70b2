"""The CPU as the OS reports it: model, vendor, SIMD features, cores; and how many are idle now.

Every performance figure names the CPU class it was measured on (:attr:`CpuInfo.label`).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class CpuInfo:
    """The CPU as the OS reports it, and the SIMD features that pick kernels."""

    model: str
    vendor: str
    arch: str
    logical_cores: int
    torch_capability: str
    """ATen's vectorised-kernel level (``torch.backends.cpu.get_cpu_capability``)."""
    features: dict[str, bool]
    """avx2, avx512f, avx512_bf16, avx512_fp16, amx_bf16, amx_tile, avx512_vnni, avx_vnni (x86);
    neon, bf16 (ARM)."""

    @property
    def simd_class(self) -> str:
        """A short name for performance tables: AMX, AVX-512+BF16, AVX-512, AVX2, NEON, ..."""
        f = self.features
        if f.get("amx_bf16"):
            return "AMX"
        if f.get("avx512f"):
            return "AVX-512+BF16" if f.get("avx512_bf16") else "AVX-512"
        if f.get("avx2"):
            return "AVX2"
        if f.get("neon"):
            return "NEON+BF16" if f.get("bf16") else "NEON"
        return "generic"

    @property
    def label(self) -> str:
        """``"<model> (<SIMD class>)"``: the CPU class every speed figure names."""
        return f"{self.model} ({self.simd_class})"


_X86_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "amx_bf16",
    "amx_tile",
    "avx512_vnni",
    "avx_vnni",
)


@cache
def cpu_info() -> CpuInfo:
    """Read ``/proc/cpuinfo`` (Linux) or ``platform`` elsewhere; cached for the process."""
    model, vendor, flags = platform.processor() or "unknown", "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "cpu model") and model in ("unknown", "", "x86_64"):
                    model = value.strip()
                elif key == "vendor_id":
                    vendor = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
                elif key == "" and flags:
                    break  # the first processor's block is enough
    except OSError:
        pass
    arch = platform.machine()
    if arch.lower() in ("aarch64", "arm64"):
        features = {"neon": "asimd" in flags or arch == "arm64", "bf16": "bf16" in flags}
    else:
        features = {name: name in flags for name in _X86_FLAGS}
    return CpuInfo(
        model=" ".join(model.split()),
        vendor=vendor,
        arch=arch,
        logical_cores=os.cpu_count() or 1,
        torch_capability=torch.backends.cpu.get_cpu_capability(),
        features=features,
    )


def _busy_seconds() -> float:
    """CPU seconds spent outside idle on the whole machine since boot (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def others_busy_cores(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()``, and how many cores other processes kept busy while it ran: the machine's
    non-idle time less this process's CPU time, over the wall time (0.0 where /proc/stat is
    missing). A timed probe that shared the cores says so and is not kept for later runs."""
    try:
        busy0, own0, t0 = _busy_seconds(), sum(os.times()[:2]), time.perf_counter()
    except (OSError, ValueError, IndexError):
        return fn(), 0.0
    out = fn()
    wall = time.perf_counter() - t0
    others = (_busy_seconds() - busy0) - (sum(os.times()[:2]) - own0)
    return out, max(0.0, others / wall) if wall > 0 else 0.0


def idle_threads(cores: int = 2) -> int:
    """``cores`` threads on an idle machine, fewer when other work keeps cores busy now:
    oversubscribed OpenMP threads made a tiny-BERT step ~5x slower than one thread here.

    "Now" is the CPU time spent outside idle over 0.3 s (``/proc/stat``); the load average,
    used where /proc/stat is missing, lags by a minute and so sees a job that just ended."""

    def idle_total() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, all

    try:
        i0, t0 = idle_total()
        time.sleep(0.3)
        i1, t1 = idle_total()
        busy = (1 - (i1 - i0) / max(1, t1 - t0)) * (os.cpu_count() or cores)
    except (OSError, ValueError, IndexError):
        try:
            busy = os.getloadavg()[0]
        except OSError:
            return cores
    return max(1, min(cores, round(cores - busy)))
