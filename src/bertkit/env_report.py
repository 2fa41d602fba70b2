"""What ``bertkit env`` (and every benchmark's header) reports: versions, the CPU, threads,
CUDA devices, and each hardware decision with its reason.

The caller passes bertkit's own version in (the command line reads it from the package), so
this foundation module imports nothing above it.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import asdict

import torch

from bertkit import hardware, probe_cache
from bertkit.cpu import cpu_info
from bertkit.probes import ONEDNN_AVAILABLE


def supported_torch() -> dict[str, object]:
    """The torch versions bertkit declares (its package metadata, i.e. pyproject.toml: the one
    home of the range) and whether the installed torch is among them (None: not knowable, e.g.
    bertkit run from a source tree without being installed)."""
    try:
        from importlib.metadata import PackageNotFoundError, requires

        spec = next(
            (r for r in requires("bertkit") or () if r.replace(" ", "").startswith("torch")), None
        )
    except (ImportError, PackageNotFoundError):
        spec = None
    if spec is None:
        return {"range": None, "ok": None}
    rng = spec.replace(" ", "")[len("torch") :].split(";")[0]
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        ok = Version(torch.__version__.split("+")[0]) in SpecifierSet(rng)
    except ImportError:
        ok = None
    return {"range": rng, "ok": ok}


def report(version: str) -> dict:
    """Everything ``bertkit env`` shows: versions (``version``: bertkit's), CPU, threads, CUDA,
    and each decision (made now where not made yet)."""

    def installed(module: str) -> str | None:
        try:
            from importlib.metadata import version as v

            return v(module)
        except Exception:
            return None

    cuda = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            memory = round(p.total_memory / 2**30, 1)
            capability = f"{p.major}.{p.minor}"
            cuda.append(
                {"index": i, "name": p.name, "memory_gib": memory, "capability": capability}
            )
    info = cpu_info()
    return {
        "bertkit": version,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_supported": supported_torch(),
        "transformers": installed("transformers"),
        "tokenizers": installed("tokenizers"),
        "cpu": asdict(info) | {"class": info.simd_class},
        "threads": {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads()},
        "blas": "MKL" if torch.backends.mkl.is_available() else "ATen default (OpenBLAS/other)",
        "onednn": ONEDNN_AVAILABLE,
        "cuda": cuda,
        "decisions": {name: asdict(d) for name, d in hardware.decisions().items()},
        "bf16_speedup": round(hardware.bf16_speedup(), 2),
        "probe_cache": str(probe_cache.cache_dir()) if probe_cache.cache_dir() else None,
    }
