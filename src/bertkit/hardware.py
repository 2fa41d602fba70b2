"""What this machine can do, and which kernel each hardware-dependent path takes.

CPUs differ: an AMD EPYC or Intel Xeon with AVX-512 and native bf16, an AVX2-only EPYC, an ARM
server with NEON. bertkit never assumes a feature; each hardware-dependent path is one *decision*,
made once per process at first use, logged once (logger ``bertkit.hardware``; the CLI prints it
on stderr) and forceable:

============  ========================  ==============================================  ======================
decision      choices                   automatic choice                                forced by
============  ========================  ==============================================  ======================
fp32_matmul   ``onednn``, ``blas``      a timed probe: oneDNN's linear against ATen's   ``BERTKIT_FP32_MATMUL``
                                        BLAS (MKL on x86) on a forward and a weight-
                                        gradient product at the current thread count;
                                        oneDNN only when >= 1.10x faster (cached on
                                        disk, keyed by CPU, flags, torch, threads)
bf16          ``native``, ``emulated``, ``native`` when oneDNN runs a bf16 inner         ``BERTKIT_BF16``
              ``fp32``                  product here and matches fp32; otherwise
                                        ``fp32``: bf16 requests then run in fp32 with
                                        a one-line notice, because emulated bf16
                                        matmuls are several times slower than fp32
                                        (the probe measures by how much)
int8_weights  ``8bit``, ``7bit``        ``8bit`` where oneDNN has int8 dot products     ``BERTKIT_INT8_WEIGHTS``
                                        (VNNI or AMX, not capped away by
                                        ``ONEDNN_MAX_CPU_ISA``); else ``7bit``, whose
                                        int16 pair sums cannot saturate
                                        (:mod:`bertkit.model.quantize`)
bf16_         ``fused``,                a timed probe: torch's fused attention kernel   ``BERTKIT_BF16_ATTENTION``
attention     ``fused_long``,           against two batched matmuls around a softmax,
              ``fused_inference``,      in bf16, inference and training at 128 tokens,
              ``matmul``                training at 384; the fused kernel where >= 1.10x
                                        faster (``fused_long``: inference, and training
                                        passes of 384 tokens or more at heads of 64 or
                                        more; cached like fp32_matmul). CPU attention
                                        in bf16/fp16 without dropout only: with dropout
                                        the CPU takes the matmuls, elsewhere the fused
                                        kernel
============  ========================  ==============================================  ======================

``native`` bf16 lets bertkit call oneDNN's bf16 kernels directly (cached bf16 weights at
inference); ``emulated`` runs bf16 autocast through ATen's own kernels only (what an AVX2 machine
executes when forced to bf16); ``fp32`` turns bf16 requests into fp32. ``force(name, choice)`` (or
the environment variable, read at first use) overrides a decision; forcing ``native`` where the CPU
cannot do it is a :class:`ConfigError`, not a crash inside a kernel (likewise ``8bit`` int8
weights without VNNI/AMX, which would silently saturate). The legacy
``BERTKIT_ONEDNN=0`` still means ``BERTKIT_FP32_MATMUL=blas``.

The measurements are :mod:`bertkit.probes` (their results cached on disk by
:mod:`bertkit.probe_cache`); the machine description is :mod:`bertkit.cpu`; precision requests
are turned into what runs by :mod:`bertkit.precision`; ``bertkit env``'s report is
:mod:`bertkit.env_report`. This module also resolves ``--device`` (:func:`resolve_device`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from bertkit import probes
from bertkit.cpu import CpuInfo, cpu_info, idle_threads  # noqa: F401 (the machine description)
from bertkit.errors import ConfigError

# the probes' names callers read from here (kernels, tests, benchmarks)
from bertkit.probes import (  # noqa: F401
    ONEDNN_AVAILABLE,
    ONEDNN_LINEAR,
    bf16_native_support,
    int8_dot_products,
)

log = logging.getLogger("bertkit.hardware")

CHOICES: dict[str, tuple[str, ...]] = {
    "fp32_matmul": probes.FP32_MATMUL_CHOICES,
    "bf16": ("native", "emulated", "fp32"),
    "int8_weights": ("8bit", "7bit"),
    "bf16_attention": probes.BF16_ATTENTION_CHOICES,
}
ENV = {
    "fp32_matmul": "BERTKIT_FP32_MATMUL",
    "bf16": "BERTKIT_BF16",
    "int8_weights": "BERTKIT_INT8_WEIGHTS",
    "bf16_attention": "BERTKIT_BF16_ATTENTION",
}


@dataclass(frozen=True)
class Decision:
    """One hardware-dependent choice and why it was made."""

    name: str
    choice: str
    reason: str
    source: str
    """``probe`` (measured now), ``cache`` (measured earlier on this machine), ``env`` or
    ``forced`` (set by a user or a test), ``rank 0`` (taken from rank 0 of a torchrun job)."""


_decisions: dict[str, Decision] = {}
# hot-path flags, kept in step with _decisions (None: not decided yet)
_fp32_onednn: bool | None = None
_bf16_mode: str | None = None
_bf16_attention: str | None = None


def _set(decision: Decision, announce: bool = True) -> None:
    global _fp32_onednn, _bf16_mode, _bf16_attention
    _decisions[decision.name] = decision
    if decision.name == "fp32_matmul":
        _fp32_onednn = decision.choice == "onednn"
    elif decision.name == "bf16":
        _bf16_mode = decision.choice
    elif decision.name == "bf16_attention":
        _bf16_attention = decision.choice
    if announce:
        log.info(
            "%s: %s (%s: %s)", decision.name, decision.choice, decision.source, decision.reason
        )


def decision(name: str) -> Decision:
    """The decision ``name`` (made now if this is its first use)."""
    if name not in CHOICES:
        raise ConfigError(f"unknown hardware decision {name!r}; known: {', '.join(CHOICES)}")
    if name not in _decisions:
        _set(_decide(name))
    return _decisions[name]


def decisions() -> dict[str, Decision]:
    """Every decision, making the ones not made yet."""
    return {name: decision(name) for name in CHOICES}


def made() -> dict[str, Decision]:
    """The decisions this process has made so far (the paths its work took), making none."""
    return dict(_decisions)


def force(name: str, choice: str | None) -> Decision | None:
    """Force ``name`` to ``choice`` (``None``: forget it; the next use decides again).

    Returns the previous decision (or None), for :func:`restore`."""
    previous = _decisions.get(name)
    if choice is None:
        _forget(name)
        return previous
    _check_choice(name, choice, "force()")
    _set(Decision(name, choice, f"{name}={choice} set by force()", "forced"), announce=False)
    return previous


def adopt(made: dict[str, dict[str, str]], source: str) -> None:
    """Take the decisions another process made (``{name: {"choice", "reason"}}``, as
    :func:`shared` gives them): the ranks of a job run one kernel path.

    Under torchrun every rank would otherwise decide alone, and the fp32 probe of ranks that
    share cores times each rank against its neighbours' work: measured on a 2-core AMD EPYC, 2
    gloo ranks chose oneDNN and BLAS apart in 6 of 8 fresh jobs, so ranks (and a job and its
    resumption) ran products that differ in the last bits. A choice this process's environment
    sets stays; a choice this machine cannot run (a rank on another CPU class) is decided here,
    with a warning."""
    for name, theirs in made.items():
        if name not in CHOICES or _env_choice(name) is not None:
            continue
        ok, why = available(name, theirs["choice"])
        if not ok:
            mine = decision(name)
            log.warning(
                "%s: %s cannot run %s=%s (%s); this process runs %s",
                name,
                source,
                name,
                theirs["choice"],
                why,
                mine.choice,
            )
            continue
        reason = f"{source}'s choice: {theirs['reason']}"
        _set(Decision(name, theirs["choice"], reason, source), announce=False)


def shared() -> dict[str, dict[str, str]]:
    """Every decision (made now where not yet), as :func:`adopt` takes them."""
    return {n: {"choice": d.choice, "reason": d.reason} for n, d in decisions().items()}


def restore(name: str, previous: Decision | None) -> None:
    """Put back what :func:`force` returned."""
    if previous is None:
        _forget(name)
    else:
        _set(previous, announce=False)


@contextlib.contextmanager
def forced(name: str, choice: str) -> Iterator[Decision]:
    """``with forced("bf16", "emulated"): ...`` runs the block under that choice."""
    previous = force(name, choice)
    try:
        yield _decisions[name]
    finally:
        restore(name, previous)


def _forget(name: str) -> None:
    global _fp32_onednn, _bf16_mode, _bf16_attention
    _decisions.pop(name, None)
    if name == "fp32_matmul":
        _fp32_onednn = None
    elif name == "bf16":
        _bf16_mode = None
    elif name == "bf16_attention":
        _bf16_attention = None


def _check_choice(name: str, choice: str, where: str) -> None:
    if choice not in CHOICES[name]:
        raise ConfigError(
            f"{where}: {name} must be one of {', '.join(CHOICES[name])}, got {choice!r}"
        )
    ok, why = available(name, choice)
    if not ok:
        raise ConfigError(f"{where}: {name}={choice}, but this machine cannot run it: {why}")


def available(name: str, choice: str) -> tuple[bool, str]:
    """(True, "") when ``choice`` of decision ``name`` can run here, else (False, why): native
    bf16 needs oneDNN's bf16 kernels, 8-bit int8 weights need VNNI/AMX int8 dot products, the
    oneDNN fp32 path needs torch's oneDNN linear. The other choices run everywhere."""
    if name == "fp32_matmul" and choice == "onednn" and not ONEDNN_AVAILABLE:
        return False, "this torch build has no oneDNN linear"
    if name == "bf16" and choice == "native":
        return bf16_native_support()
    if name == "int8_weights" and choice == "8bit":
        return int8_dot_products()
    return True, ""


