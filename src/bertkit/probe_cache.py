"""The on-disk cache of probe results: one JSON file, shared under a file lock.

``BERTKIT_PROBE_CACHE=0`` disables it; the folder is ``$BERTKIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/bertkit``, else ``~/.cache/bertkit``. The lock also keeps concurrent processes
(DDP ranks, a resumed run) on the same choice: the first one probes, the others read its result.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from bertkit.io import atomic_write_text


def cache_dir() -> Path | None:
    """Where probe results are kept (None when ``BERTKIT_PROBE_CACHE=0``)."""
    if os.environ.get("BERTKIT_PROBE_CACHE", "1") == "0":
        return None
    if os.environ.get("BERTKIT_CACHE_DIR"):
        return Path(os.environ["BERTKIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bertkit"


@contextlib.contextmanager
def locked() -> Iterator[Path | None]:
    """Yields the cache file with an exclusive lock held (or None when caching is off or the
    folder cannot be written: then every process probes for itself)."""
    folder = cache_dir()
    if folder is None:
        yield None
        return
    try:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / "kernels.lock", "a")  # noqa: SIM115 (held across the yield)
    except (ImportError, OSError):
        yield None
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield folder / "kernels.json"
    finally:
        lock.close()


def read(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write(path: Path, entries: dict) -> None:
    with contextlib.suppress(OSError):
        atomic_write_text(path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
