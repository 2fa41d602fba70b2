"""BertModel and heads on tiny random configs: shapes, init, unpadded == padded, learning, precision."""

from __future__ import annotations

import time

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.errors import ConfigError
from bertkit.model import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)
from bertkit.model.attention import SelfAttention

V, B, T = 97, 4, 10


def tiny(**overrides) -> BertConfig:
    base = dict(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=3,
    )
    return BertConfig(**{**base, **overrides})


def batch(gen: torch.Generator, lengths=(10, 7, 3, 9)) -> dict[str, torch.Tensor]:
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    ids = torch.randint(1, V, (len(lengths), T), generator=gen) * mask
    types = (torch.arange(T)[None, :] >= 4).long() * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def with_labels(name: str, x: dict[str, torch.Tensor], gen: torch.Generator) -> dict:
    x = dict(x)
    n = x["input_ids"].shape[0]
    mask = x["attention_mask"]
    if name in ("pretraining", "mlm"):
        pick = (torch.rand(mask.shape, generator=gen) < 0.3) & mask.bool()
        pick[:, 1] = True
        x["labels"] = torch.where(pick, x["input_ids"], torch.full_like(mask, -100))
        if name == "pretraining":
            x["next_sentence_label"] = torch.randint(0, 2, (n,), generator=gen)
    elif name == "seq":
        x["labels"] = torch.randint(0, 3, (n,), generator=gen)
    elif name == "regression":
        x["labels"] = torch.randn(n, generator=gen)
    elif name == "token":
        x["labels"] = torch.randint(0, 3, mask.shape, generator=gen).masked_fill(mask == 0, -100)
    elif name == "qa":
        x["start_positions"] = torch.randint(0, 3, (n,), generator=gen)
        x["end_positions"] = x["start_positions"] + 1
    elif name == "choice":
        x = {k: torch.stack([v, v.flip(0)], dim=1) for k, v in x.items()}  # (B, 2, T)
        x["labels"] = torch.randint(0, 2, (n,), generator=gen)
    return x


HEADS = {
    "pretraining": lambda c: BertForPreTraining(c),
    "mlm": lambda c: BertForMaskedLM(c),
    "seq": lambda c: BertForSequenceClassification(c),
    "regression": lambda c: BertForSequenceClassification(
        BertConfig(**{**c.__dict__, "num_labels": 1})
    ),
    "token": lambda c: BertForTokenClassification(c),
    "qa": lambda c: BertForQuestionAnswering(c),
    "choice": lambda c: BertForMultipleChoice(c),
}


def main_output(out) -> torch.Tensor:
    for name in ("prediction_logits", "logits", "start_logits"):
        if hasattr(out, name):
            return getattr(out, name)
    raise AssertionError(out)


def test_shapes_and_pooler() -> None:
    torch.manual_seed(0)
    model = BertModel(tiny()).eval()
    out = model(**batch(torch.Generator().manual_seed(0)))
    assert out.last_hidden_state.shape == (B, T, 32)
    assert out.pooler_output.shape == (B, 32)
    assert out.pooler_output.abs().max() <= 1.0  # tanh
    assert BertForMaskedLM(tiny()).bert.pooler is None


def test_init_follows_bert() -> None:
    torch.manual_seed(0)
    model = BertForPreTraining(tiny(hidden_size=256, intermediate_size=1024, num_attention_heads=4))
    up = model.bert.encoder.layers[0].feed_forward.up.weight
    assert abs(up.std().item() - 0.02) < 0.001 and abs(up.mean().item()) < 0.001
    assert torch.all(model.bert.encoder.layers[1].attention.qkv.bias == 0)
    assert torch.all(model.bert.embeddings.layer_norm.weight == 1)
    assert torch.all(model.mlm.bias == 0)
    assert torch.all(model.bert.embeddings.word.weight[0] == 0)  # [PAD] row


def test_config_rejects_unsupported_variants() -> None:
    with pytest.raises(ConfigError, match="divisible"):
        tiny(num_attention_heads=5)
    with pytest.raises(ConfigError, match="position_embedding_type"):
        BertModel(
            BertConfig.from_dict({**tiny().to_dict(), "position_embedding_type": "relative_key"})
        )


