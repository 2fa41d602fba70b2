"""Crash-safe training checkpoints without pickle: tensors in safetensors, everything else in JSON.

Layout of one checkpoint, ``RUN/checkpoints/step-000001000/``::

    model.safetensors       model.state_dict() (tied weights stored once per name)
    optimizer.safetensors   optimizer state tensors ("state.<idx>.<key>")
    rng.safetensors         every RNG state of every rank ("rank<r>.<source>")
    state.json              step, scheduler, GradScaler, data cursor, optimizer groups, run settings
    manifest.json           sha256 and size of each file above; written last

Writing is atomic: files go to a hidden ``.tmp-*`` folder, each is fsynced, the manifest is written
last, and the folder is renamed to its final name (then the parent folder is fsynced). A kill at any
moment leaves either no new checkpoint or a complete one. Loading verifies every sha256; a corrupt or
truncated newest checkpoint is reported and the previous one is used instead.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from bertkit.errors import CheckpointError
from bertkit.io import sha256_file
from bertkit.staging import swap_folder

FORMAT = "bertkit-checkpoint-1"
"""The checkpoint layout this version writes and reads (tests/fixtures/compat holds one)."""
_NAME = re.compile(r"^step-(\d{9})$")
FILES = ("model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json")


class NewerFormatError(CheckpointError):
    """A checkpoint or model folder written by a newer bertkit: refused, never skipped."""


def check_format(found: Any, where: Path | str, current: str = FORMAT) -> None:
    """Refuse a newer ``bertkit-checkpoint-N`` (or an unknown format) with a clear message."""
    if found == current:
        return
    prefix, _, number = str(found).rpartition("-")
    mine = int(current.rpartition("-")[2])
    if prefix == current.rpartition("-")[0] and number.isdigit() and int(number) > mine:
        raise NewerFormatError(
            f"{where}: written in format {found!r} by a newer bertkit; this version reads "
            f"{current!r} (upgrade bertkit to resume it)"
        )
    raise CheckpointError(f"{where}: unknown format {found!r} (expected {current!r})")


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped (corrupt, truncated, incomplete) and an older one used."""


@dataclass
class Checkpoint:
    """The contents of one verified checkpoint."""

    path: Path
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, torch.Tensor]
    rng: dict[str, torch.Tensor]
    state: dict[str, Any]


# ---- writing -----------------------------------------------------------------------------------


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def checkpoint_dir_name(step: int) -> str:
    return f"step-{step:09d}"


def save_checkpoint(
    root: str | Path,
    step: int,
    *,
    model: dict[str, torch.Tensor],
    optimizer: dict[str, torch.Tensor],
    rng: dict[str, torch.Tensor],
    state: dict[str, Any],
    keep_last: int = 3,
    write_delay: float = 0.0,
    fail: bool = False,
) -> Path:
    """Write a checkpoint for ``step`` under ``root`` atomically, then keep only the newest ``keep_last``.

    ``write_delay`` (seconds, tests only) sleeps between files so a kill harness can hit a write;
    ``fail`` (tests only) makes the write fail after the first file, as on a full disk.
    Returns the final checkpoint folder.
    """
    root = Path(root)
    final = root / checkpoint_dir_name(step)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    try:
        _write_checkpoint(root, final, tmp, step, model, optimizer, rng, state, write_delay, fail)
    except OSError as e:  # full disk, lost permissions: clean up and say which checkpoint failed
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"{final}: cannot write the checkpoint ({e.strerror or e})") from e
    for old in list_checkpoints(root)[keep_last:]:
        _remove(old)
    return final


