"""Training metrics: the ``metrics.jsonl`` log, model-FLOPs accounting (MFU), loss-spike detection, plots.

FLOPs of one pre-training step (forward + backward = 3x forward; a multiply-add counts as 2 FLOPs),
for a batch with ``tokens`` positions (padding included, since they are computed), padded length T,
``masked`` predicted positions, ``examples`` sequences, L layers, hidden H, feed-forward I, vocab V:

    6 * tokens * L * (4*H*H + 2*H*I)        encoder weight matmuls (Q, K, V, output; two FFN layers)
  + 12 * tokens * L * T * H                 attention scores QK^T and the weighted sum over values
  + 6 * masked * (H*H + H*V)                MLM transform and vocabulary decoder, at masked positions only
  + 6 * examples * (H*H + 2*H)              pooler and NSP classifier

Embedding lookups, LayerNorm, softmax and GELU are not counted (as in the usual 6N rule). MFU is the
achieved model FLOPs per second divided by a peak: configured, or measured at start-up as the best
dense matmul throughput of the device in the training dtype (so CPU MFU is relative to that).
"""

from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch

from bertkit.io import atomic_write_text


def pretraining_flops(
    config: Any, *, tokens: int, seq_len: int, masked: int, examples: int
) -> float:
    """Model FLOPs of one training step (forward and backward) per the formula in the module doc."""
    L, H = config.num_hidden_layers, config.hidden_size
    inter, vocab = config.intermediate_size, config.vocab_size
    return float(
        6 * tokens * L * (4 * H * H + 2 * H * inter)
        + 12 * tokens * L * seq_len * H
        + 6 * masked * (H * H + H * vocab)
        + 6 * examples * (H * H + 2 * H)
    )


def measure_peak_flops(
    device: str, dtype: torch.dtype = torch.float32, seconds: float = 0.3
) -> float:
    """Best observed FLOP/s of a square matmul on ``device`` in ``dtype`` (a stand-in for the peak)."""
    n = 1024 if device.startswith("cuda") else 512
    gen = torch.Generator().manual_seed(0)  # a private generator: the global RNG stays untouched
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t0))
    return best


class MetricsLog:
    """Appends one JSON object per line to ``RUN/metrics.jsonl`` (rank 0 only).

    Lines are flushed as they are written; on resume ``truncate_after(step)`` drops everything logged
    after the checkpoint (and any half-written last line) so the log reads as one uninterrupted run.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
        return out

    def truncate_after(self, step: int) -> None:
        keep = [r for r in self.read() if int(r.get("step", 0)) <= step]
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in keep))

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


class SpikeDetector:
    """Flags a step whose loss exceeds ``factor`` times the mean of the previous ``window`` losses."""

    def __init__(self, factor: float = 2.0, window: int = 20, min_history: int = 5) -> None:
        self.factor, self.min_history = factor, min_history
        self.history: deque[float] = deque(maxlen=window)

    def update(self, loss: float) -> float | None:
        """Record ``loss``; returns the reference mean when it is a spike, else None."""
        ref = (
            sum(self.history) / len(self.history) if len(self.history) >= self.min_history else None
        )
        self.history.append(loss)
        if ref is not None and ref > 0 and loss > self.factor * ref:
            return ref
        return None

    def state(self) -> list[float]:
        return list(self.history)

    def load(self, history: list[float]) -> None:
        self.history.clear()
        self.history.extend(history)


def plot_curves(records: list[dict[str, Any]], path: str | Path) -> bool:
    """PNG of training/eval loss and accuracies; False (nothing written) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    train = [r for r in records if r.get("type") == "train"]
    evals = [r for r in records if r.get("type") == "eval"]
    # the objective's figures only: no NSP panel for a run without NSP
    keys = ["loss", *(k for k in ("mlm_acc", "nsp_acc", "lm_acc") if any(k in r for r in records))]
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4), squeeze=False)
    for key, ax in zip(keys, axes[0]):
        ax.plot(
            [r["step"] for r in train if key in r],
            [r[key] for r in train if key in r],
            label="train",
        )
        if evals:
            ax.plot(
                [r["step"] for r in evals if key in r],
                [r[key] for r in evals if key in r],
                "o-",
                label="held-out",
            )
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
    return True
