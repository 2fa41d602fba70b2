"""The masked-LM decoder and its cross-entropy as one autograd step.

``F.cross_entropy(F.linear(h, W, b), t)`` makes autograd keep the log-probabilities, build a
zero-filled (M, V) gradient for the gather, run log_softmax's backward over it, and only then
reach the decoder's matmuls. Over a 30k vocabulary these (M, V) passes cost as much as the
decoder's matmuls on a CPU. The backward here writes softmax - one_hot into the saved buffer in
place, and puts the 1/M scale on the small products (M, H), (V, H) instead of on (M, V): three
passes over (M, V) fewer. The results equal the unfused computation within fp32 rounding.
Under bf16 autocast the decoder matmuls run in bf16. On the CPU the log-softmax and its saved
buffer stay bf16 too (it accumulates in fp32); the unfused autocast path was measured spending
more time on its (M, V) casts, fills and bf16 argmax than on the decoder matmuls themselves. On
CUDA they run in fp32 (:func:`softmax_dtype`), as CUDA autocast runs cross-entropy: the (M, V)
passes are bandwidth-bound there and cheap next to the matmuls, and a bf16 log-softmax over 30k
classes loses the small probabilities the gradient is made of.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.model.kernels import linear, matmul_nt

IGNORE = -100
"""The label every loss ignores (a position or example without a target)."""


def softmax_dtype(device_type: str) -> torch.dtype | None:
    """The log-softmax dtype of the fused loss under bf16 autocast: fp32 on CUDA, None (the
    matmuls' bf16) on the CPU (see the module docstring)."""
    return torch.float32 if device_type == "cuda" else None


class _DecoderCrossEntropy(torch.autograd.Function):
    """(h (M, H), W (V, H), b (V,), targets (M,), dtype) -> (logits (M, V), mean loss, correct).

    ``dtype`` None computes in fp32; torch.bfloat16 (under autocast) runs the matmuls, the
    log-softmax and the saved buffer in bf16, as autocast would, and returns fp32 gradients for
    fp32 parameters; ``soft`` (torch.float32 on CUDA) runs the log-softmax and its buffer in
    that dtype instead.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, targets, dtype, soft=None):  # type: ignore[override]
        with torch.autocast(h.device.type, enabled=False):
            if dtype is not None:
                h_c, w_c, b_c = h.to(dtype), weight.to(dtype), bias.to(dtype)
            else:
                h_c, w_c, b_c = h, weight, bias
            logits = linear(h_c, w_c, b_c)  # (M, V); grad is off inside forward
            # (M, V), reused as the gradient's buffer; ``soft``: its dtype when not the matmuls'
            logp = torch.log_softmax(logits if soft is None else logits.to(soft), dim=-1)
            loss = -logp.gather(1, targets[:, None]).float().mean()
            # max(-1) rather than argmax: the same first index, and bf16 argmax is 6x slower here
            correct = (logits.max(-1).indices == targets).sum()
        ctx.save_for_backward(h_c, w_c, logp, targets)
        ctx.dtypes = (h.dtype, weight.dtype, bias.dtype)
        ctx.spent = False
        ctx.mark_non_differentiable(correct)
        ctx.set_materialize_grads(False)  # unused logits: None, not an (M, V) zero tensor
        return logits, loss, correct

    @staticmethod
    def backward(ctx, grad_logits, grad_loss, _grad_correct):  # type: ignore[override]
        if ctx.spent:
            raise RuntimeError("the fused MLM loss supports one backward pass (no retain_graph)")
        ctx.spent = True
        h, weight, logp, targets = ctx.saved_tensors
        h_dtype, w_dtype, b_dtype = ctx.dtypes
        rows = torch.arange(targets.numel(), device=targets.device)
        grad = logp.exp_()  # softmax, in the saved buffer
        grad[rows, targets] -= 1.0
        if grad_loss is None:  # only the logits were used downstream
            grad_loss = torch.zeros((), device=grad.device)
        scale = grad_loss.float() / targets.numel()
        if grad_logits is not None:  # the logits were also used elsewhere
            grad = grad.mul_(scale.to(grad.dtype)).add_(grad_logits.to(grad.dtype))
            scale = torch.ones_like(scale)
        grad = grad.to(weight.dtype)  # an fp32 softmax's gradient enters bf16 matmuls
        grad_h = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_h = matmul_nt(grad, weight.t()).to(h_dtype).mul_(scale)
        if ctx.needs_input_grad[1]:
            grad_w = matmul_nt(grad.t(), h.t()).to(w_dtype).mul_(scale)
        if ctx.needs_input_grad[2]:
            grad_b = grad.sum(0).to(b_dtype).mul_(scale)  # bf16 sums accumulate in fp32
        return grad_h, grad_w, grad_b, None, None, None


def decoder_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits = h W^T + b (M, V); mean cross-entropy against ``targets`` (M,); correct argmaxes.

    Fused (see the module docstring) in fp32 and under bf16 autocast; otherwise (fp16 autocast,
    whose loss scaling needs the scale before the matmuls, or no labelled token) the plain
    composition, with the loss computed in fp32.
    """
    device = h.device.type
    autocast = torch.is_autocast_enabled(device)
    if targets.numel() > 0:
        if autocast and torch.get_autocast_dtype(device) == torch.bfloat16:
            return _DecoderCrossEntropy.apply(
                h, weight, bias, targets, torch.bfloat16, softmax_dtype(device)
            )
        if not autocast and h.dtype == weight.dtype == torch.float32:
            return _DecoderCrossEntropy.apply(h, weight, bias, targets, None)
    logits = F.linear(h, weight, bias)
    if targets.numel() == 0:
        loss = logits.sum() * 0.0  # no labelled token: a zero loss that keeps the graph
    else:
        loss = F.cross_entropy(logits.float(), targets)
    with torch.no_grad():
        correct = (logits.argmax(-1) == targets).sum()
    return logits, loss, correct
