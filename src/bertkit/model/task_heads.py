"""Task heads over BertModel: sequence classification and regression, token classification,
question answering (span start/end) and multiple choice.

Shape legend: B batch, T tokens, H hidden, C choices. Every head keeps the encoder in
``self.bert``; label -100 is ignored by every loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import BertConfig
from bertkit.model.batching import Layout
from bertkit.model.bert import BertModel, init_bert_weights
from bertkit.model.dropout import Dropout
from bertkit.model.group_losses import group_loss
from bertkit.model.kernels import Linear
from bertkit.model.losses import IGNORE
from bertkit.model.outputs import (
    MultipleChoiceOutput,
    QuestionAnsweringOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)


def _pooler_only(input_ids: torch.Tensor) -> torch.Tensor:
    """``final_positions`` that select no token: BertModel then finishes [CLS] alone (for the
    pooler), and ``last_hidden_state`` is empty."""
    return torch.zeros(0, dtype=torch.long, device=input_ids.device)


def _classifier_dropout(config: BertConfig) -> Dropout:
    p = config.classifier_dropout
    return Dropout(config.hidden_dropout_prob if p is None else p)


class BertForSequenceClassification(nn.Module):
    """A linear classifier over the pooled [CLS] output; num_labels == 1 is regression (MSE).

    With num_labels > 1, integer labels give cross-entropy and float labels (B, num_labels)
    multi-label binary cross-entropy, unless config.problem_type says otherwise.

    ``group_loss`` (set by whoever trains it, not saved: a rerank loss of
    :mod:`bertkit.model.group_losses`) makes the loss a listwise one over groups of rows, with
    ``labels`` (B, G) for the B * G rows, group after group.
    """

    group_loss: str | None = None

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.num_labels = config.num_labels
        self.bert = BertModel(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = Linear(config.hidden_size, config.num_labels)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad: bool | None = None,
        layout: Layout | None = None,
    ) -> SequenceClassifierOutput:
        # The head reads [CLS] only: the last layer runs its feed-forward on [CLS] alone.
        none = _pooler_only(input_ids)
        out = self.bert(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            unpad,
            none,
            layout,
            none if layout is not None else None,
        )
        logits = self._scores(self.dropout(out.pooler_output))  # (B, num_labels)
        loss = None
        if labels is not None and self.group_loss is not None:
            loss = group_loss(self.group_loss, logits, labels)
        elif labels is not None:
            kind = self.config.problem_type
            if kind is None:
                if self.num_labels == 1:
                    kind = "regression"
                elif labels.dtype in (torch.long, torch.int):
                    kind = "single_label_classification"
                else:
                    kind = "multi_label_classification"
            if kind == "regression":
                loss = F.mse_loss(logits.float().reshape(-1), labels.float().reshape(-1))
            elif kind == "single_label_classification":
                loss = F.cross_entropy(
                    logits.float(), labels.reshape(-1).long(), ignore_index=IGNORE
                )
            else:
                loss = F.binary_cross_entropy_with_logits(logits.float(), labels.float())
        return SequenceClassifierOutput(logits=logits, loss=loss)

    def _scores(self, pooled: torch.Tensor) -> torch.Tensor:
        """The classifier over ``pooled`` (B, H); a regressor's one score is computed in fp32
        even under autocast. bf16 keeps 8 significant bits: STS-B scores in [2, 4) would come
        out in steps of 1/64, and 100 distinct fp32 predictions became 35 values, so Pearson and
        Spearman (the selection metric) changed with the precision. The matmul is H x 1."""
        device = pooled.device.type
        if self.num_labels != 1 or not torch.is_autocast_enabled(device):
            return self.classifier(pooled)
        with torch.autocast(device, enabled=False):
            return self.classifier(pooled.float())


class BertForTokenClassification(nn.Module):
    """A linear classifier over every token's final hidden state (e.g. NER tags)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = _classifier_dropout(config)
        self.classifier = Linear(config.hidden_size, config.num_labels)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad: bool | None = None,
        layout: Layout | None = None,
    ) -> TokenClassifierOutput:
        """labels (B, T), -100 on padding, special tokens and non-first word pieces."""
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, unpad=unpad, layout=layout
        )
        logits = self.classifier(self.dropout(out.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.float().reshape(-1, self.num_labels), labels.reshape(-1), ignore_index=IGNORE
            )
        return TokenClassifierOutput(logits=logits, loss=loss)


class BertForQuestionAnswering(nn.Module):
    """Span extraction: one (H x 2) projection gives start and end scores for every token.

    Its two columns are the paper's start vector S and end vector E (section 4.2).
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa = Linear(config.hidden_size, 2)
        init_bert_weights(self.qa, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        unpad: bool | None = None,
        layout: Layout | None = None,
    ) -> QuestionAnsweringOutput:
        """start_positions, end_positions (B,): token indices of the answer span.

        The span loss normalises over all T positions, padding included, as transformers and
        Google's run_squad do; padding positions then need real hidden states, so with positions
        given the padded path is the default (unpad=None -> False). Inference unpads.
        """
        if unpad is None and start_positions is not None:
            unpad = False
        out = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, unpad=unpad, layout=layout
        )
        logits = self.qa(out.last_hidden_state)  # (B, T, 2)
        start_logits, end_logits = logits.unbind(-1)  # 2 x (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            T = start_logits.shape[1]
            # A position outside the window (answer truncated away) is ignored.
            start = start_positions.reshape(-1).clamp(0, T)
            end = end_positions.reshape(-1).clamp(0, T)
            loss = (
                F.cross_entropy(start_logits.float(), start, ignore_index=T)
                + F.cross_entropy(end_logits.float(), end, ignore_index=T)
            ) / 2
        return QuestionAnsweringOutput(
            start_logits=start_logits.contiguous(), end_logits=end_logits.contiguous(), loss=loss
        )


class BertForMultipleChoice(nn.Module):
    """Scores C candidate continuations (e.g. SWAG) with one linear unit over each pooled output."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = Linear(config.hidden_size, 1)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad: bool | None = None,
        layout: Layout | None = None,
    ) -> MultipleChoiceOutput:
        """Inputs (B, C, T), one row per choice; labels (B,) index of the right choice."""
        B, C, T = input_ids.shape

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(B * C, T)

        out = self.bert(
            flat(input_ids),
            flat(attention_mask),
            flat(token_type_ids),
            flat(position_ids),
            unpad,
            _pooler_only(input_ids),  # the last layer computes [CLS] only
            layout,  # of the flattened (B * C, T) rows
            _pooler_only(input_ids) if layout is not None else None,
        )
        logits = self.classifier(self.dropout(out.pooler_output)).reshape(B, C)  # (B, C)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float(), labels.reshape(-1), ignore_index=IGNORE)
        return MultipleChoiceOutput(logits=logits, loss=loss)
