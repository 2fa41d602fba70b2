"""Every global RNG stream of a process (Python, NumPy, torch CPU and CUDA) as tensors, and back:
what a checkpoint stores so that a resumed run draws the same numbers."""

from __future__ import annotations

import random

import numpy as np
import torch

from bertkit.errors import CheckpointError


def capture_rng() -> dict[str, torch.Tensor]:
    """Every global RNG state of this process as tensors: Python, NumPy, torch CPU and CUDA."""
    version, py_state, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    out = {
        "python": torch.tensor([version, *py_state], dtype=torch.int64),
        "python_gauss": torch.tensor([gauss is not None, gauss or 0.0], dtype=torch.float64),
        "numpy_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "numpy_meta": torch.tensor([pos, has_gauss], dtype=torch.int64),
        "numpy_gauss": torch.tensor([cached], dtype=torch.float64),
        "torch_cpu": torch.get_rng_state(),
    }
    if kind != "MT19937":  # pragma: no cover - numpy's legacy generator is always MT19937
        raise CheckpointError(f"cannot store numpy RNG of kind {kind}")
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"cuda_{i}"] = s
    return out


def restore_rng(state: dict[str, torch.Tensor]) -> None:
    """Inverse of ``capture_rng``."""
    py = state["python"].tolist()
    has_gauss, gauss = state["python_gauss"].tolist()
    random.setstate((int(py[0]), tuple(int(x) for x in py[1:]), gauss if has_gauss else None))
    pos, has_g = state["numpy_meta"].tolist()
    np.random.set_state(
        (
            "MT19937",
            state["numpy_keys"].numpy().astype(np.uint32),
            int(pos),
            int(has_g),
            float(state["numpy_gauss"].item()),
        )
    )
    torch.set_rng_state(state["torch_cpu"])
    cuda = sorted((k for k in state if k.startswith("cuda_")), key=lambda k: int(k[5:]))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([state[k] for k in cuda])
