"""The measurements behind :mod:`bertkit.hardware`'s decisions: what oneDNN runs on this CPU
(native bf16, int8 dot products) and how fast (oneDNN's fp32 linear against ATen's BLAS, bf16
against fp32, torch's fused bf16 attention kernel against two batched matmuls).

Each probe runs as plain fp32 code whatever the caller's context (autocast, grad), on its own RNG
(a model's initialisation must not move). The fp32, bf16-speed and attention timings are cached
on disk (:mod:`bertkit.probe_cache`, keyed by CPU, flags, torch and threads) unless other work
shared the cores while they ran. The
probes only measure; :mod:`bertkit.hardware` turns what they find into decisions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

import torch
import torch.nn.functional as F

from bertkit import cpu, probe_cache
from bertkit.cpu import cpu_info

FP32_MATMUL_CHOICES = ("onednn", "blas")
ONEDNN_MIN_SPEEDUP = 1.10  # below this, keep ATen's BLAS: the default path, and no flip-flopping
PROBE_MAX_OTHERS = 0.5
"""Cores other processes may keep busy during the fp32 probe for its result to be cached on
disk: a probe on shared cores measured oneDNN 63 and BLAS 53 GFLOP/s here (against ~250 on idle
cores), picked oneDNN, and left the quickstart 1.4x slower per update in every later run."""
PROBE_SHAPE = (512, 384, 1536)  # (M, K, N): a MiniLM-sized feed-forward product
BF16_ATTENTION_CHOICES = ("fused", "fused_long", "fused_inference", "matmul")
ATTENTION_SHAPE = (32, 12, 128, 64)
"""(B, N, T, D) of the attention probe: BERT-Base heads at 128 tokens, lengths 64..128."""
LONG_ATTENTION_TOKENS = 384
"""Where ``fused_long`` trains with the fused kernel: passes of this many tokens or more (SQuAD's
length and pre-training's second phase). On a 2-core Xeon with AMX (torch 2.13) the fused
kernel's training pass was 0.5x the matmuls at 128 tokens, 1.0x at 256, 1.25x at 384, 1.4x at
512."""
LONG_ATTENTION_SHAPE = (8, 12, LONG_ATTENTION_TOKENS, 64)
"""(B, N, T, D) of the probe's long training pass."""
FUSED_MIN_SPEEDUP = 1.10  # below this, keep the two matmuls (the measured default before)
CACHE_VERSION = 1

# torch's bundled oneDNN linear; absent in builds without mkldnn
ONEDNN_LINEAR = (
    getattr(torch.ops.mkldnn, "_linear_pointwise", None) if hasattr(torch.ops, "mkldnn") else None
)
ONEDNN_AVAILABLE = ONEDNN_LINEAR is not None and torch.backends.mkldnn.is_available()


@dataclass(frozen=True)
class Measured:
    """What the fp32 probe found: the faster path, why, and whether it was measured now
    (``probe``) or read from the disk cache (``cache``)."""

    choice: str
    reason: str
    source: str = "probe"


# oneDNN's ISA caps (ONEDNN_MAX_CPU_ISA) below its first level with int8 dot products (AVX2_VNNI)
_ONEDNN_CAPS_WITHOUT_VNNI = frozenset({"SSE41", "AVX", "AVX2", "AVX512_CORE"})


def int8_dot_products() -> tuple[bool, str]:
    """(True, why) when oneDNN multiplies uint8 by int8 with VNNI or AMX here: exact int32 sums,
    so 8-bit weights are safe. Without them (the CPU lacks them, or ``ONEDNN_MAX_CPU_ISA`` caps
    oneDNN below them) its AVX2 kernel adds pairs of products into saturating int16, and 8-bit
    weights would overflow (:mod:`bertkit.model.quantize`)."""
    f = cpu_info().features
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    have = [k for k in ("avx512_vnni", "avx_vnni", "amx_tile") if f.get(k)]
    if not have:
        return False, "no VNNI/AMX int8 dot products on this CPU: 7-bit weights cannot saturate"
    if cap in _ONEDNN_CAPS_WITHOUT_VNNI:
        return False, f"ONEDNN_MAX_CPU_ISA={cap} caps oneDNN below its VNNI kernels"
    return True, f"oneDNN has int8 dot products here ({', '.join(have)})"


def bf16_native_support() -> tuple[bool, str]:
    """(True, why) when oneDNN builds and runs a bf16 inner product here that matches fp32.

    Probes run as plain fp32 code whatever the caller's context: a first use inside an autocast
    region or with grad on must not change what is measured."""
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        return _bf16_native_support()


@cache
def _bf16_native_support() -> tuple[bool, str]:
    if not ONEDNN_AVAILABLE:
        return False, "this torch build has no oneDNN"
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        flags = cpu_info().features
        have = ", ".join(k for k, v in flags.items() if v) or "none"
        cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
        limit = f", capped by ONEDNN_MAX_CPU_ISA={cap}" if cap else ""
        return False, f"oneDNN reports no native bf16 on this CPU (features: {have}{limit})"
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 64, generator=g), torch.randn(32, 64, generator=g)
    try:
        got = ONEDNN_LINEAR(x.bfloat16(), w.bfloat16(), None, "none", [], "").float()
    except RuntimeError as e:
        return False, f"oneDNN could not run a bf16 inner product ({str(e).splitlines()[0]})"
    want = x @ w.t()
    if not torch.allclose(got, want, rtol=5e-2, atol=0.3):
        return False, "oneDNN's bf16 inner product disagreed with fp32"
    return True, f"oneDNN runs bf16 natively ({cpu_info().simd_class})"


