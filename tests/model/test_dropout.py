"""The CPU dropout from 15-bit integer draws: its rate, its scale, its gradient, its
repeatability, and that the model's dropouts and CPU attention with dropout use it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit.model import dropout as D


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_elements_are_kept_at_one_minus_p_and_independently(p: float) -> None:
    torch.manual_seed(0)
    keep = D.keep_mask((1000, 1000), p).float()
    assert abs(keep.mean().item() - (1 - p)) < 0.002  # binomial std <= 0.0005 here
    pairs = keep.view(-1, 2)  # the two halves of one 32-bit draw
    assert abs((pairs[:, 0] * pairs[:, 1]).mean().item() - (1 - p) ** 2) < 0.003
    rows = keep.view(1000, 1000)
    assert abs((rows[:-1] * rows[1:]).mean().item() - (1 - p) ** 2) < 0.003


def test_an_odd_count_and_any_shape() -> None:
    keep = D.keep_mask((3, 5, 7), 0.25)
    assert keep.shape == (3, 5, 7) and keep.dtype == torch.bool


def test_kept_elements_are_scaled_and_the_gradient_follows_the_mask() -> None:
    torch.manual_seed(1)
    x = torch.randn(64, 300, requires_grad=True)
    y = D.dropout(x, 0.2)
    kept = y != 0
    assert 0.7 < kept.float().mean().item() < 0.9
    assert torch.equal(y[kept], x[kept] * (1 / 0.8))
    y.sum().backward()
    assert torch.equal(x.grad, kept.float() * (1 / 0.8))


def test_bf16_inputs_stay_bf16() -> None:
    x = torch.randn(8, 16).bfloat16().requires_grad_()
    y = D.dropout(x, 0.1)
    y.float().sum().backward()
    assert y.dtype == x.grad.dtype == torch.bfloat16


def test_the_same_seed_gives_the_same_mask_and_draws_continue() -> None:
    x = torch.ones(4096)
    torch.manual_seed(7)
    a, b = D.dropout(x, 0.3), D.dropout(x, 0.3)
    torch.manual_seed(7)
    assert torch.equal(D.dropout(x, 0.3), a)
    assert not torch.equal(a, b)


def test_no_op_and_all_dropped() -> None:
    x = torch.randn(10)
    assert D.dropout(x, 0.0) is x and D.dropout(x, 0.5, training=False) is x
    assert torch.equal(D.dropout(x, 1.0), torch.zeros(10))


def test_the_module_is_an_nn_dropout_that_follows_train_and_eval() -> None:
    m = D.Dropout(0.5)
    assert isinstance(m, torch.nn.Dropout) and not list(m.state_dict())
    x = torch.ones(1000)
    assert (m(x) == 0).any()
    assert m.eval()(x) is x


def test_the_model_and_cpu_attention_draw_their_masks_here(monkeypatch) -> None:
    """A tiny BERT's training pass on the CPU, fp32 and bf16: every dropout mask comes from
    keep_mask (4 per layer: embeddings, attention probabilities, two residuals), none from
    torch's dropout or the fused attention kernel's."""
    from bertkit.config import BertConfig
    from bertkit.model import BertModel, attention

    calls = []
    real = D.keep_mask
    monkeypatch.setattr(D, "keep_mask", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(F, "dropout", lambda *a, **k: (_ for _ in ()).throw(AssertionError()))
    sdpa = attention.F.scaled_dot_product_attention

    def no_dropout_sdpa(*args, **kwargs):
        assert not kwargs.get("dropout_p"), "the fused kernel drew a dropout mask"
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", no_dropout_sdpa)
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16,
    )  # fmt: skip
    model = BertModel(config).train()
    ids = torch.randint(0, 50, (3, 9))
    mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4, [1] * 2 + [0] * 7])
    for autocast in (False, True):
        calls.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        out.float().sum().backward()
        assert len(calls) == 1 + 3 * config.num_hidden_layers, calls
