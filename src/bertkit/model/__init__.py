"""The BERT encoder and its task heads (argument and output names follow Hugging Face)."""

from bertkit.model.bert import BertModel
from bertkit.model.heads import (
    HEAD_CLASSES,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertLMHeadModel,
)

__all__ = [
    "HEAD_CLASSES",
    "BertForMaskedLM",
    "BertForMultipleChoice",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertLMHeadModel",
    "BertModel",
]
