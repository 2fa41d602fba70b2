"""Dynamic int8 linear layers for CPU inference (``--precision int8``).

Weights are rounded once to int8, per output channel (symmetric: scale = max |w| / 127, zero
point 0). Activations are quantized on the fly, per call, to uint8 over their own range
(asymmetric, one scale per call), and the int32 products come back as fp32 with the bias added:
the scheme of ONNX Runtime's dynamic quantization, except that its weights default to one scale
per tensor. Everything outside the linear layers (embeddings, LayerNorm, attention scores, the
heads) stays fp32, so the unpadded and length-grouped paths of
:class:`~bertkit.model.bert.BertModel` are unchanged: a packed (S, H) input is as good as a padded
(B, T, H) one.

The kernel is oneDNN's int8 inner product as torch ships it (``torch.ops.onednn.qlinear_*``, on
plain int8/uint8 tensors, no deprecated quantized dtypes, no torchao), with the feed-forward's
exact GELU fused into the up-projection. Measured on a 2-core Intel Xeon (AVX-512 + VNNI), one
thread, MiniLM's four products of one layer at 3,072 tokens, interleaved, quantization of the
input included: oneDNN 28.3 ms, fbgemm's ``quantized::linear_dynamic`` (+ ``F.gelu``) 36.2, fp32
``F.linear`` (MKL) 65.8.

On a CPU without VNNI/AMX, oneDNN multiplies uint8 by int8 with AVX2's ``vpmaddubsw``, which adds
each pair of products into a saturating int16: 2 x 255 x 127 overflows it (measured on an AVX2-only
AMD EPYC: a 64-long dot product of 255s and 127s came back as 1,048,544, not 2,072,640). There the
weights use 7 bits (-63..63; 2 x 255 x 63 = 32,130 fits) and the activations keep 8. torch's own
rule (``reduce_range``) takes the bit from the activations instead; on that EPYC, MiniLM's sentence
vectors against fp32 had cosine 0.947-0.985 with 7-bit activations and 0.985-0.995 with 7-bit
weights, as good as 8 x 8 bits on a CPU with VNNI (the weights' scale is per channel, the
activations' one per call).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from bertkit import hardware
from bertkit.errors import ConfigError
from bertkit.model import kernels

_PREPACK = (
    getattr(torch.ops.onednn, "qlinear_prepack", None) if hasattr(torch.ops, "onednn") else None
)
_FUSED_QUANTIZE = hasattr(torch, "quantize_per_tensor")


ACTIVATION_LEVELS = 255  # uint8 codes 0..255


def cpu_weight_levels() -> int:
    """The largest weight code: 127, or 63 where oneDNN has no VNNI/AMX int8 dot products here
    (their int16 pair sums saturate above 32,767; 2 x 255 x 63 does not). The hardware decision
    ``int8_weights`` (forceable with ``BERTKIT_INT8_WEIGHTS=8bit|7bit``) says which."""
    return 127 if hardware.decision("int8_weights").choice == "8bit" else 63


def describe() -> str:
    """One line for ``bertkit env``: the int8 kernel and the weights' width on this CPU."""
    if _PREPACK is None:
        return "unavailable (this torch build has no oneDNN int8 linear)"
    bits = (
        "8-bit weights (VNNI/AMX)"
        if cpu_weight_levels() == 127
        else "7-bit weights (no VNNI/AMX: int16 pair sums would saturate)"
    )
    return f"oneDNN int8 inner product, per-channel weights, 8-bit activations, {bits}"


def quantize_activations(
    x: torch.Tensor, levels: int = ACTIVATION_LEVELS
) -> tuple[torch.Tensor, float, int]:
    """x (fp32) -> (uint8 codes, scale, zero point) over [min(x, 0), max(x, 0)] in ``levels`` steps
    (255: :data:`ACTIVATION_LEVELS`).

    Two passes: ``torch.aminmax``, then, where torch still has it, ``torch.quantize_per_tensor``,
    whose bytes are read in place as uint8 (no copy out of the quantized dtype). 1.5x faster than
    ``torch.quantize_per_tensor_dynamic`` (a min, a max and a quantize pass: 1.63 against 2.42 ms
    for 2,400 x 1,536, the same codes). Without it, four elementwise ops, which give the same
    codes up to rounding ties."""
    lo, hi = (v.item() for v in torch.aminmax(x))
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / levels or 1.0
    zero = round(-lo / scale)
    if _FUSED_QUANTIZE:
        with warnings.catch_warnings():  # torch 2.13 flags its quantized dtypes as deprecated
            warnings.simplefilter("ignore", UserWarning)
            q = torch.quantize_per_tensor(x.contiguous(), scale, zero, torch.quint8)
        codes = torch.empty(0, dtype=torch.uint8, device=x.device)
        codes.set_(q.untyped_storage(), 0, q.shape, q.stride())  # the same bytes, no copy
        return codes, scale, zero
    codes = (x * (1.0 / scale)).round_().add_(zero).clamp_(0, levels).to(torch.uint8)
    return codes, scale, zero


