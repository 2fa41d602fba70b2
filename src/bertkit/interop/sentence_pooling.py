"""A sentence-transformers ``Pooling`` module's config: its pooling as bertkit names it.

``config.json`` holds ``pooling_mode_*`` flags (every version of sentence-transformers and
text-embeddings-inference reads these; :mod:`bertkit.interop.sentence_folder` writes them), or
``"pooling_mode": "mean"`` (what sentence-transformers 6 writes). Read for a folder's own Pooling
module and for each route of a dense ``Router`` (:mod:`bertkit.interop.sentence_router`).
"""

from __future__ import annotations

import json
from pathlib import Path

from bertkit.errors import CheckpointError
from bertkit.model.pooling import POOLINGS

# sentence-transformers' pooling flag for each bertkit pooling
FLAGS = {
    "cls": "pooling_mode_cls_token",
    "mean": "pooling_mode_mean_tokens",
    "max": "pooling_mode_max_tokens",
}
OTHER_FLAGS = (
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def pooling_mode(folder: Path, where: Path | None = None) -> str:
    """The pooling a ``Pooling`` module's ``config.json`` in ``folder`` declares (its
    ``pooling_mode_*`` flags, or sentence-transformers 6's ``pooling_mode``). CheckpointError,
    naming ``where`` (default: ``folder``), for a pooling bertkit does not compute."""
    try:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        modes = cfg.get("pooling_mode")
        if modes is None:
            modes = [m for m, flag in FLAGS.items() if cfg.get(flag)]
            modes += [f for f in OTHER_FLAGS if cfg.get(f)]
        elif isinstance(modes, str):
            modes = [modes]
    except (OSError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{folder}: unreadable sentence-transformers config ({e})") from e
    if len(modes) != 1 or modes[0] not in POOLINGS:
        raise CheckpointError(
            f"{where or folder}: pooling {modes or 'none'} is not supported (one of {POOLINGS})"
        )
    return modes[0]


def includes_prompt(folder: Path) -> bool:
    """A ``Pooling`` module's ``include_prompt`` (true unless its ``config.json`` says false).
    False: sentence-transformers leaves [CLS] and a prompt's tokens out of the pooling (the
    first ``1 + len(prompt tokens)`` positions; INSTRUCTOR-style models), which bertkit does not
    compute: :func:`bertkit.interop.sentence_prompts.check_prompt` refuses a prompt there."""
    try:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return bool(cfg.get("include_prompt", True))
    except (OSError, AttributeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{folder}: unreadable sentence-transformers config ({e})") from e