def _write_checkpoint(
    root: Path,
    final: Path,
    tmp: Path,
    step: int,
    model: dict[str, torch.Tensor],
    optimizer: dict[str, torch.Tensor],
    rng: dict[str, torch.Tensor],
    state: dict[str, Any],
    write_delay: float,
    fail: bool = False,
) -> None:
    """Write every file into ``tmp``, the manifest last, then rename ``tmp`` to ``final``."""
    root.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    blobs = {
        "model.safetensors": st_save(_own_tensors(model)),
        "optimizer.safetensors": st_save(_own_tensors(optimizer)),
        "rng.safetensors": st_save(_own_tensors(rng)),
        "state.json": (
            json.dumps({"format": FORMAT, "step": step, **state}, indent=1, sort_keys=True) + "\n"
        ).encode(),
    }
    for name, data in blobs.items():
        _write_synced(tmp / name, data)
        if fail:
            print(
                f"debug: checkpoint write fails (t={time.time():.3f})", file=sys.stderr, flush=True
            )
            raise OSError(errno.ENOSPC, "No space left on device (injected)", str(tmp / name))
        if write_delay:
            time.sleep(write_delay)
    manifest = {
        "format": FORMAT,
        "step": step,
        "files": {n: {"sha256": sha256_file(tmp / n), "bytes": len(blobs[n])} for n in blobs},
    }
    _write_synced(tmp / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    # re-saving a step (e.g. the last one after a finished run): the old folder goes only once the
    # new one is in place (clean_stale removes it after a crash), and comes back if the rename fails
    swap_folder(tmp, final, aside=root / f".del-{final.name}-{os.getpid()}")


def _own_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # safetensors refuses tensors that share memory (tied embeddings): give each name its own copy.
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in tensors.items()}


def _remove(path: Path) -> None:
    """Delete a checkpoint folder: rename it out of the way first so a kill never leaves a half one."""
    trash = path.with_name(f".del-{path.name}-{os.getpid()}")
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def clean_stale(root: str | Path) -> None:
    """Remove leftovers (``.tmp-*``, ``.del-*``) of writes interrupted by a crash."""
    root = Path(root)
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".tmp-", ".del-")):
                shutil.rmtree(p, ignore_errors=True)


# ---- reading -----------------------------------------------------------------------------------


