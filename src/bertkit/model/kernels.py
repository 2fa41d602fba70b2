"""Dense fp32 matmuls on the CPU through oneDNN instead of the BLAS behind ``F.linear``, where
that is faster on this machine.

torch's CPU ``addmm`` in fp32 calls MKL's sgemm. On CPUs where MKL does not pick its AVX-512
kernels (AMD EPYC with AVX-512, for one), oneDNN, which torch already ships for its bf16 matmuls,
was measured at 2.3x MKL, one thread, (4096 x 384) x (384 x 1536): forward 102 -> 240 GFLOP/s,
input gradient 107 -> 244, weight gradient 105 -> 191. On an AVX2-only EPYC the order reverses
(MKL 90, oneDNN 67 GFLOP/s). So the choice is not assumed: :mod:`bertkit.hardware` decides it
(``fp32_matmul``) from a timed probe on the machine at hand, and it can be forced. The products
are ordinary fp32 either way (max relative difference to a float64 product 9e-7, against MKL's
6e-7).

``linear`` takes the oneDNN path for fp32 CPU tensors outside autocast when the decision says so,
and ``F.linear`` everywhere else. Under ``torch.compile`` every product here steps aside for
``F.linear``: inductor lowers oneDNN's linear only when the weight is a frozen graph constant
(``torch/_inductor/mkldnn_lowerings.py`` asserts it), so a traced call with a parameter weight
failed to compile ("LoweringException: AssertionError"), and inductor picks its own kernels for
``F.linear`` anyway. ``Linear`` additionally runs bf16 inference through oneDNN with
cached bf16 weights, only where the ``bf16`` decision is ``native``.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from bertkit import hardware

_OP = hardware.ONEDNN_LINEAR
_avoided: str | None = None
_steps = 0
"""Optimizer steps taken in this process since :func:`follow_optimizer_steps`, part of the bf16
weight cache's key."""
_following = False


def _count_step(_optimizer: torch.optim.Optimizer, _args: object, _kwargs: object) -> None:
    global _steps
    _steps += 1


def follow_optimizer_steps() -> None:
    """Count every torch optimizer's steps from now on (idempotent), so that :class:`Linear`'s
    cached bf16 weights follow them.

    torch's fused AdamW (training.optim's default) writes the parameters without bumping their
    version counters, so a cache keyed on ``_version`` alone kept the weights of the first bf16
    evaluation for the rest of a run. ``Linear`` calls this when it caches weights, before it
    reads the count: steps taken before any cache existed cannot make one stale, and every step
    after it (any torch.optim.Optimizer, the caller's own included) invalidates the copies.
    Importing this module registers no global hook.
    """
    global _following
    if not _following:
        register_optimizer_step_post_hook(_count_step)
        _following = True


def avoid_onednn(reason: str) -> None:
    """Keep this process's products off oneDNN's linear from now on: BLAS for fp32, autocast's
    own kernels for bf16, no fused GELU; ``reason`` is logged once.

    For a process that must not use oneDNN at all. A server uses :func:`bound_shapes` instead:
    oneDNN keeps memory for every input shape it sees, and bucketing stops that growth without
    giving up its speed (``benchmarks/onednn_shapes.py``: MiniLM-L6, 400 passes of 1-12 random
    texts, RSS 358 -> 369 MiB here, 386 -> 580 with the fused GELU unbounded, 373 -> 380 with it on
    bucketed rows; docs/serve.md, "Speed and memory").
    """
    global _avoided
    if _avoided is None:
        import logging

        logging.getLogger("bertkit.kernels").info(
            "oneDNN's linear is off in this process: %s", reason
        )
    _avoided = reason


_bounded: str | None = None


def bound_shapes(reason: str) -> None:
    """Run this process's oneDNN inference products on row counts rounded up by
    :func:`bucket_rows` from now on (zero rows added, cut off again); ``reason`` is logged once.

    oneDNN keeps memory (its generated kernels) for every input shape it sees, and a server's
    passes have ever-new token counts: RSS grows with every new shape. Bucketing bounds the shapes
    to 96 below 16,384 rows, so the growth stops, while the products stay on oneDNN where it is the
    faster choice (and the GELU stays fused). Rows are independent in a product, so the real rows'
    values are the same up to the kernel's blocking (docs/serve.md, "Speed and memory").
    """
    global _bounded
    if _bounded is None:
        import logging

        logging.getLogger("bertkit.kernels").info(
            "oneDNN products run on bucketed row counts in this process: %s", reason
        )
    _bounded = reason


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None elsewhere: musl, macOS, Windows)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None