def test_padding_does_not_change_a_sequence() -> None:
    """A sequence alone and inside a padded batch encodes the same (the mask works)."""
    torch.manual_seed(0)
    model = BertModel(tiny()).eval()
    x = batch(torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(**x).last_hidden_state
        alone = model(**{k: v[2:3, :3] for k, v in x.items()}).last_hidden_state
        broken = model(x["input_ids"], None, x["token_type_ids"]).last_hidden_state  # no mask
    torch.testing.assert_close(full[2, :3], alone[0], atol=1e-5, rtol=1e-5)
    assert (broken[2, :3] - alone[0]).abs().max() > 1e-3  # negative control: mask matters


@pytest.mark.parametrize("name", list(HEADS))
def test_unpadded_path_equals_padded_path(name: str) -> None:
    """Same outputs (real positions), loss and gradients with and without packing the tokens."""
    _compare_unpadded_with_padded(name, (10, 7, 3, 9))


# 16 sequences: attention runs in 4 length groups (area 552 of 1600 padded)
MANY = (10, 9, 2, 2, 3, 2, 4, 2, 10, 3, 2, 5, 2, 2, 3, 6)


@pytest.mark.parametrize("name", list(HEADS))
def test_grouped_attention_equals_padded_path(name: str, monkeypatch) -> None:
    groups = []
    grouped = SelfAttention._grouped

    def counted(self, qkv, packing):
        groups.append(len(packing.groups))
        return grouped(self, qkv, packing)

    monkeypatch.setattr(SelfAttention, "_grouped", counted)
    _compare_unpadded_with_padded(name, MANY)
    assert groups and set(groups) == {4}


def test_grouped_attention_with_left_padding() -> None:
    torch.manual_seed(0)
    model = BertModel(tiny()).eval()
    lengths = torch.tensor(MANY)
    mask = (torch.arange(T)[None, :] >= T - lengths[:, None]).long()  # real tokens at the end
    ids = torch.randint(1, V, mask.shape, generator=torch.Generator().manual_seed(5)) * mask
    with torch.no_grad():
        a = model(ids, mask).last_hidden_state
        b = model(ids, mask, unpad=False).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)