def list_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint folders under ``root``, newest first (by step in the name)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Check the manifest and every file's size and sha256; returns the manifest.

    Raises CheckpointError naming what is wrong.
    """
    mpath = path / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise CheckpointError(f"{mpath}: missing (incomplete checkpoint)") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{mpath}: not valid JSON") from e
    check_format(manifest.get("format"), mpath)
    for name in FILES:
        info = manifest.get("files", {}).get(name)
        fpath = path / name
        if info is None:
            raise CheckpointError(f"{mpath}: no entry for {name}")
        if not fpath.is_file():
            raise CheckpointError(f"{fpath}: missing")
        if fpath.stat().st_size != info["bytes"]:
            raise CheckpointError(
                f"{fpath}: {fpath.stat().st_size} bytes, manifest says {info['bytes']} (truncated?)"
            )
        if sha256_file(fpath) != info["sha256"]:
            raise CheckpointError(f"{fpath}: sha256 does not match the manifest (corrupt)")
    return manifest


def read_checkpoint(path: Path) -> Checkpoint:
    """Verify and load one checkpoint folder (no pickle anywhere: safetensors + JSON)."""
    manifest = verify_checkpoint(path)
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    # clone: tensors parsed from a bytes buffer are not 64-byte aligned like fresh allocations;
    # owning aligned copies keeps every kernel on the same code path as in an uninterrupted run.
    tensors = {}
    for n in ("model", "optimizer", "rng"):
        fpath = path / f"{n}.safetensors"
        try:
            tensors[n] = {k: v.clone() for k, v in st_load(fpath.read_bytes()).items()}
        except SafetensorError as e:  # e.g. a pickle renamed .safetensors, manifest forged
            raise CheckpointError(f"{fpath}: not a valid safetensors file ({e})") from e
    return Checkpoint(
        path=path,
        step=int(manifest["step"]),
        model=tensors["model"],
        optimizer=tensors["optimizer"],
        rng=tensors["rng"],
        state=state,
    )


def load_latest(root: str | Path, warn: Callable[[str], None] | None = None) -> Checkpoint | None:
    """The newest checkpoint under ``root`` that verifies, or None when there is none.

    Every newer checkpoint that fails verification is reported through ``warn`` (default:
    ``warnings.warn(..., CheckpointWarning)``) and skipped.
    """
    warn = warn or (lambda msg: warnings.warn(msg, CheckpointWarning, stacklevel=3))
    for path in list_checkpoints(root):
        try:
            return read_checkpoint(path)
        except NewerFormatError:
            raise
        except (CheckpointError, OSError, ValueError) as e:
            warn(f"skipping checkpoint {path.name}: {e}; trying the previous one")
    return None


# ---- the training loop's state, and the checks a resume makes ---------------------------------


@dataclass
class LoopState:
    """Everything of a training loop besides tensors, as stored in ``state.json``."""

    step: int = 0
    phase: int = 0
    position: int = 0
    """Examples consumed in the current phase's stream."""
    seed: int = 0
    total_steps: int = 0
    warmup_steps: int = 0
    peak_lrs: list[float] | None = None
    scaler: dict[str, Any] | None = None
    optimizer: dict[str, Any] | None = None
    """Optimizer groups and hyperparameters (its tensors are in optimizer.safetensors)."""
    attempts: int = 0
    skipped: int = 0
    consecutive_skips: int = 0
    window: dict[str, float] | None = None
    spike_history: list[float] | None = None
    world_size: int = 1
    settings: dict[str, Any] | None = None
    precision: str | None = None
    """The precision the run computed in (resolved: fp32, bf16, fp16); None before it was kept."""

    def to_json(self) -> dict[str, Any]:
        return {
            "cursor": {"phase": self.phase, "position": self.position, "seed": self.seed},
            "scheduler": {
                "step": self.step,
                "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps,
                "peak_lrs": self.peak_lrs,
            },
            "scaler": self.scaler,
            "optimizer": self.optimizer,
            "counters": {
                "attempts": self.attempts,
                "skipped": self.skipped,
                "consecutive_skips": self.consecutive_skips,
            },
            "window": self.window or {},
            "spike_history": self.spike_history or [],
            "world_size": self.world_size,
            "settings": self.settings or {},
            "precision": self.precision,
        }

    @classmethod
    def from_json(cls, s: dict[str, Any]) -> LoopState:
        c, sch, k = s["cursor"], s["scheduler"], s["counters"]
        return cls(
            step=int(s["step"]),
            phase=int(c["phase"]),
            position=int(c["position"]),
            seed=int(c.get("seed", 0)),
            total_steps=int(sch["total_steps"]),
            warmup_steps=int(sch["warmup_steps"]),
            peak_lrs=list(sch["peak_lrs"]),
            scaler=s.get("scaler"),
            optimizer=s["optimizer"],
            attempts=int(k["attempts"]),
            skipped=int(k["skipped"]),
            consecutive_skips=int(k["consecutive_skips"]),
            window=dict(s.get("window", {})),
            spike_history=list(s.get("spike_history", [])),
            world_size=int(s.get("world_size") or 1),
            settings=dict(s.get("settings", {})),
            precision=s.get("precision"),
        )


def check_resume_settings(c: Checkpoint, settings: dict[str, Any]) -> None:
    """A checkpoint written with other ``settings`` values cannot be continued.

    ``settings`` are the run's settings that a resume must share, the keys and their values
    chosen by the caller (``PretrainOptions.fingerprint``, their one home) and saved in every
    checkpoint; a key the checkpoint does not hold (written before the key was listed) is not
    compared."""
    saved = c.state.get("settings", {})
    for key, value in settings.items():
        if key in saved and saved[key] != value:
            raise CheckpointError(
                f"{c.path}: was written with {key}={saved[key]}, this run has "
                f"{key}={value}; use a new --output folder"
            )


def load_model_weights(c: Checkpoint, model: torch.nn.Module) -> None:
    """Load the checkpoint's weights into ``model``; every key must match."""
    missing, unexpected = model.load_state_dict(c.model, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{c.path}: model weights do not match the model "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )


def rank_rng(c: Checkpoint, rank: int) -> dict[str, torch.Tensor]:
    """The RNG states that rank ``rank`` saved (empty if it did not exist then)."""
    prefix = f"rank{rank}."
    return {k[len(prefix) :]: v for k, v in c.rng.items() if k.startswith(prefix)}
