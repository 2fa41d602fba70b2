"""Numeric precision: the allowed values, what a request becomes on a device, autocast, dtypes.

Every command takes ``--precision`` with the same choices (:data:`CHOICES`) and passes it here:

======  ==========================================================================================
auto    CUDA: bf16 where the GPU supports it, else fp32 with TF32 matmuls. CPU: bf16 when a
        measured bf16 linear is at least 1.1x faster than fp32 (AMX-class CPUs), else fp32.
fp32    float32 everywhere.
bf16    bfloat16 autocast (weights stay fp32). On a CPU without native bf16 it runs fp32, with
        one notice naming the reason and the measured cost (``BERTKIT_BF16=emulated`` insists).
fp16    float16 autocast with a loss scaler for training; CUDA only.
int8    inference only, CPU only: the encoder's linear layers run as dynamic int8
        (:mod:`bertkit.model.quantize`); the inference commands offer it (:data:`INFERENCE_CHOICES`).
======  ==========================================================================================

The kernel and bf16-support probes themselves live in :mod:`bertkit.hardware`.
"""

from __future__ import annotations

import contextlib
import logging

import torch

from bertkit import hardware
from bertkit.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
CHOICES = ("auto", *PRECISIONS)
INFERENCE_CHOICES = (*CHOICES, "int8")
"""What the inference commands (embed, predict, evaluate, fill-mask, serve) accept."""
DEFAULT = "auto"
HELP = (
    "auto (bf16 on a GPU that supports it, or on a CPU where bf16 is measured faster), "
    "fp32, bf16 (autocast) or fp16 (CUDA)"
)
INFERENCE_HELP = HELP + "; int8 (CPU: dynamic int8 linear layers)"
AUTO_MIN_SPEEDUP = (
    1.1  # a CPU must run bf16 at least this much faster than fp32 for auto to pick it
)

log = logging.getLogger("bertkit.hardware")
_noticed: set[str] = set()


def check(precision: str, choices: tuple[str, ...] = CHOICES) -> str:
    """``precision`` if it is one of ``choices`` (training: :data:`CHOICES`), else a one-line
    ConfigError."""
    if precision not in choices:
        raise ConfigError(f"precision must be one of {', '.join(choices)}, got {precision!r}")
    return precision


def check_int8_device(device: str | torch.device) -> None:
    """int8 anywhere but on the CPU is a one-line ConfigError."""
    if torch.device(device).type != "cpu":
        raise ConfigError(
            f"int8 runs on the CPU only (dynamic int8 linear layers), not on {device}; "
            "use --device cpu, or --precision bf16/fp16 on a GPU"
        )


def choose(precision: str, device: str | torch.device = "cpu") -> str:
    """``auto`` made concrete for ``device`` (see the module table); other values unchanged.

    Checks the value: anything outside :data:`INFERENCE_CHOICES` is a one-line ConfigError, and so
    is int8 on a device other than the CPU.
    """
    if check(precision, INFERENCE_CHOICES) == "int8":
        check_int8_device(device)
    if precision != "auto":
        return precision
    if torch.device(device).type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16"
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return "fp32"
    return "bf16" if hardware.bf16_speedup() >= AUTO_MIN_SPEEDUP else "fp32"


def resolve(precision: str, device: str | torch.device = "cpu") -> str:
    """The precision a run requested as ``precision`` actually uses on ``device``.

    bf16 on a CPU without native bf16 becomes fp32 (logged once, with the reason), unless the bf16
    decision is forced to ``emulated``; fp16 on a CPU and bf16 on a GPU without it are one-line
    errors.
    """
    precision = choose(precision, device)
    kind = torch.device(device).type
    if precision in ("fp32", "int8"):  # int8 needs no autocast: its weights are int8 already
        return precision
    if kind == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            raise ConfigError("bf16 needs a GPU with bf16 support (compute capability 8.0+)")
        return precision
    if precision == "fp16":
        raise ConfigError("fp16 needs CUDA (on a CPU use --precision bf16)")
    if kind != "cpu":
        return precision
    if hardware.bf16_mode() != "fp32":
        return "bf16"
    if "bf16" not in _noticed:
        _noticed.add("bf16")
        log.warning(
            "bf16 requested; running fp32 instead (%s; %s). BERTKIT_BF16=emulated runs bf16 "
            "anyway.",
            hardware.decision("bf16").reason,
            hardware.emulation_cost(),
        )
    return "fp32"


def dtype(precision: str) -> torch.dtype:
    """The compute dtype of a resolved precision (int8 computes its activations in fp32)."""
    return {
        "int8": torch.float32,
        "fp32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
    }[precision]


def autocast(precision: str, device: str | torch.device = "cpu"):
    """The autocast context for ``precision`` on ``device`` after :func:`resolve` (a null context
    for fp32)."""
    effective = resolve(precision, device)
    if effective in ("fp32", "int8"):
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype(effective))
