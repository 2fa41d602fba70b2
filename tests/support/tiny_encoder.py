"""The tiny random encoder of the bi-encoder tests (GradCache, margin-mse, distill-kl and their
two-process check): 2 layers of width 32 over a 50-piece vocabulary, 16 positions, seeded, so
every test and rank starts from the same weights."""

from __future__ import annotations

import torch

from bertkit.config import BertConfig
from bertkit.model import BertModel


def tiny_encoder(dropout: float = 0.0, vocab_size: int = 50) -> BertModel:
    """A freshly seeded (``torch.manual_seed(0)``) 2-layer, width-32 BertModel."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    return BertModel(config)
