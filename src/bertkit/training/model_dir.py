"""Writing a fine-tuned model's folder: the selected model, its tokenizer and its task, renamed
into place file by file so that a crash never leaves a half-written file behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from bertkit.io import fsync_dir, make_folder
from bertkit.tasks.base import TASK_FILE, TaskAdapter
from bertkit.tokenizer.protocol import Tokenizer


def save_model_dir(
    model: torch.nn.Module, adapter: TaskAdapter, tokenizer: Tokenizer, output: Path
) -> None:
    """Write model, vocabulary and ``bertkit_task.json`` into ``output``.

    A bi-encoder is written as a sentence-transformers folder instead (the encoder with its
    pooler, the pooling and normalisation files, and ``bertkit_embedding.json`` naming the
    Matryoshka sizes it was trained for), with no ``bertkit_task.json``.

    Everything is first written to a hidden sibling folder, then each file is renamed into
    ``output`` (each rename is atomic), so a crash never leaves a half-written file there.
    """
    from bertkit.interop import save_pretrained
    from bertkit.interop.sentence_folder import (
        save_embedding_info,
        save_sentence_transformers_files,
    )
    from bertkit.model.contrastive import BiEncoder

    make_folder(output)
    tmp = Path(tempfile.mkdtemp(prefix=".model-tmp-", dir=output))
    try:
        if isinstance(model, BiEncoder):
            a: Any = adapter  # an EmbeddingAdapter (tasks may not be imported for the type here)
            with model.whole_encoder() as encoder:
                save_pretrained(encoder, tmp, tokenizer)
            save_sentence_transformers_files(tmp, a.pooling, a.normalize, a.max_seq_length)
            save_embedding_info(tmp, a.matryoshka_dims)
            (output / TASK_FILE).unlink(missing_ok=True)  # a sentence-transformers folder has none
        else:
            save_pretrained(model, tmp, tokenizer)
            adapter.save(tmp)
        for sub in (p for p in tmp.iterdir() if p.is_dir()):  # 1_Pooling/, 2_Normalize/
            (output / sub.name).mkdir(exist_ok=True)
            for f in sub.iterdir():
                os.replace(f, output / sub.name / f.name)
        names = sorted(p.name for p in tmp.iterdir() if p.is_file())
        # config.json last: a folder whose config.json is new has every other new file too
        for name in sorted(names, key=lambda n: n == "config.json"):
            os.replace(tmp / name, output / name)
        fsync_dir(output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
