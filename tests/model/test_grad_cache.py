"""Cached contrastive encoding (GradCache): the one-pass gradients in mini-batches, dropout
masks replayed exactly, the autocast state replayed, and a GradScaler's scale carried."""

from __future__ import annotations

import pytest
import torch

from bertkit.model import BertModel
from bertkit.model.batching import layout
from bertkit.model.contrastive import BiEncoder
from bertkit.model.grad_cache import cached_vectors, row_chunks
from support.tiny_encoder import tiny_encoder

B, G = 5, 3  # 5 examples of query, positive, one hard negative: 15 rows


def _tiny(dropout: float = 0.0) -> BertModel:
    return tiny_encoder(dropout)


def _rows() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    mask = (torch.arange(10)[None, :] < torch.randint(3, 11, (B * G, 1), generator=g)).long()
    return torch.randint(5, 50, (B * G, 10), generator=g) * mask, mask


def _gradients(model: BiEncoder, with_layout: bool = True) -> tuple[float, dict]:
    ids, mask = _rows()
    out = model(ids, mask, labels=torch.arange(B), layout=layout(mask) if with_layout else None)
    out.loss.backward()
    return float(out.loss.detach()), _grads(model)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: p.grad for n, p in model.named_parameters()}


def _assert_same(a: dict, b: dict, tol: float = 2e-6) -> None:
    """Equal to ``tol`` of each gradient's largest value (fp32 sums in another order)."""
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] is not None and b[name] is not None, name
        scale = max(float(a[name].abs().max()), 1.0)
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=tol * scale, msg=name)


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize(
    "options", [{}, {"symmetric": True}, {"matryoshka_dims": (32, 16, 8)}], ids=str
)
def test_mini_batches_give_the_one_pass_gradients(size, options):
    loss, whole = _gradients(BiEncoder(_tiny(), **options))
    for with_layout in (True, False):  # chunks cut to their longest row, or whole with the mask
        cached = BiEncoder(_tiny(), mini_batch_size=size, **options)
        cached_loss, grads = _gradients(cached, with_layout)
        assert cached_loss == pytest.approx(loss, abs=1e-6)
        _assert_same(whole, grads)


def test_one_pass_when_the_batch_fits_or_without_grad():
    ids, mask = _rows()
    model = BiEncoder(_tiny(), mini_batch_size=B * G)
    assert model(ids, mask, labels=torch.arange(B)).embeddings.grad_fn.name() != "_CachedBackward"
    with torch.no_grad():
        assert model(ids, mask, labels=torch.arange(B)).embeddings.grad_fn is None


def test_row_chunks_cut_rows_and_padding():
    ids, mask = _rows()
    chunks = row_chunks(ids, mask, None, layout(mask), 4)
    assert [c["input_ids"].shape[0] for c in chunks] == [4, 4, 4, 3]
    for k, c in enumerate(chunks):
        lengths = mask[4 * k : 4 * k + 4].sum(1)
        assert c["input_ids"].shape[1] == int(lengths.max())
        assert c["layout"].lengths == tuple(lengths.tolist())


def test_dropout_masks_are_replayed():
    """The with-grad re-encode of each chunk draws its no-grad pass's dropout masks (the RNG
    state replayed: its vectors equal the first pass's to float rounding, bit for bit on the
    default kernel paths), and the gradients are those of encoding the chunks with grad in turn
    from the same seed."""
    model = BiEncoder(_tiny(dropout=0.3), mini_batch_size=4).train()
    ids, mask = _rows()
    chunks = row_chunks(ids, mask, None, layout(mask), 4)
    seen: list[torch.Tensor] = []

    def encode(chunk):
        vectors = model.vectors(**chunk)
        seen.append(vectors.detach().clone())
        return vectors

    torch.manual_seed(7)
    vectors = cached_vectors(encode, chunks, torch.device("cpu"))
    after_forward = torch.get_rng_state()
    (vectors * torch.linspace(-1, 1, 32)).sum().backward()
    assert torch.equal(torch.get_rng_state(), after_forward)  # the replay left the stream alone
    assert len(seen) == 8
    for first, again in zip(seen[:4], seen[4:], strict=True):
        # the same masks: another mask at p=0.3 moves the vectors by O(1). Not bit for bit on
        # every kernel path: under an AVX2 cap the with-grad pass ran another kernel than the
        # no-grad one and one chunk differed by 3.7e-9 (of values up to 1.8)
        torch.testing.assert_close(again, first, rtol=0, atol=1e-6)
    assert not torch.equal(seen[0], model.vectors(**chunks[0]).detach())  # dropout is on
    cached = {n: g.clone() for n, g in _grads(model).items()}

    model.zero_grad()
    torch.manual_seed(7)
    direct = torch.cat([model.vectors(**c) for c in chunks])
    (direct * torch.linspace(-1, 1, 32)).sum().backward()
    _assert_same(_grads(model), cached)


def test_bf16_autocast_is_replayed():
    """Under CPU bf16 autocast the backward's re-encode runs in bf16 too: the gradients are
    the one-pass bf16 ones (to bf16 rounding), far from fp32's."""

    def run(size):
        model = BiEncoder(_tiny(), mini_batch_size=size)
        ids, mask = _rows()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(ids, mask, labels=torch.arange(B), layout=layout(mask))
        out.loss.backward()
        return _grads(model)

    whole, cached = run(None), run(4)
    _, fp32 = _gradients(BiEncoder(_tiny(), mini_batch_size=4))
    gap = max(float((whole[n] - cached[n]).abs().max()) for n in whole)
    gap32 = max(float((fp32[n] - cached[n]).abs().max()) for n in whole)
    assert gap < gap32 / 4, (gap, gap32)


def test_a_loss_scale_reaches_the_parameters():
    """A GradScaler scales the loss before backward; the replay carries the scaled gradient."""
    _, plain = _gradients(BiEncoder(_tiny(), mini_batch_size=4))
    model = BiEncoder(_tiny(), mini_batch_size=4)
    ids, mask = _rows()
    (model(ids, mask, labels=torch.arange(B)).loss * 1024.0).backward()
    _assert_same({n: g * 1024.0 for n, g in plain.items()}, _grads(model))


@pytest.mark.parametrize("size", [2, 4])
def test_splade_mini_batches_give_the_one_pass_gradients(size):
    """The SPLADE encoder's vectors (checkpointed MLM slices) and its regularised loss through
    GradCache: the one-pass loss and gradients."""
    from bertkit.config import BertConfig
    from bertkit.model import BertForMaskedLM
    from bertkit.model.pooling import SpladeSpec
    from bertkit.model.splade import SpladeEncoder

    def model(mini: int | None) -> SpladeEncoder:
        torch.manual_seed(0)
        config = BertConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        mlm = BertForMaskedLM(config)
        with torch.no_grad():
            mlm.mlm.bias.normal_()
        weights = {"query_regularizer_weight": 0.1, "document_regularizer_weight": 0.05}
        return SpladeEncoder(mlm, SpladeSpec(), mini_batch_size=mini, **weights)

    loss, whole = _gradients(model(None))
    cached_loss, grads = _gradients(model(size))
    assert cached_loss == pytest.approx(loss, abs=1e-6)
    _assert_same(whole, grads)
