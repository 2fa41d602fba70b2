"""Training metrics: the ``metrics.jsonl`` log, model-FLOPs accounting (MFU), loss-spike detection, plots.

FLOPs of one pre-training step (forward + backward = 3x forward; a multiply-add counts as 2 FLOPs)
for a batch of B sequences of real lengths n_b (S = sum n_b tokens), padded length T, M masked
(predicted) positions, L layers, hidden H, feed-forward I, vocab V. Two definitions
(:data:`DEFINITIONS`), both computed by :func:`pretraining_flops`:

``real`` (what bertkit logs as ``mfu``): the work the model does on the real tokens. The dense
layers run on the S packed tokens; attention on each sequence's own n_b x n_b scores; the last
layer's attention output and feed-forward on the M masked tokens and the B pooled ones only
(the MLM loss reads nothing else); the MLM head on the M masked positions:

    6 * S * L * 3*H*H + 6 * S * (L-1) * (H*H + 2*H*I) + 6 * (M + B) * (H*H + 2*H*I)
  + 12 * L * H * sum(n_b^2)
  + 6 * M * (H*H + H*V)  +  6 * B * (H*H + 2*H)

``padded``: the usual count for a padded batch (NVIDIA's and Hugging Face's), every one of the
B*T positions through every layer:

    6 * B*T * L * (4*H*H + 2*H*I) + 12 * B * L * T*T * H + 6 * M * (H*H + H*V) + 6 * B * (H*H + 2*H)

Embedding lookups, LayerNorm, softmax and GELU are not counted (as in the usual 6N rule). MFU is
the achieved FLOP/s over a peak (:func:`peak_flops`): the datasheet's dense tensor-core figure
for a known GPU (:data:`DATASHEET_TFLOPS`), else the best throughput of a large matmul measured
here (CUDA events on a GPU, a CPU timer on a CPU). ``benchmarks/gpu_pretrain.py`` uses the same
two functions.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.io import atomic_write, atomic_write_text
from bertkit.model.batching import Layout

DEFINITIONS = ("real", "padded")

DATASHEET_TFLOPS: dict[str, dict[str, float]] = {
    # NVIDIA datasheets, dense (no sparsity) tensor-core TFLOP/s; "tf32" is fp32 under TF32 matmuls
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0},  # SXM
    "H200": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6},
    "A10": {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
    "L4": {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
    "V100": {"fp16": 125.0, "fp32": 15.7},
}
"""Keys are matched as substrings of ``torch.cuda.get_device_name()``, in this order."""


def pretraining_flops(
    config: Any,
    *,
    lengths: Sequence[int],
    seq_len: int,
    masked: int,
    definition: str = "real",
) -> float:
    """FLOPs of one training step (forward and backward) on a batch with real ``lengths``,
    padded to ``seq_len``, with ``masked`` predicted positions (see the module docstring)."""
    L, H = config.num_hidden_layers, config.hidden_size
    inter, vocab = config.intermediate_size, config.vocab_size
    B = len(lengths)
    block = H * H + 2 * H * inter  # attention output projection + feed-forward, per token
    heads = 6 * masked * (H * H + H * vocab) + 6 * B * (H * H + 2 * H)
    if definition == "padded":
        tokens = B * seq_len
        return float(
            6 * tokens * L * (4 * H * H + 2 * H * inter) + 12 * B * L * seq_len**2 * H + heads
        )
    if definition != "real":
        raise ValueError(f"definition must be one of {', '.join(DEFINITIONS)}, got {definition!r}")
    S = sum(lengths)
    selected = min(S, masked + B)
    return float(
        6 * S * L * 3 * H * H
        + 6 * S * (L - 1) * block
        + 6 * selected * block
        + 12 * L * H * sum(n * n for n in lengths)
        + heads
    )


def train_record(
    step: int,
    window: dict[str, float],
    figures: dict[str, float],
    lr: float,
    skipped: int,
    seconds: float,
    peak: float | None,
) -> dict[str, Any]:
    """The ``train`` line of a log window ending at update ``step``: ``window`` holds its updates'
    summed statistics (``loss``, ``grad_norm``, ``tokens``, ``flops``, ``steps``), ``figures`` the
    objective's, ``seconds`` its training time, ``peak`` the FLOP/s of all processes together."""
    w = window
    rec: dict[str, Any] = {"type": "train", "step": step, "loss": w["loss"] / w["steps"]}
    rec.update(figures)
    rec["lr"] = lr
    rec["grad_norm"] = w["grad_norm"] / w["steps"]
    rec["skipped"] = skipped
    if seconds > 0:
        rec["seconds_per_step"] = seconds / w["steps"]
        rec["tokens_per_s"] = w["tokens"] / seconds
        if peak and w.get("flops"):
            rec["mfu"] = w["flops"] / seconds / peak
    return rec


def layout_flops(config: Any, layout: Layout, definition: str = "real") -> float:
    """:func:`pretraining_flops` of a collated batch, counted from its :class:`Layout` (real
    lengths, padded length, labelled positions): the trainer's count and the benchmarks'."""
    return pretraining_flops(
        config,
        lengths=layout.lengths,
        seq_len=layout.length,
        masked=layout.masked,
        definition=definition,
    )


@dataclass(frozen=True)
class Peak:
    """The FLOP/s counted as 100% MFU and where the figure comes from."""

    flops: float
    source: str


def peak_flops(device: str | torch.device, precision: str = "fp32") -> Peak:
    """The peak for MFU on ``device`` at a resolved ``precision`` (fp32, bf16, fp16): a known
    GPU's datasheet figure (fp32 counts TF32 when TF32 matmuls are on), else a measured matmul."""
    dev = torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        column = precision
        if precision == "fp32" and tf32_matmuls():
            column = "tf32"
        for key, row in DATASHEET_TFLOPS.items():
            if key in name and column in row:
                return Peak(row[column] * 1e12, f"{name} datasheet, {column} dense")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    measured = measure_peak_flops(str(dev), dtype)
    return Peak(measured, f"measured {dtype} matmul on {dev}")


def tf32_matmuls() -> bool:
    """Whether CUDA fp32 matmuls run as TF32 (``precision.choose`` turns it on for auto)."""
    return bool(torch.backends.cuda.matmul.allow_tf32)


def measure_peak_flops(
    device: str, dtype: torch.dtype = torch.float32, seconds: float = 0.3
) -> float:
    """Best observed FLOP/s of a square matmul on ``device`` in ``dtype``: 8192^3 timed with CUDA
    events on a GPU, 1024^3 with a CPU timer on a CPU."""
    cuda = device.startswith("cuda")
    n = 8192 if cuda else 1024
    gen = torch.Generator().manual_seed(0)  # a private generator: the global RNG stays untouched
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    a @ b  # warm-up
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            a @ b
            elapsed = time.perf_counter() - t0
        best = max(best, 2 * n**3 / elapsed)
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
    try:
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format="png", dpi=100)
    finally:
        plt.close(fig)
    return True