# --- the hot paths (called on every linear) --------------------------------------------------


def fp32_matmul_onednn() -> bool:
    """Whether fp32 CPU matmuls go through oneDNN."""
    if _fp32_onednn is None:
        decision("fp32_matmul")
    return bool(_fp32_onednn)


def bf16_mode() -> str:
    """``native``, ``emulated`` or ``fp32`` (see the module docstring)."""
    if _bf16_mode is None:
        decision("bf16")
    return str(_bf16_mode)


def fused_bf16_attention(training: bool, tokens: int, head_size: int = 64) -> bool:
    """Whether CPU attention in bf16/fp16 runs torch's fused kernel (else two batched matmuls)
    for a training pass (gradients) or an inference pass over ``tokens`` (T) tokens of heads of
    ``head_size`` (D): :func:`bertkit.probes.fused_attention_for`."""
    if _bf16_attention is None:
        decision("bf16_attention")
    return probes.fused_attention_for(str(_bf16_attention), training, tokens, head_size)


# --- devices --------------------------------------------------------------------------------


DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"


def resolve_device(
    device: str | torch.device | None,
    local_rank: int = 0,
    world_size: int = 1,
    *,
    cuda_available: bool | None = None,
    device_count: int | None = None,
    warn=None,
) -> torch.device:
    """The one place a ``--device`` value becomes the torch.device this process runs on.

    ``auto`` (or None, every command's default): ``cuda:LOCAL_RANK`` when CUDA is available,
    else the CPU. ``cuda``: ``cuda:LOCAL_RANK``. ``cuda:N``: that GPU when running alone; under
    torchrun (``world_size`` > 1) every form of cuda becomes ``cuda:LOCAL_RANK`` (one GPU per
    rank, which is what DDP's ``device_ids`` and NCCL need), with a warning when N differs.
    A CUDA device on a machine without one, or an index past the last GPU, is a one-line
    ConfigError. ``cuda_available`` / ``device_count`` default to torch's answers (tests pass
    them); ``warn(message)`` defaults to this module's logger.
    """
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if device_count is None:
        device_count = torch.cuda.device_count() if cuda_available else 0
    warn = warn or log.warning
    text = "auto" if device is None else str(device).strip().lower()
    if text == "auto":
        text = "cuda" if cuda_available else "cpu"
    try:
        dev = torch.device(text)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"--device {device!r}: not a device (expected {DEVICE_CHOICES})") from e
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ConfigError(f"--device {device}: bertkit runs on cpu or cuda, not {dev.type}")
    if not cuda_available:
        built = "without CUDA" if torch.version.cuda is None else f"with CUDA {torch.version.cuda}"
        raise ConfigError(
            f"--device {device}: no CUDA device on this machine (torch {torch.__version__}, "
            f"built {built}); use --device cpu"
        )
    index = local_rank if dev.index is None else dev.index
    if world_size > 1 and index != local_rank:
        warn(
            f"--device {device} under torchrun: rank with LOCAL_RANK={local_rank} uses "
            f"cuda:{local_rank} (one GPU per process)"
        )
        index = local_rank
    if index >= device_count:
        raise ConfigError(
            f"--device {device}: cuda:{index} requested, but there are {device_count} CUDA "
            "device(s)"
        )
    return torch.device("cuda", index)


