"""The left-to-right model (``is_decoder: true``): causal attention on every path, parity with
transformers' BertModel / BertLMHeadModel, and its round trip through config.json."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.errors import CheckpointError, ConfigError
from bertkit.interop import load_pretrained, save_pretrained
from bertkit.model import BertForSequenceClassification, BertLMHeadModel, BertModel

V, B, T = 61, 3, 12


def _config(**kw) -> BertConfig:
    return BertConfig(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=40,
        is_decoder=True,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **kw,
    )


def _batch(gen: torch.Generator) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, V, (B, T), generator=gen)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    return {"input_ids": ids * mask, "attention_mask": mask}


@pytest.mark.parametrize("path", ["padded", "unpadded", "grouped"])
def test_changing_token_t_changes_only_positions_from_t_on(path: str) -> None:
    torch.manual_seed(0)
    model = BertModel(_config()).eval()
    gen = torch.Generator().manual_seed(1)
    n = 16 if path == "grouped" else B  # grouping needs >= 8 sequences of varied lengths
    ids = torch.randint(5, V, (n, T), generator=gen)
    lengths = (
        torch.tensor([T - (i % 7) for i in range(n)]) if path != "padded" else torch.full((n,), T)
    )
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    t = 4
    changed = ids.clone()
    changed[:, t] = (changed[:, t] + 1 - 5) % (V - 5) + 5
    with torch.no_grad():
        a = model(ids * mask, mask).last_hidden_state
        b = model(changed * mask, mask).last_hidden_state
    real = mask.bool()
    before, after = real.clone(), real.clone()
    before[:, t:] = False
    after[:, :t] = False
    assert torch.equal(a[before], b[before])  # nothing before t can see token t
    assert (a[after] - b[after]).abs().amax(-1).min() > 1e-4  # everything from t on does
    bidirectional = BertModel(dataclasses.replace(_config(), is_decoder=False)).eval()
    bidirectional.load_state_dict(model.state_dict())
    with torch.no_grad():  # negative control: without the causal mask, earlier positions move
        c = bidirectional(ids * mask, mask).last_hidden_state
        d = bidirectional(changed * mask, mask).last_hidden_state
    assert (c[before] - d[before]).abs().max() > 1e-4


def test_parity_with_transformers_is_decoder(tmp_path: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=40,
        is_decoder=True,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    ref = transformers.BertLMHeadModel(cfg).eval()
    ref.save_pretrained(tmp_path / "hf")
    ours = load_pretrained(tmp_path / "hf", BertLMHeadModel)
    assert isinstance(ours, BertLMHeadModel) and ours.config.is_decoder
    batch = _batch(torch.Generator().manual_seed(2))
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    with torch.no_grad():
        want = ref(**batch, labels=labels, output_hidden_states=True)
        got_h = ours.bert(**batch).last_hidden_state
        got = ours(**batch, labels=labels)
        got_all = ours(**batch).logits
    real = batch["attention_mask"].bool()
    assert (got_h[real] - want.hidden_states[-1][real]).abs().max() <= 1e-5
    assert (got_all[real] - want.logits[real]).abs().max() <= 1e-5
    assert abs(float(got.loss) - float(want.loss)) <= 1e-5  # the shifted next-token loss
    # and back: our save loads in transformers with the same outputs
    save_pretrained(ours, tmp_path / "ours")
    cfg_json = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert cfg_json["is_decoder"] is True and cfg_json["architectures"] == ["BertLMHeadModel"]
    back = transformers.BertLMHeadModel.from_pretrained(
        tmp_path / "ours", attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        again = back(**batch).logits
    assert (again[real] - want.logits[real]).abs().max() <= 1e-5


def test_lm_head_needs_a_causal_config_and_fill_mask_refuses_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is_decoder: true"):
        BertLMHeadModel(dataclasses.replace(_config(), is_decoder=False))
    from bertkit.inference import FillMasker
    from bertkit.tokenizer import BertTokenizer

    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(V - 5)]])
        + "\n"
    )
    save_pretrained(BertLMHeadModel(_config()), tmp_path / "ltr", BertTokenizer(vocab))
    with pytest.raises(CheckpointError, match="left-to-right"):
        FillMasker.load(tmp_path / "ltr", device="cpu")
    clf = load_pretrained(tmp_path / "ltr", BertForSequenceClassification, num_labels=2)
    assert clf.config.is_decoder  # fine-tuning keeps the causal attention


def test_decoder_pooler_reads_the_last_real_token() -> None:
    torch.manual_seed(0)
    model = BertModel(_config()).eval()
    batch = _batch(torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = model(**batch)
        last = batch["attention_mask"].sum(1) - 1
        want = model.pooler(out.last_hidden_state[torch.arange(B), last])
        selected = model(**batch, final_positions=torch.zeros(0, dtype=torch.long))
    assert torch.allclose(out.pooler_output, want, atol=1e-6)
    assert torch.allclose(selected.pooler_output, want, atol=1e-5)  # the selected-rows path too
