"""Named outputs of BertModel and every head (one dataclass each; field names follow Hugging Face).

Shapes: B batch, T tokens, H hidden size, V vocabulary, C choices, M labelled (masked) positions.
Optional fields are None when the inputs that produce them were not given.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BaseModelOutput:
    """Output of BertModel.

    last_hidden_state: (B, T, H). Values at padding positions carry no meaning (the unpadded path
        leaves them at zero, the padded path computes them); mask them out before pooling.
    pooler_output: (B, H) tanh(dense([CLS])), or None for a model built without a pooler.
    """

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    """With ``output_hidden_states``: the embeddings' output then every layer's, each (B, T, H)
    (Hugging Face's order: ``hidden_states[-1]`` is ``last_hidden_state``)."""


@dataclass
class MaskedLMOutput:
    """Output of BertForMaskedLM.

    Without labels, logits are (B, T, V): every position.
    With labels, logits are (M, V): only the M positions whose label is not -100, in row-major
    (batch, then token) order, which is what the loss needs and saves the vocabulary projection at
    every other position. loss is the mean cross-entropy over those M positions (0 when M == 0);
    mlm_correct counts those whose argmax equals the label and mlm_count is M (both 0-d long
    tensors, detached, so logging accuracy costs no extra pass).
    """

    logits: torch.Tensor
    loss: torch.Tensor | None = None
    mlm_correct: torch.Tensor | None = None
    mlm_count: torch.Tensor | None = None


@dataclass
class CausalLMOutput:
    """Output of BertLMHeadModel (next-token prediction under causal attention).

    Without labels, logits are (B, T, V): position t scores the token at t + 1. With labels
    (aligned with input_ids, -100 ignored), logits are (M, V) for the M positions whose next
    token is labelled, loss their mean cross-entropy (Hugging Face's shifted loss), lm_correct
    and lm_count the correct argmaxes and M.
    """

    logits: torch.Tensor
    loss: torch.Tensor | None = None
    lm_correct: torch.Tensor | None = None
    lm_count: torch.Tensor | None = None


@dataclass
class PreTrainingOutput:
    """Output of BertForPreTraining.

    prediction_logits follow the MaskedLMOutput contract: (B, T, V) without labels, (M, V) at the
    labelled positions with labels. seq_relationship_logits are (B, 2) (0 = B follows A).
    loss = mlm_loss + nsp_loss when both labels and next_sentence_label are given; mlm_loss /
    nsp_loss are set when their own labels are given. mlm_correct / mlm_count / nsp_correct are
    detached 0-d long tensors for logging accuracies.
    """

    prediction_logits: torch.Tensor
    seq_relationship_logits: torch.Tensor
    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    mlm_correct: torch.Tensor | None = None
    mlm_count: torch.Tensor | None = None
    nsp_correct: torch.Tensor | None = None


@dataclass
class SequenceClassifierOutput:
    """logits (B, num_labels); loss is cross-entropy, or MSE when num_labels == 1 (regression)."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


@dataclass
class TokenClassifierOutput:
    """logits (B, T, num_labels); loss is cross-entropy over positions whose label is not -100."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


@dataclass
class QuestionAnsweringOutput:
    """start_logits and end_logits (B, T); loss is the mean of the start and end cross-entropies.

    Positions outside [0, T) are clamped to T and ignored, as in the reference implementations.
    """

    start_logits: torch.Tensor
    end_logits: torch.Tensor
    loss: torch.Tensor | None = None


@dataclass
class MultipleChoiceOutput:
    """logits (B, C): one score per choice; loss is cross-entropy over the choices."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


@dataclass
class EmbeddingOutput:
    """embeddings (B, H) pooled, not normalised (float32); loss the contrastive loss when the
    batch held training groups (:class:`~bertkit.model.contrastive.BiEncoder`)."""

    embeddings: torch.Tensor
    loss: torch.Tensor | None = None
