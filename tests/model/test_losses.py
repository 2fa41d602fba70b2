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


def test_autocast_and_empty_targets_take_the_plain_path() -> None:
    hidden, weight, bias, _ = _inputs(5)
    empty = torch.zeros(0, dtype=torch.long)
    logits, loss, correct = decoder_cross_entropy(hidden[:0], weight, bias, empty)
    assert logits.shape == (0, 11) and float(loss.detach()) == 0.0 and int(correct) == 0
    loss.backward()  # the graph is kept: gradients are zeros, not missing
    assert weight.grad is not None and not weight.grad.any()
    hidden, weight, bias, targets = _inputs(6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss, _ = decoder_cross_entropy(hidden, weight, bias, targets)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
