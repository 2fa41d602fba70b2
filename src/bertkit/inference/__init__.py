"""Inference: load a folder, batch by length, run the unpadded encoder at the chosen precision.

- :func:`pipeline` (``pipeline.py``): one entry point by task name.
- :class:`Embedder` (``embedder.py``; texts, or :class:`TokenIds` as they are),
  :class:`FillMasker` (``fill_mask.py``), :class:`SparseEmbedder` (``sparse.py``: SPLADE
  vectors from the masked-LM head).
- :class:`TaskModel` and its family classes :class:`Classifier`, :class:`Tagger`,
  :class:`QuestionAnswerer`, :class:`ChoiceScorer` (``task_model.py``).
- :func:`predict_rows` (``runner.py``): the forward loop shared with dev scoring in fine-tuning.

The CLI's ``embed``, ``fill-mask``, ``predict`` and ``evaluate``, the quickstart and the server
are thin layers over these.
"""

from bertkit.inference.embedder import Embedder, PoolingSpec
from bertkit.inference.fill_mask import FillMasker
from bertkit.inference.pipeline import TASKS, pipeline, task_of
from bertkit.inference.runner import predict_rows, to_torch
from bertkit.inference.sparse import SparseEmbedder, SparseVector
from bertkit.inference.task_model import (
    ChoiceScorer,
    Classifier,
    QuestionAnswerer,
    Tagger,
    TaskModel,
)
from bertkit.inference.token_ids import TokenIds

__all__ = [
    "TASKS",
    "ChoiceScorer",
    "Classifier",
    "Embedder",
    "FillMasker",
    "PoolingSpec",
    "QuestionAnswerer",
    "SparseEmbedder",
    "SparseVector",
    "Tagger",
    "TaskModel",
    "TokenIds",
    "pipeline",
    "predict_rows",
    "task_of",
    "to_torch",
]
