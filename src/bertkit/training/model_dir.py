"""Writing a fine-tuned model's folder: the selected model, its tokenizer and its task, written
as one set (:func:`bertkit.staging.staged_folder`) so that a crash never leaves a half-written
file, nor a folder that loads with some files of one model and some of another."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bertkit.staging import staged_folder
from bertkit.tasks.base import TASK_FILE, TaskAdapter
from bertkit.tokenizer.protocol import Tokenizer

METRICS_FILE = "metrics.json"
"""The fine-tuning job's record (every run, the selection) beside its selected model, written
once the selection ends (:mod:`bertkit.recipes.finetune`)."""


def save_model_dir(
    model: torch.nn.Module, adapter: TaskAdapter, tokenizer: Tokenizer, output: Path
) -> None:
    """Write model, vocabulary and ``bertkit_task.json`` into ``output``.

    A bi-encoder is written as a sentence-transformers folder instead (the encoder with its
    pooler, the pooling and normalisation files, and ``bertkit_embedding.json`` naming the
    Matryoshka sizes it was trained for), with no ``bertkit_task.json``; a SPLADE encoder as a
    ``SparseEncoder`` folder (the masked-LM model, ``MLMTransformer`` -> ``SpladePooling``).

    Everything is first written to a hidden work folder, then each file is renamed into
    ``output``, config.json last; the old config.json is removed before the first rename, so a
    crash part-way leaves a folder that is refused (no config.json), never one that loads a mix
    of the previous model and this one. A failure before the renames changes nothing.

    :data:`METRICS_FILE` goes with the old config.json: it describes the previous job's model, and
    this job writes its own only when its selection ends, so a job that stops in between (a
    crash, a full disk, a kill) leaves its model without one, never beside the last job's.
    """
    from bertkit.interop.pretrained import write_model_files
    from bertkit.interop.sentence_folder import (
        EMBEDDING_INFO,
        POOLING_DIR,
        SENTENCE_LAYOUT,
        SPLADE_DIR,
        save_embedding_info,
        save_sentence_transformers_files,
        save_sparse_encoder_files,
    )
    from bertkit.model.contrastive import BiEncoder
    from bertkit.model.pooling import SpladeSpec
    from bertkit.model.splade import SpladeEncoder

    # a sentence-transformers folder has no task file, and a task's folder no sentence-
    # transformers files: what the other layout saved here before goes with the old config,
    # and so does the old job's metrics.json (a dense folder's pooling files, a sparse one's)
    if isinstance(model, SpladeEncoder):
        drop = [TASK_FILE, EMBEDDING_INFO, f"{POOLING_DIR}/config.json"]
    elif isinstance(model, BiEncoder):
        drop = [TASK_FILE, f"{SPLADE_DIR}/config.json"]
    else:
        drop = list(SENTENCE_LAYOUT)
    with staged_folder(output, last="config.json", drop=[*drop, METRICS_FILE]) as tmp:
        if isinstance(model, SpladeEncoder):
            s: Any = adapter  # a SparseAdapter
            with model.whole_encoder() as masked_lm:
                write_model_files(masked_lm, tmp, tokenizer)
            spec = SpladeSpec(s.pooling_strategy, s.activation_function)
            save_sparse_encoder_files(tmp, spec, s.max_seq_length, prompts=s.prompts)
        elif isinstance(model, BiEncoder):
            a: Any = adapter  # an EmbeddingAdapter (tasks may not be imported for the type here)
            with model.whole_encoder() as encoder:
                write_model_files(encoder, tmp, tokenizer)
            save_sentence_transformers_files(
                tmp,
                a.pooling,
                a.normalize,
                a.max_seq_length,
                similarity=a.similarity,
                prompts=a.prompts,
            )
            save_embedding_info(tmp, a.matryoshka_dims)
        else:
            write_model_files(model, tmp, tokenizer)
            adapter.save(tmp)
