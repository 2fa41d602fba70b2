"""An :class:`~bertkit.inference.embedder.Embedder` saved as a model folder that
sentence-transformers, text-embeddings-inference and ``Embedder.load`` read to the same vectors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bertkit.errors import ConfigError
from bertkit.interop.pretrained import write_model_files
from bertkit.interop.sentence_folder import save_sentence_transformers_files
from bertkit.interop.sentence_prompts import kept_settings
from bertkit.model import BertModel
from bertkit.staging import staged_folder
from bertkit.tasks.base import TASK_FILE

if TYPE_CHECKING:
    from bertkit.inference.embedder import Embedder


def save_embedder(embedder: Embedder, folder: str | Path) -> None:
    """Write a model folder that embeds as ``embedder`` does: the encoder (config.json,
    model.safetensors), the tokenizer's files (vocab.txt, tokenizer.json, tokenizer_config.json)
    and the sentence-transformers files for its pooling, normalisation and ``max_length``.
    ``Embedder.load(folder)``, ``SentenceTransformer(folder)`` and text-embeddings-inference then
    give its vectors for texts within ``max_length`` tokens; longer texts they read truncated (as
    ``truncate=True`` does), where ``embedder`` may read them in windows. The files are written
    as one set: a failed save leaves ``folder`` as it was.

    Raises ConfigError for what those tools cannot compute: ``layers`` other than the last
    alone, or weights that are not a bertkit encoder in fp32/bf16 (int8, an ONNX graph).
    """
    if embedder.layers.layers and tuple(embedder.layers.layers) != (-1,):
        raise ConfigError(
            f"layers {list(embedder.layers.layers)} cannot be saved: sentence-transformers "
            "pools the last layer only"
        )
    if embedder.precision == "int8" or not isinstance(embedder.model, BertModel):
        raise ConfigError(
            f"cannot save {type(embedder.model).__name__} weights at precision "
            f"{embedder.precision}; load the folder again without int8 (or the ONNX model) and "
            "save that"
        )
    # an embedder's folder has no task file: a fine-tuned model's, saved here before, goes
    with staged_folder(folder, last="config.json", drop=[TASK_FILE]) as work:
        write_model_files(embedder.model, work, embedder.tokenizer)
        save_sentence_transformers_files(
            work,
            embedder.spec.pooling,
            embedder.spec.normalize,
            embedder.max_length,
            dimension=embedder.token_dim,
            dense=embedder.head,
            **kept_settings(embedder.folder),  # the loaded folder's similarity and prompts
        )
