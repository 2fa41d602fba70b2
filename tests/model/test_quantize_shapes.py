"""Int8Linear on inputs with no rows: the shape and dtype a non-empty input would give."""

from __future__ import annotations

import pytest
import torch

from bertkit.model import kernels, quantize
from bertkit.model.quantize import Int8Linear

pytestmark = pytest.mark.skipif(quantize._PREPACK is None, reason="no oneDNN int8 linear here")


def _forward(layer: Int8Linear, x: torch.Tensor) -> torch.Tensor:
    try:
        return layer(x)
    except RuntimeError as e:  # aminmax over zero rows: the empty input reached the product
        pytest.fail(f"an input of shape {tuple(x.shape)} raised instead of giving zero rows: {e}")


@pytest.mark.parametrize("bucketed", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lead", [(0,), (0, 5), (3, 0)])
def test_no_rows_give_no_rows_of_out_features(lead, dtype, bucketed, monkeypatch):
    monkeypatch.setattr(kernels, "_bounded", None)
    if bucketed:
        kernels.bound_shapes("test")
    g = torch.Generator().manual_seed(0)
    layer = Int8Linear(torch.randn(8, 24, generator=g), torch.randn(8, generator=g))
    one = _forward(layer, torch.randn(1, 24, generator=g).to(dtype))
    assert (tuple(one.shape), one.dtype) == ((1, 8), torch.float32)  # a real row's output
    got = _forward(layer, torch.randn(*lead, 24, generator=g).to(dtype))
    assert (tuple(got.shape), got.dtype) == ((*lead, 8), torch.float32)
