"""The language-model heads over BertModel: pre-training (MLM + NSP), masked LM and left-to-right
LM; and ``HEAD_CLASSES``, every model class by name (the task heads: :mod:`bertkit.model.task_heads`).

Shape legend: B batch, T tokens, H hidden, V vocabulary, C choices, M labelled MLM positions.
Every head keeps the encoder in ``self.bert``; label -100 is ignored by every loss.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BertConfig
from bertkit.errors import ConfigError
from bertkit.model.batching import Layout
from bertkit.model.bert import BertModel, init_bert_weights
from bertkit.model.encoder import activation
from bertkit.model.kernels import Linear, linear
from bertkit.model.losses import IGNORE, decoder_cross_entropy
from bertkit.model.outputs import CausalLMOutput, MaskedLMOutput, PreTrainingOutput
from bertkit.model.task_heads import (
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)


class MaskedLMHead(nn.Module):
    """dense -> activation -> LayerNorm, then a decoder tied to the word embeddings + own bias.

    The decoder weight is passed in (the word-embedding matrix), so the tie needs no duplicate
    parameter and survives loading and ``state_dict`` round trips.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def transform(self, h: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(self.act(self.dense(h)))

    def forward(self, h: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        """h: (..., H) -> logits (..., V)."""
        return linear(self.transform(h), decoder_weight, self.bias)

    def loss(
        self, h: torch.Tensor, decoder_weight: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """h (M, H) at the labelled positions, targets (M,) -> logits (M, V), mean cross-entropy,
        correct argmaxes, M."""
        logits, loss, correct = decoder_cross_entropy(
            self.transform(h), decoder_weight, self.bias, targets
        )
        count = torch.full((), targets.numel(), dtype=torch.long, device=targets.device)
        return logits, loss, correct, count  # a fill, not a copy from host memory


def labelled_positions(
    labels: torch.Tensor, layout: Layout | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(M,) flat positions (b * T + t) whose label is not -100, their (M,) target ids, and their
    packed rows: from the collated ``layout`` when it has them (nothing read back), else found
    here (rows None)."""
    if layout is not None and layout.labelled is not None:
        return layout.labelled, layout.targets, layout.label_rows
    flat = labels.reshape(-1)
    positions = (flat != IGNORE).nonzero().squeeze(1)  # (M,)
    return positions, flat.index_select(0, positions), None


class BertForPreTraining(nn.Module):
    """Masked LM + next-sentence prediction; loss = MLM + NSP (BERT paper, section 3.1)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.mlm = MaskedLMHead(config)
        self.nsp = Linear(config.hidden_size, 2)
        init_bert_weights(self.mlm.dense, config.initializer_range)
        init_bert_weights(self.nsp, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        unpad: bool | None = None,
        layout: Layout | None = None,
    ) -> PreTrainingOutput:
        """labels (B, T): target ids at masked positions, -100 elsewhere; next_sentence_label (B,)."""
        weight = self.bert.embeddings.word.weight
        mlm_loss = correct = count = None
        if labels is None:
            out = self.bert(
                input_ids, attention_mask, token_type_ids, position_ids, unpad=unpad, layout=layout
            )
            logits = self.mlm(out.last_hidden_state, weight)  # (B, T, V)
        else:
            # Only the labelled tokens reach the last layer's feed-forward and the decoder.
            positions, targets, rows = labelled_positions(labels, layout)
            out = self.bert(
                input_ids,
                attention_mask,
                token_type_ids,
                position_ids,
                unpad,
                positions,
                layout,
                rows,
            )
            logits, mlm_loss, correct, count = self.mlm.loss(out.last_hidden_state, weight, targets)
        nsp_logits = self.nsp(out.pooler_output)  # (B, 2)
        nsp_loss = nsp_correct = None
        if next_sentence_label is not None:
            target = next_sentence_label.reshape(-1)
            nsp_loss = F.cross_entropy(nsp_logits.float(), target, ignore_index=IGNORE)
            nsp_correct = (nsp_logits.detach().argmax(-1) == target).sum()
        loss = mlm_loss + nsp_loss if mlm_loss is not None and nsp_loss is not None else None
        return PreTrainingOutput(
            prediction_logits=logits,
            seq_relationship_logits=nsp_logits,
            loss=loss,
            mlm_loss=mlm_loss,
            nsp_loss=nsp_loss,
            mlm_correct=correct,
            mlm_count=count,
            nsp_correct=nsp_correct,
        )


class BertForMaskedLM(nn.Module):
    """Masked LM alone (no pooler, no NSP)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.mlm = MaskedLMHead(config)
        init_bert_weights(self.mlm.dense, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad: bool | None = None,
        layout: Layout | None = None,
    ) -> MaskedLMOutput:
        logits, loss, correct, count = self._predict(
            input_ids, attention_mask, token_type_ids, position_ids, labels, unpad, layout
        )
        return MaskedLMOutput(logits=logits, loss=loss, mlm_correct=correct, mlm_count=count)

    def _predict(
        self, input_ids, attention_mask, token_type_ids, position_ids, labels, unpad, layout=None
    ):
        """(logits, loss, correct, count): every position's logits without labels, else the
        labelled positions' logits and their mean cross-entropy (the last three None without)."""
        weight = self.bert.embeddings.word.weight
        if labels is None:
            out = self.bert(
                input_ids, attention_mask, token_type_ids, position_ids, unpad=unpad, layout=layout
            )
            return self.mlm(out.last_hidden_state, weight), None, None, None  # (B, T, V)
        positions, targets, rows = labelled_positions(labels, layout)
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, unpad, positions, layout, rows
        )
        return self.mlm.loss(out.last_hidden_state, weight, targets)


class BertLMHeadModel(BertForMaskedLM):
    """A left-to-right language model (the paper's LTR baseline): the MLM head's transform and
    tied decoder, reading each position to predict the next token, under causal attention
    (``config.is_decoder`` must be true). Keys and shapes are Hugging Face's BertLMHeadModel's."""

    def __init__(self, config: BertConfig) -> None:
        if not config.is_decoder:
            raise ConfigError(
                "BertLMHeadModel needs a causal model (is_decoder: true in config.json)"
            )
        super().__init__(config)

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad: bool | None = None,
        layout: Layout | None = None,
    ) -> CausalLMOutput:
        following = None
        if labels is not None:
            following = torch.full_like(labels, IGNORE)
            following[:, :-1] = labels[:, 1:]  # position t is scored on the token at t + 1
        if layout is not None:  # the collated label positions are the unshifted labels'
            layout = dataclasses.replace(layout, labelled=None, targets=None, label_rows=None)
        logits, loss, correct, count = self._predict(
            input_ids, attention_mask, token_type_ids, position_ids, following, unpad, layout
        )
        return CausalLMOutput(logits=logits, loss=loss, lm_correct=correct, lm_count=count)


HEAD_CLASSES: dict[str, type[nn.Module]] = {
    cls.__name__: cls
    for cls in (
        BertModel,
        BertForPreTraining,
        BertForMaskedLM,
        BertLMHeadModel,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertForQuestionAnswering,
        BertForMultipleChoice,
    )
}
"""Our classes by name; each name equals the Hugging Face class with the same weights."""
