"""What a sentence-transformers start folder brings to a fine-tuning job
(:func:`bertkit.recipes.finetune.run_finetune`), as sentence-transformers' own ``fit`` keeps a
model's modules: the task settings left unset (pooling, Normalize, a dot ``similarity_fn_name``,
``max_seq_length``, prompts, SPLADE pooling), its Dense modules after the pooling, and the
prompts, prompt settings and a distance ``similarity_fn_name`` the saved folder carries again.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from bertkit.evaluation.pairs import DISTANCES
from bertkit.interop.pretrained import load_config
from bertkit.interop.sentence_dense import dense_head
from bertkit.interop.sentence_folder import sentence_transformers_spec, similarity_of, splade_spec
from bertkit.interop.sentence_prompts import check_prompt, kept_settings, task_prompt
from bertkit.tasks import TaskSettings
from bertkit.tasks.base import TaskAdapter
from bertkit.tasks.embedding import EmbeddingAdapter


def with_folder_settings(task: TaskSettings, model: str | Path) -> TaskSettings:
    """An embeddings or sparse task's unset settings (None) filled in from a sentence-transformers
    model folder, as sentence-transformers' own fine-tuning keeps the model's modules: its
    "query" and "document" prompts (an e5-style model keeps the prefixes it was trained with, in
    training, in the dev search and in the folder it saves) and its ``max_seq_length``; an
    embeddings task's pooling, Normalize and a dot ``similarity_fn_name`` (kept for a model that
    does not normalise), a sparse task's SPLADE pooling and activation."""
    if task.family not in ("embeddings", "sparse"):
        return task
    spec = sentence_transformers_spec(model) if Path(model).is_dir() else None
    if spec is not None and spec.max_length and task.max_seq_length is None:  # MiniLM: 256
        limit = load_config(Path(model)).max_position_embeddings  # a folder may say more
        task = replace(task, max_seq_length=min(spec.max_length, limit))
    if task.family == "embeddings" and spec is not None:  # else build_task's defaults
        normalize = spec.normalize if task.normalize is None else task.normalize
        # a dot-product folder stays one; its "cosine" may be only sentence-transformers' default
        declared = "dot" if similarity_of(model) == "dot" and not normalize else None
        task = replace(
            task,
            pooling=task.pooling or spec.pooling,
            normalize=normalize,
            similarity_fn_name=task.similarity_fn_name or declared,
        )
    if task.family == "sparse":  # a SparseEncoder folder keeps its SPLADE pooling unless told
        splade = splade_spec(model) if Path(model).is_dir() else None
        task = replace(
            task,
            pooling_strategy=task.pooling_strategy
            or (splade.pooling_strategy if splade else "max"),
            activation_function=(
                task.activation_function or (splade.activation_function if splade else "relu")
            ),
        )
    folder = model if Path(model).is_dir() else None
    return replace(
        task,
        query_prompt=task_prompt(model, "query")
        if task.query_prompt is None
        else check_prompt(folder, task.query_prompt),
        document_prompt=(
            task_prompt(model, "document")
            if task.document_prompt is None
            else check_prompt(folder, task.document_prompt)
        ),
    )


def folder_dense_head(model: str | Path, width: int, allow_pickle: bool) -> torch.nn.Module | None:
    """A start folder's Dense modules after the pooling (LaBSE's projection), trained with the
    encoder and saved again, as sentence-transformers' ``fit`` trains every module; None without
    them. A ``Dropout`` among or after them (before Normalize) drops values in training, as in
    ``fit``, and is saved again."""
    spec = sentence_transformers_spec(model) if Path(model).is_dir() else None
    if spec is None or not spec.dense:
        return None
    return dense_head(spec.dense, width, allow_pickle).train()


def keep_folder_prompts(adapter: TaskAdapter, model: str | Path) -> None:
    """An embeddings or sparse model fine-tuned from a sentence-transformers folder saves, besides
    its query and document prompts, the folder's other named prompts, its default prompt name
    and a Pooling's ``include_prompt: false``, as sentence-transformers' ``save`` after ``fit``
    does (``encode`` on the fine-tuned folder puts the same default prompt before a text); and
    its euclidean or manhattan ``similarity_fn_name`` unless the job names a similarity
    (``fit`` keeps a model's similarity; its ranking loss still scores by cosine)."""
    if isinstance(adapter, EmbeddingAdapter) and Path(model).is_dir():
        kept = kept_settings(model)
        adapter.folder_prompts = kept["prompts"]
        adapter.default_prompt_name = kept["default_prompt_name"]
        adapter.include_prompt = kept["include_prompt"]
        if adapter.similarity_fn_name is None and kept["similarity"] in DISTANCES:
            adapter.folder_similarity = kept["similarity"]
        # encode's default prompt goes before labelled dev pairs: refused as serve refuses it
        check_prompt(model, adapter.default_prompt_text)
