"""What an exported graph computes for each head: its output names (as transformers names them),
their dynamic axes, and the bertkit output dataclass a runtime rebuilds from them.

One table, read by the exporter (``onnx.py``) and by the ONNX Runtime wrapper (``runtime.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.model.outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    MultipleChoiceOutput,
    QuestionAnsweringOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")

TOKENS = {0: "batch", 1: "sequence"}
CHOICES = {0: "batch", 1: "choices", 2: "sequence"}


@dataclass(frozen=True)
class HeadGraph:
    """One head's graph interface."""

    outputs: dict[str, dict[int, str]]
    """Output name -> its dynamic axes (axis -> name), in graph order."""
    output_class: type
    """The bertkit dataclass the outputs fill (same field names)."""
    input_axes: dict[int, str]
    """Dynamic axes of every input: (batch, sequence), or (batch, choices, sequence)."""


HEADS: dict[str, HeadGraph] = {
    "BertModel": HeadGraph(
        {"last_hidden_state": TOKENS, "pooler_output": {0: "batch"}}, BaseModelOutput, TOKENS
    ),
    "BertForSequenceClassification": HeadGraph(
        {"logits": {0: "batch"}}, SequenceClassifierOutput, TOKENS
    ),
    "BertForTokenClassification": HeadGraph({"logits": TOKENS}, TokenClassifierOutput, TOKENS),
    "BertForQuestionAnswering": HeadGraph(
        {"start_logits": TOKENS, "end_logits": TOKENS}, QuestionAnsweringOutput, TOKENS
    ),
    "BertForMultipleChoice": HeadGraph(
        {"logits": {0: "batch", 1: "choices"}}, MultipleChoiceOutput, CHOICES
    ),
    "BertForMaskedLM": HeadGraph({"logits": TOKENS}, MaskedLMOutput, TOKENS),
}
"""Head class name (``bertkit.model.HEAD_CLASSES``) -> its graph interface."""