@cache
def bf16_time_ratio() -> float:
    """bf16-autocast time / fp32 time of one small linear (256 x 256 -> 1024), measured once per
    process (~0.1 s) outside any caller's autocast or grad, on its own RNG (a model's init must
    not move)."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(256, 256, generator=g), torch.randn(1024, 256, generator=g)

    def bf16() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            F.linear(x, w)

    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        return _best_time(bf16, 3) / _best_time(lambda: F.linear(x, w), 5)


def bf16_speedup() -> float:
    """fp32 time / bf16 time of :func:`bf16_time_ratio`'s linear, read from the disk cache where
    this machine measured it before on idle cores, so that every process here (the two arms of a
    comparison, each rank, a resumed run) makes the same ``--precision auto`` choice; a
    measurement taken while other work shared the cores serves this process only."""
    key = _cache_key() + "|bf16_speedup"
    with probe_cache.locked() as cache_file:
        cached = probe_cache.read(cache_file).get(key)
        if cached and isinstance(cached.get("speedup"), (int, float)):
            return float(cached["speedup"])
        ratio, others = cpu.others_busy_cores(bf16_time_ratio)
        if others <= PROBE_MAX_OTHERS and cache_file is not None:
            entries = probe_cache.read(cache_file)
            entries[key] = {"speedup": 1.0 / ratio, "at": time.time()}
            probe_cache.write(cache_file, entries)
        return 1.0 / ratio


def _best_time(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def fp32_matmul() -> Measured:
    """oneDNN's fp32 linear against ATen's BLAS at the current thread count: ``onednn`` only
    when it is at least :data:`ONEDNN_MIN_SPEEDUP` faster (read from the disk cache where this
    machine measured it before)."""
    if not ONEDNN_AVAILABLE:
        return Measured("blas", "this torch build has no oneDNN linear")
    return _measured_once(_cache_key(), FP32_MATMUL_CHOICES, _time_fp32_backends)


def _measured_once(key: str, choices: tuple[str, ...], measure) -> Measured:
    """``measure()``'s result, read from the disk cache under ``key`` where this machine took it
    before; a new measurement is cached unless other work shared the cores while it ran."""
    with probe_cache.locked() as cache_file:
        cached = probe_cache.read(cache_file).get(key)
        if cached and cached.get("choice") in choices:
            return Measured(cached["choice"], cached["reason"], "cache")
        made, others = cpu.others_busy_cores(measure)
        if others > PROBE_MAX_OTHERS:  # a measurement on shared cores: this process only
            why = f"not cached: other work kept {others:.1f} cores busy during the probe"
            return replace(made, reason=f"{made.reason}; {why}")
        if cache_file is not None:
            entries = probe_cache.read(cache_file)
            entries[key] = {"choice": made.choice, "reason": made.reason, "at": time.time()}
            probe_cache.write(cache_file, entries)
        return made


def _time_fp32_backends() -> Measured:
    m, k, n = PROBE_SHAPE
    g = torch.Generator().manual_seed(0)
    x, w, grad = (torch.randn(*s, generator=g) for s in ((m, k), (n, k), (m, n)))

    def onednn() -> None:  # forward, then the weight gradient from strided operands
        ONEDNN_LINEAR(x, w, None, "none", [], "")
        ONEDNN_LINEAR(grad.t(), x.t(), None, "none", [], "")

    def blas() -> None:
        F.linear(x, w)
        grad.t() @ x

    # oneDNN builds its primitive on the warm-up call; best of 5: robust to a busy neighbour
    times = interleaved_best({"onednn": onednn, "blas": blas}, 5)
    gflops = {label: 2 * 2 * m * k * n / t / 1e9 for label, t in times.items()}
    ratio = times["blas"] / times["onednn"]
    choice = "onednn" if ratio >= ONEDNN_MIN_SPEEDUP else "blas"
    threads = torch.get_num_threads()
    reason = (
        f"at {threads} thread{'s' if threads > 1 else ''}: oneDNN {gflops['onednn']:.0f} "
        f"GFLOP/s, BLAS {gflops['blas']:.0f} ({ratio:.2f}x; oneDNN needs {ONEDNN_MIN_SPEEDUP:.2f}x)"
    )
    return Measured(choice, reason)


def bf16_attention() -> Measured:
    """Torch's fused CPU attention kernel (``scaled_dot_product_attention``) against two batched
    matmuls around a softmax, in bf16, at the current thread count, for inference and for
    training (forward and backward) at 128 tokens and at :data:`LONG_ATTENTION_TOKENS`: the
    fused kernel wherever it is at least :data:`FUSED_MIN_SPEEDUP` faster
    (:func:`attention_choice`; cached on disk like the fp32 probe)."""
    key = _cache_key() + "|bf16_attention|2"  # 2: the long training pass was added
    return _measured_once(key, BF16_ATTENTION_CHOICES, _time_attention_kernels)


def attention_choice(inference: float, training: float, training_long: float) -> str:
    """The bf16 attention choice from the fused kernel's speed-ups over two matmuls (inference
    and training at 128 tokens, training at :data:`LONG_ATTENTION_TOKENS`): ``fused`` where it
    is at least :data:`FUSED_MIN_SPEEDUP` faster in all, ``fused_long`` where in inference and
    long training, ``fused_inference`` where in inference only, else ``matmul``. A kernel slower
    in inference than the matmuls is not trusted with training either."""
    if inference < FUSED_MIN_SPEEDUP:
        return "matmul"
    if training >= FUSED_MIN_SPEEDUP:
        return "fused"
    return "fused_long" if training_long >= FUSED_MIN_SPEEDUP else "fused_inference"


def fused_attention_for(choice: str, training: bool, tokens: int, head_size: int = 64) -> bool:
    """Whether ``choice`` takes the fused kernel for a pass over ``tokens`` (T) tokens of heads
    of ``head_size`` (D), with gradients (``training``) or without. ``fused_long`` trains with
    it only at heads as large as the probe's (a MiniLM span step, D = 32, 8 x 384 tokens, took
    472 ms with the kernel against 443 with the matmuls on the AMX Xeon)."""
    if choice == "fused" or (choice in ("fused_inference", "fused_long") and not training):
        return True
    long = tokens >= LONG_ATTENTION_TOKENS and head_size >= LONG_ATTENTION_SHAPE[3]
    return choice == "fused_long" and long


def two_matmul_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D), keys where ``mask``) v as two batched matmuls in the inputs'
    dtype (bf16: fp32 accumulation inside the softmax, bf16 out), ``dropout`` applied to the
    probabilities when given: the kernel ``model/attention.py`` runs when the ``bf16_attention``
    decision says ``matmul``, and for every CPU pass with attention dropout (with
    ``model/dropout.py``'s); defined here so the probe times that very code."""
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2))  # (B, N, T, T)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))  # in place: matmul's backward keeps q, k
    probs = torch.softmax(scores, dim=-1)  # accumulates in fp32, rounds to the inputs' dtype
    if dropout is not None:
        probs = dropout(probs)
    return torch.matmul(probs, v)  # (B, N, T, D)


