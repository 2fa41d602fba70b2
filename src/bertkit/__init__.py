"""bertkit: BERT from raw text to a trained, fine-tuned, evaluated and usable encoder.

Importing the package has no side effects; the public names load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "BertConfig": "bertkit.config",
    "BertTokenizer": "bertkit.tokenizer",
    "BertModel": "bertkit.model",
    "BertForPreTraining": "bertkit.model",
    "BertForMaskedLM": "bertkit.model",
    "BertForSequenceClassification": "bertkit.model",
    "BertForTokenClassification": "bertkit.model",
    "BertForQuestionAnswering": "bertkit.model",
    "BertForMultipleChoice": "bertkit.model",
    "load_pretrained": "bertkit.interop",
    "save_pretrained": "bertkit.interop",
    "pipeline": "bertkit.inference",
}

__all__ = [
    "BertConfig",
    "BertForMaskedLM",
    "BertForMultipleChoice",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertTokenizer",
    "__version__",
    "load_pretrained",
    "pipeline",
    "save_pretrained",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")


if TYPE_CHECKING:  # pragma: no cover
    from bertkit.config import BertConfig
    from bertkit.interop import load_pretrained, save_pretrained
    from bertkit.model import (
        BertForMaskedLM,
        BertForMultipleChoice,
        BertForPreTraining,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertModel,
    )
    from bertkit.tokenizer import BertTokenizer