def _compare_unpadded_with_padded(name: str, lengths: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = HEADS[name](tiny(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).train()
    gen = torch.Generator().manual_seed(4)
    x = with_labels(name, batch(gen, lengths), gen)
    results = []
    for unpad in (True, False):
        model.zero_grad()
        out = model(**x, unpad=unpad)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((main_output(out), out.loss.detach(), grads))
    (a, la, ga), (b, lb, gb) = results
    real = x["attention_mask"].bool()
    if a.shape[: real.dim()] == real.shape:
        a, b = a[real], b[real]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    if name == "qa":  # its loss normalises over padding positions too: see BertForQuestionAnswering
        return
    torch.testing.assert_close(la, lb, atol=1e-6, rtol=1e-5)
    assert ga.keys() == gb.keys()
    for n in ga:
        torch.testing.assert_close(ga[n], gb[n], atol=1e-5, rtol=1e-4, msg=n)


@pytest.mark.parametrize("name", list(HEADS))
def test_every_head_learns_one_batch(name: str) -> None:
    torch.manual_seed(0)
    model = HEADS[name](tiny()).train()
    gen = torch.Generator().manual_seed(5)
    x = with_labels(name, batch(gen), gen)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        loss = model(**x).loss
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert losses[-1] < 0.3 * losses[0], losses[::8]


def test_mlm_statistics_and_tied_decoder() -> None:
    torch.manual_seed(0)
    model = BertForPreTraining(tiny()).eval()
    gen = torch.Generator().manual_seed(6)
    x = with_labels("pretraining", batch(gen), gen)
    out = model(**x)
    labelled = x["labels"][x["labels"] != -100]
    assert out.mlm_count.item() == labelled.numel() == out.prediction_logits.shape[0]
    assert out.mlm_correct.item() == (out.prediction_logits.argmax(-1) == labelled).sum().item()
    torch.testing.assert_close(out.loss, out.mlm_loss + out.nsp_loss)
    assert not any("decoder" in k for k in model.state_dict())  # tied: stored once
    with torch.no_grad():
        # moves the decoder row of token 5 too (a random direction: LayerNormed h sums to ~0)
        model.bert.embeddings.word.weight[5] += torch.randn(32)
    after = model(**x).prediction_logits
    changed = (after - out.prediction_logits).abs().amax(0) > 1e-4
    assert changed[5]
    empty = dict(x, labels=torch.full_like(x["labels"], -100))
    none = model(**empty)
    assert none.mlm_count.item() == 0 and none.mlm_loss.item() == 0.0


def test_bf16_autocast_stays_close_to_fp32(bf16_path, fp32_path) -> None:
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny()).eval()
    x = batch(torch.Generator().manual_seed(7))
    with torch.no_grad():
        ref = model.bert(**x).last_hidden_state
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model.bert(**x).last_hidden_state
            logits = model(**x).logits
    assert logits.dtype == torch.bfloat16
    real = x["attention_mask"].bool()
    # bf16 keeps 8 bits of mantissa: LayerNormed activations of size ~1 agree to a few 1e-2.
    assert (low.float()[real] - ref[real]).abs().max() < 0.1
    cos = torch.nn.functional.cosine_similarity(low.float()[real], ref[real], dim=-1)
    assert cos.min() > 0.999


def test_a_regressors_score_is_fp32_under_bf16_autocast(bf16_path) -> None:
    """A one-output head's score is computed in fp32 from the bf16 encoder's pooled output:
    rounded to bf16, scores of 0.75 came out in steps of 1/256 (100 STS-like dev predictions
    took 35 values), which changed Pearson/Spearman and so the selection. The score equals the
    fp32 classifier over the same pooled output; a classifier's logits stay autocast's."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny(num_labels=1)).eval()
    x = batch(torch.Generator().manual_seed(7), lengths=(10, 7, 3, 9, 8, 5, 10, 6))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        score = model(**x).logits
        pooled = model.bert(**x).pooler_output
    assert score.dtype == torch.float32
    want = torch.nn.functional.linear(
        pooled.float(), model.classifier.weight, model.classifier.bias
    )
    # fp32 within the fp32 kernel paths' rounding (oneDNN's linear and F.linear differ by 1e-9);
    # bf16 would be ~4e-3 off (8 significant bits)
    torch.testing.assert_close(score, want, rtol=1e-5, atol=1e-7)
    assert not torch.equal(score, score.bfloat16().float())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert BertForSequenceClassification(tiny()).eval()(**x).logits.dtype == torch.bfloat16


@pytest.mark.slow
def test_torch_compile_matches_eager(fp32_path) -> None:
    """On both fp32 paths: inductor could not lower oneDNN's linear on a parameter weight (an
    InductorError where the probe picks oneDNN), so compiled code steps aside for F.linear. The
    forward, the loss and one training step's gradients match eager (which keeps its path)."""
    torch.manual_seed(0)
    model = BertForPreTraining(tiny(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    gen = torch.Generator().manual_seed(8)
    x = with_labels("pretraining", batch(gen), gen)
    compiled = torch.compile(model)
    start = time.perf_counter()
    with torch.no_grad():
        got, ref = compiled(**x), model(**x)
    torch.testing.assert_close(got.prediction_logits, ref.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.loss, ref.loss, atol=1e-5, rtol=1e-5)
    grads = []
    for m in (compiled, model):
        model.zero_grad()
        m(**x).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name in grads[1]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4, msg=name)
    assert time.perf_counter() - start < 600


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_autocast_and_unpadded_path_match_cpu(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = BertForPreTraining(tiny()).eval()
    gen = torch.Generator().manual_seed(9)
    x = with_labels("pretraining", batch(gen), gen)
    with torch.no_grad():
        ref = model(**x)
        gpu = model.cuda()
        xg = {k: v.cuda() for k, v in x.items()}
        fp32 = gpu(**xg)
        with torch.autocast("cuda", dtype=dtype):
            low = gpu(**xg)
    torch.testing.assert_close(
        fp32.prediction_logits.cpu(), ref.prediction_logits, atol=1e-4, rtol=1e-4
    )
    assert (low.prediction_logits.float().cpu() - ref.prediction_logits).abs().max() < 0.1
    assert torch.isfinite(low.loss)


@pytest.mark.parametrize("unpad", [True, False])
def test_final_positions_equal_the_full_computation(unpad: bool) -> None:
    """The last layer run on selected tokens only gives the full run's rows, pooler and grads."""
    torch.manual_seed(0)
    model = BertModel(tiny(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).train()
    x = batch(torch.Generator().manual_seed(10))
    positions = torch.tensor([0 * T + 3, 1 * T + 6, 2 * T + 1, 3 * T + 8, 0 * T + 9])
    results = []
    for selected in (True, False):
        model.zero_grad()
        out = model(**x, unpad=unpad, final_positions=positions if selected else None)
        rows = out.last_hidden_state
        if not selected:
            rows = rows.reshape(-1, rows.shape[-1])[positions]
        (rows.square().sum() + out.pooler_output.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((rows, out.pooler_output, grads))
    (a, pa, ga), (b, pb, gb) = results
    assert a.shape == (5, 32)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pa, pb, atol=1e-5, rtol=1e-5)
    for n in ga:
        torch.testing.assert_close(ga[n], gb[n], atol=1e-5, rtol=1e-4, msg=n)
    if unpad:
        with pytest.raises(ValueError, match="padding"):
            model(**x, final_positions=torch.tensor([2 * T + 5]))  # row 2 has 3 real tokens
