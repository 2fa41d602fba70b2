"""The feed-forward's GELU fused into the up-projection (fp32 CPU inference only)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit.config import BertConfig
from bertkit.model import encoder, kernels
from bertkit.model.encoder import FeedForward

pytestmark = pytest.mark.skipif(kernels._OP is None, reason="this torch build has no oneDNN linear")


def test_fused_is_the_product_then_gelu():
    lin = torch.nn.Linear(24, 40)
    x = torch.randn(13, 24) * 3
    with torch.no_grad():
        got = kernels.linear_gelu(lin, x)
        want = F.gelu(F.linear(x, lin.weight, lin.bias))
    assert got is not None and torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_training_and_autocast_keep_the_two_steps():
    lin = torch.nn.Linear(8, 8)
    assert kernels.linear_gelu(lin, torch.randn(2, 8)) is None  # grad on: autograd needs both
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert kernels.linear_gelu(lin, torch.randn(2, 8)) is None


def test_feed_forward_takes_the_fused_path_in_inference(monkeypatch):
    ff = FeedForward(BertConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2)).eval()
    x = torch.randn(5, 16)
    calls = []
    fused = kernels.linear_gelu
    monkeypatch.setattr(encoder, "linear_gelu", lambda lin, v: calls.append(1) or fused(lin, v))
    with torch.no_grad():
        got = ff(x)
    monkeypatch.setattr(encoder, "linear_gelu", lambda lin, v: None)
    with torch.no_grad():
        want = ff(x)
    assert calls == [1] and torch.allclose(got, want, atol=1e-5)
