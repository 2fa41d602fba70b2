"""Every head against a tiny random Hugging Face model of the same class, loaded through interop.

Logits and losses must agree within 1e-5 (MLM logits at the labelled positions, where bertkit
computes them), and ours -> save_pretrained -> transformers must give the same outputs again.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from bertkit.interop import load_pretrained, save_pretrained  # noqa: E402

V, H, L, A, FF, P = 101, 32, 2, 4, 37, 40
B, T, C = 3, 12, 2
HEADS = [
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertForSequenceClassification-regression",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
]


def hf_config(num_labels: int) -> transformers.BertConfig:
    return transformers.BertConfig(
        vocab_size=V,
        hidden_size=H,
        num_hidden_layers=L,
        num_attention_heads=A,
        intermediate_size=FF,
        max_position_embeddings=P,
        num_labels=num_labels,
        attn_implementation="sdpa",
    )


def make_inputs(name: str, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A padded batch (lengths 12, 9, 5) with pair segments and labels for head ``name``."""
    ids = torch.randint(1, V, (B, T), generator=gen)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids = ids * mask  # [PAD] = 0 where padded
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, 4:] = 1
    types = types * mask
    x = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if name in ("BertForPreTraining", "BertForMaskedLM"):
        labels = torch.full((B, T), -100)
        for b, t in [(0, 1), (0, 7), (1, 3), (1, 8), (2, 2)]:
            labels[b, t] = ids[b, t]
        x["labels"] = labels
        if name == "BertForPreTraining":
            x["next_sentence_label"] = torch.tensor([0, 1, 1])
    elif name == "BertForSequenceClassification":
        x["labels"] = torch.tensor([0, 2, 1])
    elif name.endswith("regression"):
        x["labels"] = torch.tensor([0.5, -1.0, 2.0])
    elif name == "BertForTokenClassification":
        x["labels"] = torch.randint(0, 3, (B, T), generator=gen).masked_fill(mask == 0, -100)
    elif name == "BertForQuestionAnswering":
        x["start_positions"] = torch.tensor([1, 2, 40])  # 40: outside the window, ignored
        x["end_positions"] = torch.tensor([3, 2, 40])
    elif name == "BertForMultipleChoice":
        x = {k: torch.stack([v, v.roll(1, 0)], dim=1) for k, v in x.items()}  # (B, C, T)
        x["labels"] = torch.tensor([1, 0, 1])
    return x


def compare(name: str, ref, ours, x: dict[str, torch.Tensor], atol: float = 1e-5) -> None:
    """Assert HF output ``ref`` equals bertkit output ``ours`` on real (non-pad) positions."""
    mask = x["attention_mask"].bool()
    close = dict(atol=atol, rtol=1e-5)
    if name == "BertModel":
        torch.testing.assert_close(
            ours.last_hidden_state[mask], ref.last_hidden_state[mask], **close
        )
        torch.testing.assert_close(ours.pooler_output, ref.pooler_output, **close)
        return
    if name in ("BertForPreTraining", "BertForMaskedLM"):
        ref_logits = ref.prediction_logits if name == "BertForPreTraining" else ref.logits
        labelled = x["labels"] != -100
        ours_logits = ours.prediction_logits if name == "BertForPreTraining" else ours.logits
        assert ours_logits.shape == (int(labelled.sum()), V)
        torch.testing.assert_close(ours_logits, ref_logits[labelled], **close)
        if name == "BertForPreTraining":
            torch.testing.assert_close(
                ours.seq_relationship_logits, ref.seq_relationship_logits, **close
            )
    elif name == "BertForQuestionAnswering":
        torch.testing.assert_close(ours.start_logits[mask], ref.start_logits[mask], **close)
        torch.testing.assert_close(ours.end_logits[mask], ref.end_logits[mask], **close)
    elif name == "BertForTokenClassification":
        torch.testing.assert_close(ours.logits[mask], ref.logits[mask], **close)
    else:
        torch.testing.assert_close(ours.logits, ref.logits, **close)
    torch.testing.assert_close(ours.loss, ref.loss, **close)


@pytest.mark.parametrize("name", HEADS)
def test_head_matches_transformers_and_round_trips(name: str, tmp_path) -> None:
    torch.manual_seed(0)
    cls_name = name.split("-")[0]
    num_labels = {"regression": 1, "BertForQuestionAnswering": 2}.get(name.split("-")[-1], 3)
    ref_model = getattr(transformers, cls_name)(hf_config(num_labels)).eval()
    with torch.no_grad():  # random head biases too, so a dropped bias cannot go unnoticed
        for n, p in ref_model.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.02)
    ref_model.save_pretrained(tmp_path / "hf")
    ours = load_pretrained(tmp_path / "hf")
    assert type(ours).__name__ == cls_name  # picked from config.json architectures
    x = make_inputs(name, torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref_out = ref_model(**x)
        compare(name, ref_out, ours(**x), x)
        compare(name, ref_out, ours(**x, unpad=False), x)  # the padded path too

    save_pretrained(ours, tmp_path / "ours")
    again, info = getattr(transformers, cls_name).from_pretrained(
        tmp_path / "ours", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    # AutoModel (a bare BertModel) finds every encoder weight; head weights are extra for it, and
    # classes built without a pooler (as in transformers) leave only its pooler uninitialised.
    _, info = transformers.AutoModel.from_pretrained(tmp_path / "ours", output_loading_info=True)
    has_pooler = ours.bert.pooler is not None if hasattr(ours, "bert") else True
    assert set(info["missing_keys"]) == (
        set() if has_pooler else {"pooler.dense.weight", "pooler.dense.bias"}
    )
    assert all(
        k.startswith(("cls.", "classifier.", "qa_outputs.")) for k in info["unexpected_keys"]
    )
    with torch.no_grad():
        compare(name, again.eval()(**x), ours(**x), x)


def test_mlm_without_labels_gives_every_position(tmp_path) -> None:
    torch.manual_seed(0)
    ref_model = transformers.BertForMaskedLM(hf_config(2)).eval()
    ref_model.save_pretrained(tmp_path)
    ours = load_pretrained(tmp_path)
    x = make_inputs("BertForMaskedLM", torch.Generator().manual_seed(2))
    x.pop("labels")
    with torch.no_grad():
        ref, out = ref_model(**x), ours(**x)
    assert out.logits.shape == (B, T, V)
    mask = x["attention_mask"].bool()
    torch.testing.assert_close(out.logits[mask], ref.logits[mask], atol=1e-5, rtol=1e-5)
