"""The bi-encoder's loss against sentence-transformers' losses, and the pooler set aside."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit.config import BertConfig
from bertkit.model import BertModel
from bertkit.model.contrastive import BiEncoder, ranking_loss


def _reference(q: torch.Tensor, c: torch.Tensor, scale: float, symmetric: bool) -> torch.Tensor:
    util = pytest.importorskip("sentence_transformers.util")
    s = util.cos_sim(q, c) * scale
    target = torch.arange(q.shape[0])
    loss = F.cross_entropy(s, target)
    return (loss + F.cross_entropy(s[:, : q.shape[0]].T, target)) / 2 if symmetric else loss


@pytest.mark.parametrize("symmetric", [False, True])
def test_ranking_loss_is_multiple_negatives_ranking_loss(symmetric):
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(5, 16, generator=g), torch.randn(15, 16, generator=g)
    assert ranking_loss(q, c, 20.0, symmetric) == pytest.approx(
        float(_reference(q, c, 20.0, symmetric)), rel=1e-6
    )
    assert ranking_loss(q, c, 5.0) != pytest.approx(float(ranking_loss(q, c, 20.0)))


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_ranking_loss_is_sentence_transformers_loss_by_either_similarity(similarity):
    """sentence-transformers' own MultipleNegativesRankingLoss on the same embeddings (queries,
    positives, a column of hard negatives): cos_sim at scale 20, or dot_score at scale 1 (its
    advice for the dot product); the other similarity gives another loss (negative control)."""
    st = pytest.importorskip("sentence_transformers")
    g = torch.Generator().manual_seed(2)
    q, c = torch.randn(4, 16, generator=g) * 2, torch.randn(8, 16, generator=g) * 2
    cosine = similarity == "cosine"
    scale = 20.0 if cosine else 1.0
    fn = st.util.cos_sim if cosine else st.util.dot_score
    theirs = st.sentence_transformer.losses.MultipleNegativesRankingLoss(None, scale, fn)
    reference = theirs.compute_loss_from_embeddings([q, *c.split(4)], None)
    torch.testing.assert_close(ranking_loss(q, c, scale, cosine=cosine), reference)
    assert not torch.allclose(ranking_loss(q, c, scale, cosine=not cosine), reference)


def _tiny() -> BertModel:
    torch.manual_seed(0)
    return BertModel(
        BertConfig(
            vocab_size=50,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=16,
        )
    )


def _batch(groups: int, rows: int = 2):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 50, (groups * rows, 8), generator=g)
    mask = torch.ones_like(ids)
    mask[1::3, 5:] = 0
    return ids, mask


def test_bi_encoder_loss_matryoshka_and_gradients():
    ids, mask = _batch(3, 3)  # 3 queries, 3 positives, 3 negatives
    plain = BiEncoder(_tiny()).eval()
    out = plain(ids, mask, labels=torch.arange(3))
    v = out.embeddings
    assert v.shape == (9, 32)
    assert float(out.loss.detach()) == pytest.approx(
        float(ranking_loss(v[:3], v[3:]).detach()), rel=1e-6
    )
    nested = BiEncoder(_tiny(), matryoshka_dims=(32, 8)).eval()
    got = nested(ids, mask, labels=torch.arange(3)).loss
    assert float(got.detach()) == pytest.approx(
        float((ranking_loss(v[:3], v[3:]) + ranking_loss(v[:3, :8], v[3:, :8])).detach()), rel=1e-6
    )
    got.backward()
    grads = [p.grad for p in nested.parameters()]
    assert all(g is not None for g in grads)  # every parameter trains (DDP needs it)
    assert nested(ids, mask).loss is None


def test_a_dot_product_bi_encoder_scores_its_batch_by_dot_products():
    ids, mask = _batch(3, 3)
    model = BiEncoder(_tiny(), scale=1.0, cosine=False).eval()
    with torch.no_grad():
        out = model(ids, mask, labels=torch.arange(3))
    v = out.embeddings
    dot = ranking_loss(v[:3], v[3:], 1.0, cosine=False)
    assert float(out.loss) == pytest.approx(float(dot), rel=1e-6)
    assert float(out.loss) != pytest.approx(float(ranking_loss(v[:3], v[3:], 1.0)), rel=1e-3)


def test_pooler_is_set_aside_and_put_back_for_saving():
    bert = _tiny()
    pooler = bert.pooler
    model = BiEncoder(bert, "cls").eval()
    assert bert.pooler is None and not any(
        n.startswith("bert.pooler") for n, _ in model.named_parameters()
    )
    with model.whole_encoder() as enc:
        assert enc.pooler is pooler and "pooler.dense.weight" in enc.state_dict()
    assert bert.pooler is None
    ids, mask = _batch(2)
    cls = model(ids, mask).embeddings
    assert torch.allclose(cls, bert(ids, mask).last_hidden_state[:, 0])
