"""Input embeddings: word + position + segment, then LayerNorm and dropout (BERT paper, section 3)."""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config import BertConfig
from bertkit.model.dropout import Dropout


class BertEmbeddings(nn.Module):
    """Sum of learned word, absolute position and segment (token type) embeddings.

    ``forward`` works on a padded batch (B, T) -> (B, T, H), or, given ``indices`` (S,) into the
    flattened (B*T) batch, only on the S real tokens -> (S, H) (the unpadded path).
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segment = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        B, T = input_ids.shape
        limit = self.position.num_embeddings
        if limit < T:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings {limit}")
        if indices is None:
            x = self.word(input_ids)  # (B, T, H)
            if position_ids is None:
                x = x + self.position.weight[:T]  # broadcast over B, no gather needed
            else:
                x = x + self.position(position_ids)
            if token_type_ids is None:
                x = x + self.segment.weight[0]
            else:
                x = x + self.segment(token_type_ids)
        else:
            x = self.word(input_ids.reshape(-1).index_select(0, indices))  # (S, H)
            if position_ids is None:
                pos = indices % T
            else:
                pos = position_ids.expand(B, T).reshape(-1).index_select(0, indices)
            x = x + self.position(pos)
            if token_type_ids is None:
                x = x + self.segment.weight[0]
            else:
                x = x + self.segment(token_type_ids.reshape(-1).index_select(0, indices))
        return self.dropout(self.layer_norm(x))
