"""A sentence-transformers folder's prompts: the named prompts and default prompt of
``config_sentence_transformers.json``, the one each call puts before its texts (as
``encode`` / ``encode_query`` / ``encode_document`` put it), and the check that the folder's
pooling pools a prompt with the text (a ``Pooling`` with ``include_prompt: false`` does not)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.errors import CheckpointError
from bertkit.interop.sentence_folder import VERSIONS, module_chain, similarity_of
from bertkit.interop.sentence_pooling import includes_prompt


def prompts_of(folder: str | Path) -> tuple[dict[str, str], str | None]:
    """The named prompts and the default prompt name of ``config_sentence_transformers.json``
    (empty and None without one)."""
    path = Path(folder) / VERSIONS
    if not path.is_file():
        return {}, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        prompts = {str(k): str(v) for k, v in (data.get("prompts") or {}).items()}
        default = data.get("default_prompt_name")
    except (OSError, AttributeError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from e
    if default is not None and default not in prompts:
        raise CheckpointError(f"{path}: default_prompt_name {default!r} is not one of its prompts")
    return prompts, default


def task_prompt(folder: str | Path, task: str | None) -> str:
    """The text put before a ``task`` ("query" or "document") input, as sentence-transformers 6
    ``encode_query`` / ``encode_document`` put it: the folder's prompt of that name, else none
    (""). Its models always hold a "query" and a "document" prompt (empty unless saved), so
    neither a "passage" or "corpus" prompt nor the default prompt reaches those calls. ``task``
    None: what ``encode`` puts there, the folder's default prompt (none unless it names one)."""
    prompts, default = prompts_of(folder)
    prompt = prompts.get(task, "") if task is not None else prompts.get(default or "", "")
    return check_prompt(folder, prompt)


def check_prompt(folder: str | Path | None, prompt: str) -> str:
    """``prompt``; CheckpointError if non-empty before a folder whose Pooling leaves prompt
    tokens out (``include_prompt: false``): bertkit would pool them with the text."""
    config = prompt_left_out(folder) if prompt else None
    if config is not None:
        raise CheckpointError(
            f"{config}: include_prompt is false (sentence-transformers "
            f"leaves [CLS] and the prompt's tokens out of the pooling), which bertkit does not "
            f"compute; the prompt {prompt!r} cannot be put before the texts. Use the model "
            "without a prompt (its vectors then equal sentence-transformers')"
        )
    return prompt


def prompt_left_out(folder: str | Path | None) -> Path | None:
    """The config of the folder's Pooling module if it says ``include_prompt: false``, else None."""
    root = Path(folder) if folder is not None else None
    chain = module_chain(root) if root is not None and root.is_dir() else None
    pooling = next((path for kind, path in chain or () if kind == "Pooling"), None)
    if pooling is None or includes_prompt(root / pooling):
        return None
    return root / pooling / "config.json"


def kept_settings(folder: str | Path | None) -> dict[str, Any]:
    """What a save of a model loaded from ``folder`` keeps of its sentence-transformers files:
    :func:`~bertkit.interop.sentence_folder.save_sentence_transformers_files`' ``similarity``,
    ``prompts``, ``default_prompt_name`` and ``include_prompt`` (a folder of none: cosine, no
    prompts), so that ``encode_query`` on the saved folder puts the same prompt before a text."""
    prompts, default = prompts_of(folder) if folder is not None else ({}, None)
    return {
        "similarity": (similarity_of(folder) if folder is not None else None) or "cosine",
        "prompts": prompts,
        "default_prompt_name": default,
        "include_prompt": prompt_left_out(folder) is None,
    }