# --- deciding (the measurements are in probes.py) ---------------------------------------------


def _decide(name: str) -> Decision:
    # a first use may come inside the caller's inference mode, autocast or grad: the probes
    # measure plain fp32 or bf16, and the attention probe's training pass needs autograd
    with torch.inference_mode(False), torch.no_grad(), torch.autocast("cpu", enabled=False):
        return _decide_plain(name)


def _env_choice(name: str) -> str | None:
    """The choice this process's environment sets for ``name`` (None: unset or ``auto``)."""
    env = os.environ.get(ENV[name], "").strip().lower()
    if name == "fp32_matmul" and not env and os.environ.get("BERTKIT_ONEDNN") == "0":
        env = "blas"
    return env if env and env != "auto" else None


def _decide_plain(name: str) -> Decision:
    env = _env_choice(name)
    if env is not None:
        _check_choice(name, env, f"{ENV[name]}={env}")
        return Decision(name, env, f"{ENV[name]}={env}", "env")
    if name == "bf16":
        ok, why = bf16_native_support()
        if ok:
            return Decision(name, "native", why, "probe")
        return Decision(name, "fp32", why, "probe")
    if name == "int8_weights":
        ok, why = int8_dot_products()
        return Decision(name, "8bit" if ok else "7bit", why, "probe")
    if name == "bf16_attention":
        found = probes.bf16_attention()
        return Decision(name, found.choice, found.reason, found.source)
    found = probes.fp32_matmul()
    return Decision(name, found.choice, found.reason, found.source)


def emulation_cost() -> str:
    ratio = probes.bf16_time_ratio()
    return f"an emulated bf16 matmul measured {ratio:.1f}x the time of fp32 here"


def bf16_speedup() -> float:
    """How much faster a bf16 linear (autocast, as training and inference run it) is than fp32
    on this CPU at the current thread count (fp32 time / bf16 time). Native bf16 is not always
    faster: without AMX, AVX512-BF16 CPUs were measured at half the fp32 rate. 0.0 when bf16
    is not native here. Cached on disk as the other probes (:func:`bertkit.probes.bf16_speedup`)."""
    return probes.bf16_speedup() if bf16_mode() == "native" else 0.0