def trim_heap() -> bool:
    """Give the C heap's free pages back to the system; False where there is no glibc.

    Activations and batches of ever-new shapes come from the heap and fragment it, and glibc
    keeps the freed pages: RSS grows with the work done. The server trims between passes
    (``serve.worker.HeapTrim``: +66% RSS in a 10-minute MiniLM soak without), a corpus job after
    each window (``inference.streaming``: streaming 80k and 320k lines, tiny model, 1 thread,
    Intel Xeon with AMX, peak RSS 396 and 462 MiB without, 395 and 419 MiB with, same speed)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def bucket_rows(m: int) -> int:
    """``m`` rounded up to a multiple of 2^(bit_length(m) - 4), clamped to 16..256: at most 1/8
    more rows, at most 256 more; 96 buckets up to 16,384.

    >>> [bucket_rows(m) for m in (1, 137, 1000, 8800)]
    [16, 144, 1024, 8960]
    """
    step = min(256, max(16, 1 << max(0, m.bit_length() - 4)))
    return -(-m // step) * step


def on_bucketed_rows(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` for a row-wise ``fn`` (a product over the last dimension); under
    :func:`bound_shapes`, run on x's rows padded with zeros to :func:`bucket_rows`, then cut."""
    if _bounded is None or x.dim() == 0:
        return fn(x)
    rows = x.reshape(-1, x.shape[-1])
    m = rows.shape[0]
    padded = bucket_rows(m)
    if padded == m:
        return fn(x)
    full = rows.new_zeros(padded, rows.shape[-1])
    full[:m] = rows
    out = fn(full)[:m]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _use_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        _avoided is None
        and not torch.compiler.is_compiling()  # inductor cannot lower it (module docstring)
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.numel() > 0
        and not torch.is_autocast_enabled("cpu")
        and hardware.fp32_matmul_onednn()
    )


def _mm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a (..., K) @ b (N, K)^T + bias: oneDNN reads strided (transposed) operands directly."""
    return _OP(a, b, bias, "none", [], "")


class _OneDnnLinear(torch.autograd.Function):
    """y = x W^T + b with oneDNN forward and backward (the same three products as nn.Linear)."""

    @staticmethod
    def forward(ctx, x, weight, bias):  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _mm(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad2 = grad.reshape(-1, grad.shape[-1])  # (M, N)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _mm(grad, weight.t())  # (..., N) @ (N, K)
        if ctx.needs_input_grad[1]:
            gw = _mm(grad2.t(), x.reshape(-1, x.shape[-1]).t())  # (N, M) @ (M, K)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = grad2.sum(0)
        return gx, gw, gb


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear``, through oneDNN for fp32 CPU tensors outside autocast."""
    if not _use_onednn(x, weight):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    ):
        return _OneDnnLinear.apply(x, weight, bias)
    return on_bucketed_rows(lambda rows: _mm(rows, weight, bias), x)


def linear_gelu(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor | None:
    """gelu(x W^T + b) (exact erf GELU) as one oneDNN call with the GELU fused, for fp32 CPU
    inference (no autograd, outside autocast); None where that does not apply, and the caller
    runs the product and the GELU itself.

    The separate GELU is a full pass over the (S, I) intermediate, the largest activation of the
    layer; oneDNN applies it while the product's tile is still in cache. Taken whatever the
    ``fp32_matmul`` decision (MKL's products elsewhere): on the 2-core Xeon of docs/performance.md,
    MiniLM's up-projection of 4,096 tokens with its GELU took 40-45 ms fused against 53-87 ms for
    MKL + ``F.gelu`` (interleaved, a loaded machine), the same values to the last bit.
    """
    if (
        _OP is None
        or _avoided is not None
        or torch.is_grad_enabled()
        or x.device.type != "cpu"
        or x.dtype != torch.float32
        or linear.weight.dtype != torch.float32
        or x.numel() == 0
        or torch.is_autocast_enabled("cpu")
        or torch.jit.is_tracing()  # an exported graph holds ATen ops, not this call
        or torch.compiler.is_compiling()  # inductor lowers this op only for frozen weights
    ):
        return None
    return on_bucketed_rows(
        lambda rows: _OP(rows, linear.weight, linear.bias, "gelu", [], "none"), x
    )


def matmul_nt(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (M, K) @ b (N, K)^T without autograd (for hand-written backward passes)."""
    if _use_onednn(a, b):
        return _mm(a, b)
    return a @ b.t()


class Linear(nn.Linear):
    """nn.Linear (same parameters and state-dict keys) whose forward is :func:`linear`.

    Inference under CPU bf16 autocast (no grad) keeps a bf16 copy of the weight and bias,
    refreshed whenever the fp32 parameters change, and runs oneDNN's linear with the bias fused
    (autocast alone re-casts every weight on every call when grad is off). Only where the CPU
    runs bf16 natively (``hardware.bf16_mode() == "native"``); elsewhere autocast's own kernels.
    "Change" is an in-place write that bumps the parameter's version counter (``copy_``,
    ``load_state_dict``) or any torch optimizer's step; writes through ``.data`` are not seen.
    """

    _low: tuple | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            _OP is not None
            and _avoided is None
            and not torch.is_grad_enabled()
            and not torch.compiler.is_compiling()
            and x.device.type == "cpu"
            and torch.is_autocast_enabled("cpu")
            and torch.get_autocast_dtype("cpu") == torch.bfloat16
            and x.numel() > 0
            and hardware.bf16_mode() == "native"
        ):
            weight, bias = self._low_precision(torch.bfloat16)
            return on_bucketed_rows(
                lambda rows: _OP(rows, weight, bias, "none", [], ""), x.to(torch.bfloat16)
            )
        return linear(x, self.weight, self.bias)

    def _low_precision(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
        params = [self.weight] + ([self.bias] if self.bias is not None else [])
        follow_optimizer_steps()
        key = (dtype, _steps, *((p.data_ptr(), p._version) for p in params))
        if self._low is None or self._low[0] != key:
            low = [p.detach().to(dtype) for p in params]
            self._low = (key, low[0], low[1] if len(low) > 1 else None)
        return self._low[1], self._low[2]
