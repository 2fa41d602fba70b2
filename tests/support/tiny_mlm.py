"""A tiny random masked-LM checkpoint over a 13-word vocabulary (streamed embedding and corpus
tests): 2 layers of width 32, 32 positions, so lines of 0-40 words exercise windows."""

from __future__ import annotations

from pathlib import Path

import torch

from bertkit.config import BertConfig
from bertkit.interop import save_pretrained
from bertkit.model import BertForMaskedLM
from bertkit.tokenizer import BertTokenizer

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "big", "small", "red", "ran", ",", "."]


def tiny_mlm(root: Path, seed: int = 0) -> Path:
    (root / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n"
    )
    tok = BertTokenizer(root / "vocab.txt")
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=32,
    )
    save_pretrained(BertForMaskedLM(config), root / "model", tokenizer=tok)
    return root / "model"
