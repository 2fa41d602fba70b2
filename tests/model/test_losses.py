"""The fused masked-LM decoder + cross-entropy equals the plain composition, gradients included."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit.model.losses import decoder_cross_entropy


def _inputs(seed: int, m: int = 7, h: int = 5, v: int = 11):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(m, h, generator=g, requires_grad=True)
    weight = torch.randn(v, h, generator=g, requires_grad=True)
    bias = torch.randn(v, generator=g, requires_grad=True)
    targets = torch.randint(0, v, (m,), generator=g)
    return hidden, weight, bias, targets


def _reference(hidden, weight, bias, targets):
    logits = F.linear(hidden, weight, bias)
    return logits, F.cross_entropy(logits, targets), (logits.argmax(-1) == targets).sum()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fused_matches_plain_values_and_gradients(seed: int) -> None:
    a = _inputs(seed)
    b = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
    logits, loss, correct = decoder_cross_entropy(*a)
    ref_logits, ref_loss, ref_correct = _reference(*b)
    torch.testing.assert_close(logits, ref_logits)
    torch.testing.assert_close(loss, ref_loss)
    assert int(correct) == int(ref_correct)
    (3.0 * loss).backward()  # a scaled upstream gradient reaches every input
    (3.0 * ref_loss).backward()
    for x, y in zip(a[:3], b[:3], strict=True):
        torch.testing.assert_close(x.grad, y.grad)


def test_logits_used_elsewhere_add_their_gradient() -> None:
    a = _inputs(3)
    b = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
    logits, loss, _ = decoder_cross_entropy(*a)
    ref_logits, ref_loss, _ = _reference(*b)
    (loss + logits.pow(2).mean()).backward()
    (ref_loss + ref_logits.pow(2).mean()).backward()
    for x, y in zip(a[:3], b[:3], strict=True):
        torch.testing.assert_close(x.grad, y.grad)


def test_second_backward_is_refused() -> None:
    _, loss, _ = decoder_cross_entropy(*_inputs(4))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward"):
        loss.backward()


def test_empty_targets_and_fp16_autocast_take_the_plain_path() -> None:
    hidden, weight, bias, _ = _inputs(5)
    empty = torch.zeros(0, dtype=torch.long)
    logits, loss, correct = decoder_cross_entropy(hidden[:0], weight, bias, empty)
    assert logits.shape == (0, 11) and float(loss.detach()) == 0.0 and int(correct) == 0
    loss.backward()  # the graph is kept: gradients are zeros, not missing
    assert weight.grad is not None and not weight.grad.any()
    hidden, weight, bias, targets = _inputs(6)
    with torch.autocast("cpu", dtype=torch.float16):
        logits, loss, _ = decoder_cross_entropy(hidden, weight, bias, targets)
    assert logits.dtype == torch.float16 and loss.dtype == torch.float32
    assert loss.grad_fn is not None and "CrossEntropy" not in type(loss.grad_fn).__name__


@pytest.mark.parametrize("seed", [7, 8])
def test_bf16_autocast_fused_matches_the_autocast_composition(seed: int) -> None:
    a = _inputs(seed, m=64, h=32, v=300)
    b = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss, correct = decoder_cross_entropy(*a)
        ref_logits = F.linear(*b[:3])
        ref_loss = F.cross_entropy(ref_logits.float(), b[3])
    assert type(loss.grad_fn).__name__ == "_DecoderCrossEntropyBackward"
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    torch.testing.assert_close(logits, ref_logits)
    torch.testing.assert_close(loss, ref_loss, rtol=2e-3, atol=2e-3)
    assert int(correct) == int((ref_logits.argmax(-1) == b[3]).sum())
    (2.0 * loss).backward()
    (2.0 * ref_loss).backward()
    for x, y in zip(a[:3], b[:3], strict=True):
        assert x.grad.dtype == torch.float32
        torch.testing.assert_close(x.grad, y.grad, rtol=2e-2, atol=2e-3)


def test_only_the_logits_used_downstream() -> None:
    a = _inputs(9)
    b = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
    logits, _, _ = decoder_cross_entropy(*a)
    ref_logits, _, _ = _reference(*b)
    logits.pow(2).mean().backward()
    ref_logits.pow(2).mean().backward()
    for x, y in zip(a[:3], b[:3], strict=True):
        torch.testing.assert_close(x.grad, y.grad)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_cuda_fp32_log_softmax_is_the_autocast_composition(seed: int) -> None:
    """What CUDA runs (bf16 matmuls, fp32 log-softmax: softmax_dtype("cuda")), here on the CPU:
    equal to bf16 linear + fp32 cross-entropy, closer than the bf16 log-softmax gets."""
    from bertkit.model.losses import _DecoderCrossEntropy, softmax_dtype

    assert softmax_dtype("cuda") == torch.float32 and softmax_dtype("cpu") is None
    a = _inputs(seed, m=64, h=32, v=3000)
    b = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
    c = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
    _, loss, _ = _DecoderCrossEntropy.apply(*a, torch.bfloat16, torch.float32)
    _, bf16_loss, _ = _DecoderCrossEntropy.apply(*c, torch.bfloat16, None)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_loss = F.cross_entropy(F.linear(*b[:3]).float(), b[3])
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert (loss - ref_loss).abs() < (bf16_loss - ref_loss).abs()
    loss.backward()
    ref_loss.backward()
    bf16_loss.backward()
    for x, y in zip(a[:3], b[:3], strict=True):
        torch.testing.assert_close(x.grad, y.grad, rtol=2e-2, atol=1e-4)
