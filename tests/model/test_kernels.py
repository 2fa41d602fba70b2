"""The fp32 linear on either kernel (oneDNN or ATen's BLAS, forced): the same values and
gradients as F.linear, and the chosen kernel is really the one taken; bf16 on both bf16 paths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit import hardware
from bertkit.model import kernels

needs_onednn = pytest.mark.skipif(not hardware.ONEDNN_AVAILABLE, reason="oneDNN not in this torch")


@pytest.fixture
def counted(monkeypatch):
    calls = []
    op = kernels._OP

    def wrapped(*args):
        calls.append(tuple(args[0].shape))
        return op(*args)

    monkeypatch.setattr(kernels, "_OP", wrapped)
    return calls


@pytest.mark.parametrize("shape", [(7, 24), (3, 5, 24)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_forward_and_backward_match_f_linear(counted, fp32_path, shape, with_bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, requires_grad=True)
    w = torch.randn(40, 24, generator=g, requires_grad=True)
    b = torch.randn(40, generator=g, requires_grad=True) if with_bias else None
    up = torch.randn(*shape[:-1], 40, generator=g)

    y = kernels.linear(x, w, b)
    (y * up).sum().backward()
    grads = [x.grad, w.grad] + ([b.grad] if with_bias else [])
    # oneDNN: forward, input gradient, weight gradient; BLAS: none of them
    assert len(counted) == (3 if fp32_path == "onednn" else 0)

    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    b2 = b.detach().clone().requires_grad_() if with_bias else None
    y2 = F.linear(x2, w2, b2)
    (y2 * up).sum().backward()
    ref = [x2.grad, w2.grad] + ([b2.grad] if with_bias else [])
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_strided_input_and_no_grad(counted, fp32_path):
    x = torch.randn(24, 9).t()  # (9, 24), not contiguous
    w = torch.randn(6, 24)
    with torch.no_grad():
        y = kernels.linear(x, w)
    torch.testing.assert_close(y, x @ w.t(), rtol=1e-5, atol=1e-5)
    assert counted == ([(9, 24)] if fp32_path == "onednn" else [])


@needs_onednn
def test_fallbacks_keep_f_linear(counted):
    w = torch.randn(6, 4)
    with hardware.forced("fp32_matmul", "onednn"):
        kernels.linear(torch.randn(3, 4, dtype=torch.float64), w.double())  # not fp32
        kernels.linear(torch.randn(0, 4), w)  # empty
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert kernels.linear(torch.randn(3, 4), w).dtype == torch.bfloat16
    assert counted == []
    with hardware.forced("fp32_matmul", "blas"):
        x = torch.randn(3, 4)
        assert torch.equal(kernels.linear(x, w), F.linear(x, w))
    assert counted == []


@pytest.mark.parametrize("autocast", [False, True])
def test_low_precision_cpu_attention_matches_fp32_sdpa(autocast):
    from bertkit.model.attention import attend

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 2, 9, 8, generator=g) for _ in range(3))
    mask = (torch.arange(9)[None, :] < torch.tensor([9, 5, 2])[:, None])[:, None, None, :]
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if autocast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = attend(q, k, v, mask, 0.0)
    else:
        got = attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, 0.0)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=3e-2, atol=3e-2)
    # a masked key changes nothing: perturb the keys/values beyond each row's length
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 5:] += 100.0
    v2[1, :, 5:] -= 100.0
    again = attend(q.bfloat16(), k2.bfloat16(), v2.bfloat16(), mask, 0.0)
    torch.testing.assert_close(
        again[1], attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, 0.0)[1]
    )


def test_bf16_inference_cache_follows_weight_updates(counted, bf16_path):
    layer = kernels.Linear(16, 8)
    x = torch.randn(5, 16)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = F.linear(x, layer.weight, layer.bias)
            got = layer(x)
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        # an in-place update between two autocast regions, as an optimizer step makes (within
        # one region, autocast's own cast cache would keep the old weights on the emulated path)
        layer.weight.mul_(-1.0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            flipped = layer(x)
    torch.testing.assert_close(
        flipped.float() - layer.bias, -(got.float() - layer.bias), rtol=2e-2, atol=2e-2
    )
    # native: oneDNN's bf16 linear on the cached weights; emulated: autocast's kernels only
    assert len(counted) == (2 if bf16_path == "native" else 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # grad on: plain autocast, no cache use
        y = layer(x.requires_grad_())
    y.float().sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.float32


@pytest.mark.parametrize("fused", [True, False])
def test_bf16_inference_cache_follows_optimizer_steps(counted, bf16_path, fused):
    """torch's fused AdamW writes parameters without bumping their version counters: the cached
    bf16 weights must still follow its steps (a held-out evaluation between updates, as a
    pre-training or fine-tuning run makes, scored the first evaluation's weights before). The
    fp32 training products run on BLAS, so that only the bf16 inference calls are counted, also
    under BERTKIT_FP32_MATMUL=onednn."""
    torch.manual_seed(0)
    layer = kernels.Linear(16, 8)
    x = torch.randn(5, 16)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.5, fused=fused)
    with hardware.forced("fp32_matmul", "blas"):
        _follow_three_steps(layer, x, optimizer)
    assert len(counted) == (3 if bf16_path == "native" else 0)


def _follow_three_steps(layer: kernels.Linear, x: torch.Tensor, optimizer) -> None:
    for _ in range(3):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            got = layer(x)
            want = F.linear(x, layer.weight, layer.bias)
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        before = layer.weight.detach().clone()
        layer(x).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        assert (layer.weight - before).abs().max() > 0.1  # the step moved the weights


@needs_onednn
def test_avoid_onednn_keeps_every_product_off_it(counted, monkeypatch, bf16_path):
    """After ``avoid_onednn`` (a server calls it: oneDNN's linear keeps memory per input shape),
    neither the fp32 linear, the fused GELU nor the bf16 inference path (native, and autocast's
    own) calls oneDNN, and the values are F.linear's."""
    monkeypatch.setattr(kernels, "_avoided", None)  # restored after the test
    layer = kernels.Linear(16, 8)
    x = torch.randn(5, 16)
    with hardware.forced("fp32_matmul", "onednn"), torch.no_grad():
        kernels.linear(x, layer.weight, layer.bias)
        assert kernels.linear_gelu(layer, x) is not None
        assert len(counted) == 2
        kernels.avoid_onednn("test")
        assert torch.equal(
            kernels.linear(x, layer.weight, layer.bias), F.linear(x, layer.weight, layer.bias)
        )
        assert kernels.linear_gelu(layer, x) is None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(x).dtype == torch.bfloat16
    assert len(counted) == 2


def test_bucket_rows_bounds_the_shapes_and_the_padding():
    """96 row counts up to 16,384 (so a server's oneDNN memory stops growing), none smaller than
    its input, at most 1/8 (and at most 256 rows) more."""
    got = [kernels.bucket_rows(m) for m in range(1, 16_385)]
    assert len(set(got)) == 96
    assert [kernels.bucket_rows(m) for m in (1, 16, 17, 137, 255, 256, 257, 1000, 8800)] == [
        16,
        16,
        32,
        144,
        256,
        256,
        288,
        1024,
        8960,
    ]
    for m, b in zip(range(1, 16_385), got, strict=True):
        assert m <= b and (b - m <= 15 or (b - m) / m <= 1 / 8) and b - m < 256


@needs_onednn
@pytest.mark.parametrize("shape", [(7, 24), (3, 5, 24), (16, 24), (300, 24)])
def test_bound_shapes_pads_onednn_rows_to_buckets_and_cuts_them(
    counted, monkeypatch, shape, bf16_path
):
    """Under ``bound_shapes`` (a server calls it) the fp32 linear, the fused GELU and the bf16
    path (native, and autocast's own) hand oneDNN bucketed row counts, and the real rows come
    back with F.linear's values."""
    monkeypatch.setattr(kernels, "_bounded", None)  # restored after the test
    layer = kernels.Linear(24, 8)
    x = torch.randn(*shape)
    want = F.linear(x, layer.weight, layer.bias)
    kernels.bound_shapes("test")
    with hardware.forced("fp32_matmul", "onednn"), torch.no_grad():
        y = kernels.linear(x, layer.weight, layer.bias)
        g = kernels.linear_gelu(layer, x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = layer(x)
    assert y.shape == g.shape == want.shape
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g, F.gelu(want), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(low.float(), want, rtol=3e-2, atol=3e-2)
    rows = x.numel() // x.shape[-1]
    assert counted[:2] == [(kernels.bucket_rows(rows), 24)] * 2  # 7, 15, 16 -> 16; 300 -> 320
    assert kernels.linear(x[:0], layer.weight, layer.bias).shape == (0, *want.shape[1:])


@needs_onednn
def test_int8_linear_on_bucketed_rows_gives_the_same_values(monkeypatch):
    """Zero rows leave the activations' range as it was, so the int8 product of the real rows
    is the same with and without bucketing."""
    from bertkit.model.quantize import Int8Linear

    monkeypatch.setattr(kernels, "_bounded", None)
    layer = Int8Linear(torch.randn(8, 24), torch.randn(8))
    x = torch.randn(3, 5, 24)
    plain = layer(x)
    kernels.bound_shapes("test")
    torch.testing.assert_close(layer(x), plain, rtol=0, atol=1e-6)


def test_importing_the_model_registers_no_global_hook():
    """Importing bertkit.model (and the library's entry points) leaves torch's global optimizer
    hooks empty; the bf16 cache registers its step counter when it first caches, once."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from torch.optim.optimizer import _global_optimizer_post_hooks as hooks\n"
        "import bertkit.model, bertkit.model.kernels as k, bertkit.inference, bertkit.training\n"
        "print(len(hooks))\n"
        "layer = k.Linear(4, 2)\n"
        "layer._low_precision(torch.bfloat16); layer._low_precision(torch.bfloat16)\n"
        "k.follow_optimizer_steps()\n"
        "print(len(hooks))\n"
        "opt = torch.optim.SGD(layer.parameters(), lr=0.1)\n"
        "layer(torch.ones(1, 4)).sum().backward(); opt.step()\n"
        "print(k._steps)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "1", "1"]


def _attention_pass(
    choice: str, training: bool, monkeypatch, tokens: int = 9, head_size: int = 8
) -> tuple[list, torch.Tensor, list]:
    """bf16 CPU attention under ``choice`` over ``tokens`` tokens of heads of ``head_size``: the
    kernels it called, its output and (training) the fp32 gradients of q, k, v."""
    from bertkit.model import attention

    calls: list[str] = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kw):
        calls.append("fused")
        return sdpa(*args, **kw)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", spy)
    g = torch.Generator().manual_seed(2)
    T = tokens
    D = head_size
    q, k, v = (torch.randn(3, 2, T, D, generator=g).requires_grad_(training) for _ in range(3))
    mask = (torch.arange(T)[None, :] < torch.tensor([T, 5, 2])[:, None])[:, None, None, :]
    with hardware.forced("bf16_attention", choice), torch.set_grad_enabled(training):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = attention.attend(q, k, v, mask, 0.0)
        grads = []
        if training:
            out.float().sum().backward()
            grads = [x.grad for x in (q, k, v)]
    monkeypatch.undo()
    return calls, out.float().detach(), grads


@pytest.mark.parametrize("training", [False, True])
def test_each_bf16_attention_kernel_is_the_one_taken_and_they_agree(training, monkeypatch):
    """Forced ``fused`` calls torch's fused kernel, ``matmul`` never does, ``fused_inference``
    only without gradients, ``fused_long`` also with gradients from 384 tokens; outputs and
    gradients agree with each other within bf16."""
    fused = _attention_pass("fused", training, monkeypatch)
    matmul = _attention_pass("matmul", training, monkeypatch)
    mixed = _attention_pass("fused_inference", training, monkeypatch)
    assert fused[0] == ["fused"] and matmul[0] == []
    assert mixed[0] == ([] if training else ["fused"])
    assert _attention_pass("fused_long", training, monkeypatch)[0] == mixed[0]
    long = _attention_pass("fused_long", training, monkeypatch, tokens=384, head_size=64)
    assert long[0] == ["fused"]
    small_heads = _attention_pass("fused_long", training, monkeypatch, tokens=384)
    assert small_heads[0] == mixed[0]
    torch.testing.assert_close(fused[1], matmul[1], rtol=3e-2, atol=3e-2)
    for a, b in zip(fused[2], matmul[2], strict=True):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-2)