def _time_attention_kernels() -> Measured:
    times = {
        "inference": _fused_speedup(ATTENTION_SHAPE, training=False),
        "training": _fused_speedup(ATTENTION_SHAPE, training=True),
        "training_long": _fused_speedup(LONG_ATTENTION_SHAPE, training=True),
    }
    choice = attention_choice(**times)
    reason = (
        f"at {torch.get_num_threads()} threads, the fused kernel against two matmuls: inference "
        f"{times['inference']:.2f}x, training {times['training']:.2f}x, training at "
        f"{LONG_ATTENTION_TOKENS} tokens {times['training_long']:.2f}x (fused needs "
        f"{FUSED_MIN_SPEEDUP:.2f}x)"
    )
    return Measured(choice, reason)


def _fused_speedup(shape: tuple[int, int, int, int], training: bool) -> float:
    """The matmuls' time over the fused kernel's for bf16 inputs of ``shape`` (B, N, T, D), keys
    masked past random lengths T/2..T, interleaved, best of 3."""
    b, n, t, d = shape
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, n, t, d, generator=g).bfloat16() for _ in range(3))
    lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None])[:, None, None, :]
    kernels = {
        "fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "matmul": lambda q, k, v: two_matmul_attention(q, k, v, mask),
    }

    def run(fn):
        if not training:
            return lambda: fn(q, k, v)
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]

        def step() -> None:
            with torch.enable_grad():
                fn(*leaves).float().sum().backward()

        return step

    best = interleaved_best({name: run(fn) for name, fn in kernels.items()}, 3)
    return best["matmul"] / best["fused"]


def interleaved_best(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Each function's best time in seconds: all warmed once, then timed in turn ``repeats``
    times (interleaved, so a busy neighbour slows them alike)."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def _cache_key() -> str:
    info = cpu_info()
    flags = ",".join(k for k, v in sorted(info.features.items()) if v)
    isa = (
        os.environ.get("ONEDNN_MAX_CPU_ISA", "")
        + "|"
        + os.environ.get("MKL_ENABLE_INSTRUCTIONS", "")
    )
    return (
        f"v{CACHE_VERSION}|{info.model}|{flags}|{info.torch_capability}|{isa}"
        f"|torch {torch.__version__}|threads {torch.get_num_threads()}"
    )
