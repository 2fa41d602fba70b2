"""``pipeline(task, model)``: the inference entry point as transformers users know it.

=========================  =====================  ============================================
task                       class                  model folder
=========================  =====================  ============================================
feature-extraction, embed  :class:`Embedder`      any BERT (sentence-transformers pooling read)
fill-mask                  :class:`FillMasker`    one with masked-LM head weights
text-classification        :class:`Classifier`    ``bertkit finetune glue`` / ``classify``
token-classification, ner  :class:`Tagger`        ``bertkit finetune ner`` / ``tag``
question-answering         :class:`QuestionAnswerer`  ``bertkit finetune squad``
multiple-choice            :class:`ChoiceScorer`  ``bertkit finetune swag``
=========================  =====================  ============================================

``task=None`` lets the folder decide: a fine-tuned folder (``bertkit_task.json``) gives its
family's class, a Hugging Face sequence classifier (a CrossEncoder reranker too) a
:class:`Classifier`, any other folder an :class:`Embedder`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.errors import ConfigError
from bertkit.inference.embedder import Embedder
from bertkit.inference.fill_mask import FillMasker
from bertkit.inference.task_model import (
    ChoiceScorer,
    Classifier,
    QuestionAnswerer,
    Tagger,
    TaskModel,
)
from bertkit.tasks import load_adapter
from bertkit.tasks.saved import has_task

TASKS: dict[str, type] = {
    "feature-extraction": Embedder,
    "embed": Embedder,
    "fill-mask": FillMasker,
    "text-classification": Classifier,
    "token-classification": Tagger,
    "ner": Tagger,
    "question-answering": QuestionAnswerer,
    "multiple-choice": ChoiceScorer,
}

_BY_FAMILY: dict[str, type[TaskModel]] = {
    f: cls for cls in (Classifier, Tagger, QuestionAnswerer, ChoiceScorer) for f in cls.families
}


def task_of(model: str | Path) -> str:
    """The pipeline task a folder serves when none is named."""
    if has_task(model):
        family = load_adapter(model).family
        return next(t for t, c in TASKS.items() if c is _BY_FAMILY[family])
    return "feature-extraction"


def pipeline(task: str | None, model: str | Path, **options: Any) -> Any:
    """Load ``model`` for ``task`` (see the module table); ``options`` go to the class's ``load``
    (device, precision, batch_size, and per class pooling, normalize, max_length ...)."""
    task = task or task_of(model)
    if task not in TASKS:
        raise ConfigError(f"unknown pipeline task {task!r}; expected one of {', '.join(TASKS)}")
    return TASKS[task].load(model, **options)
