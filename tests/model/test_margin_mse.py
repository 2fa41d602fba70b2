"""MarginMSE distillation (``BiEncoder(loss="margin-mse")``): the loss on hand-made vectors,
the same number as sentence-transformers' ``MarginMSELoss`` on the same embeddings, the cosine
variant of a normalising model, and the GradCache pass giving the one-pass gradients."""

from __future__ import annotations

import pytest
import torch

from bertkit.model.contrastive import BiEncoder, margin_mse_loss
from support.tiny_encoder import tiny_encoder


def test_the_loss_on_hand_made_vectors() -> None:
    q = torch.tensor([[1.0, 0.0]])
    p = torch.tensor([[0.5, 0.5]])
    n = torch.tensor([[[0.0, 1.0]], [[1.0, 1.0]]])  # (N=2, B=1, H=2)
    teacher = torch.tensor([[0.9, 0.2, 0.4]])
    # student margins 0.5 - 0 = 0.5 and 0.5 - 1 = -0.5; teacher's 0.7 and 0.5
    assert float(margin_mse_loss(q, p, n, teacher)) == pytest.approx((0.2**2 + 1.0**2) / 2)
    # cosine: s(q, p) = 1/sqrt(2), s(q, n1) = 0, s(q, n2) = 1/sqrt(2)
    r = 2**-0.5
    expected = ((r - 0.7) ** 2 + (0.0 - 0.5) ** 2) / 2
    assert float(margin_mse_loss(q, p, n, teacher, cosine=True)) == pytest.approx(expected)


@pytest.mark.parametrize("negatives", [1, 3])
def test_the_same_loss_as_sentence_transformers(negatives: int) -> None:
    st = pytest.importorskip("sentence_transformers")
    g = torch.Generator().manual_seed(0)
    b, h = 4, 8
    q, p = torch.randn(b, h, generator=g), torch.randn(b, h, generator=g)
    n = torch.randn(negatives, b, h, generator=g)
    teacher = torch.rand(b, 1 + negatives, generator=g) * 10
    loss = st.sentence_transformer.losses.MarginMSELoss.__new__(
        st.sentence_transformer.losses.MarginMSELoss
    )
    torch.nn.Module.__init__(loss)
    loss.similarity_fct = st.util.pairwise_dot_score
    loss.loss_fct = torch.nn.MSELoss()
    reference = loss.compute_loss_from_embeddings([q, p, *n], teacher)
    torch.testing.assert_close(margin_mse_loss(q, p, n, teacher), reference)
    loss.similarity_fct = st.util.pairwise_cos_sim
    reference = loss.compute_loss_from_embeddings([q, p, *n], teacher)
    torch.testing.assert_close(margin_mse_loss(q, p, n, teacher, cosine=True), reference)
    # the teacher's margins are the target (a shift of all its scores changes nothing), and
    # each negative's own score counts (negative control: swapped scores give another loss)
    torch.testing.assert_close(
        margin_mse_loss(q, p, n, teacher + 3.0), margin_mse_loss(q, p, n, teacher)
    )
    swapped = torch.cat([teacher[:, :1], teacher[:, 1:].flip(1)], dim=1)
    if negatives > 1:
        assert float(margin_mse_loss(q, p, n, swapped)) != pytest.approx(
            float(margin_mse_loss(q, p, n, teacher))
        )


B, G = 3, 4  # 3 examples of query, positive and two negatives: 12 rows


def _model(size: int | None, normalize: bool = False) -> BiEncoder:
    return BiEncoder(tiny_encoder(), mini_batch_size=size, loss="margin-mse", cosine=normalize)


def _step(model: BiEncoder) -> tuple[float, dict]:
    g = torch.Generator().manual_seed(1)
    mask = (torch.arange(10)[None, :] < torch.randint(3, 11, (B * G, 1), generator=g)).long()
    ids = torch.randint(5, 50, (B * G, 10), generator=g) * mask
    teacher = torch.rand(B, G - 1, generator=g) * 5
    out = model(ids, mask, labels=torch.arange(B), teacher_scores=teacher)
    out.loss.backward()
    # the loss is the one of its vectors, laid out query, positive, negative columns
    v = out.embeddings.detach()
    n = v[2 * B :].reshape(G - 2, B, -1)
    direct = margin_mse_loss(v[:B], v[B : 2 * B], n, teacher, model.cosine)
    torch.testing.assert_close(out.loss.detach(), direct)
    return float(out.loss.detach()), {k: p.grad for k, p in model.named_parameters()}


@pytest.mark.parametrize("normalize", [False, True])
def test_mini_batches_give_the_one_pass_gradients(normalize: bool) -> None:
    loss, grads = _step(_model(None, normalize))
    cached_loss, cached = _step(_model(5, normalize))
    assert cached_loss == pytest.approx(loss, rel=1e-6)
    for name, grad in grads.items():
        assert grad is not None and cached[name] is not None, name
        scale = max(float(grad.abs().max()), 1.0)
        torch.testing.assert_close(cached[name], grad, rtol=0, atol=2e-6 * scale, msg=name)


def test_no_teacher_scores_is_an_error() -> None:
    model = _model(None)
    ids = torch.ones(B * G, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="teacher"):
        model(ids, torch.ones_like(ids), labels=torch.arange(B))