class Int8Linear(nn.Module):
    """y = act(x W^T + b) with W in int8 (per output channel) and x quantized per call.

    ``weight_levels``: the largest weight code (default: :func:`cpu_weight_levels`).

    ``activation``: "none", or "gelu" / "gelu_tanh" fused into the product (the feed-forward's
    up-projection). Built from a fitted linear layer by :meth:`from_linear`; inference only (no
    gradient, nothing in ``state_dict``: the fp32 checkpoint stays the source of truth).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        activation: str = "none",
        weight_levels: int | None = None,
    ) -> None:
        super().__init__()
        if _PREPACK is None:
            raise ConfigError("int8 needs torch's oneDNN int8 linear (an x86 build of torch)")
        self.out_features, self.in_features = weight.shape
        w = weight.detach().float()
        self.weight_levels = wl = weight_levels or cpu_weight_levels()
        scale = (w.abs().amax(1) / wl).clamp_min(1e-12)  # (N,)
        codes = torch.round(w / scale[:, None]).clamp_(-wl, wl).to(torch.int8)
        self._packed = _PREPACK(codes, [1, self.in_features])
        self._scale = scale
        self._zeros = torch.zeros(self.out_features, dtype=torch.long)
        self._bias = None if bias is None else bias.detach().float().clone()
        self._post, self._algorithm = {
            "none": ("none", ""),
            "gelu": ("gelu", "none"),
            "gelu_tanh": ("gelu", "tanh"),
        }[activation]
        self.activation = activation

    @classmethod
    def from_linear(cls, linear: nn.Linear, activation: str = "none") -> Int8Linear:
        return cls(linear.weight, linear.bias, activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            raise ConfigError("int8 linear layers run on the CPU only")
        if x.numel() == 0:  # no row to take a range over (aminmax refuses an empty tensor)
            return x.new_zeros(*x.shape[:-1], self.out_features, dtype=torch.float32)
        return kernels.on_bucketed_rows(self._product, x.float())

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        # zero rows (bucketing) leave the range [min(x, 0), max(x, 0)] as it was: the real rows'
        # codes do not change
        codes, scale, zero = quantize_activations(x)
        return torch.ops.onednn.qlinear_pointwise(
            codes,
            scale,
            zero,
            self._packed,
            self._scale,
            self._zeros,
            self._bias,
            1.0,
            0,
            torch.float32,
            self._post,
            [],
            self._algorithm,
        )

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


_FUSABLE = {F.gelu: "gelu"}


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace the encoder's linear layers (Q/K/V, attention output, feed-forward, pooler) by
    :class:`Int8Linear`, in place; returns ``model``. The heads' own projections (classifier, span
    scorer, MLM transform and tied decoder) stay fp32: they are a sliver of the work and the part
    closest to the scores. ``model`` is a ``BertModel`` or a head holding one in ``.bert``; on the
    CPU. Layers already int8 are left alone, so a second call changes nothing."""
    from bertkit.model.encoder import FeedForward

    encoder = getattr(model, "bert", model)
    if any(p.device.type != "cpu" for p in encoder.parameters()):
        raise ConfigError("int8 runs on the CPU only (use --precision bf16 or fp16 on a GPU)")
    model.eval()
    for module in list(encoder.modules()):
        if isinstance(module, FeedForward) and isinstance(module.up, nn.Linear):
            fused = _FUSABLE.get(module.act)
            if fused is not None:  # GELU inside the int8 product; the layer's act becomes a no-op
                module.up = Int8Linear.from_linear(module.up, fused)
                module.act = _identity
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear.from_linear(child))
    return model


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def for_precision(model: nn.Module, precision: str) -> nn.Module:
    """``model`` ready for a concrete inference precision: int8 quantizes it (in place, once);
    every other precision leaves it as it is."""
    return quantize_int8(model) if precision == "int8" else model
