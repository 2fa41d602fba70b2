"""A saved task rebuilt: the adapter ``bertkit finetune`` writes beside a fine-tuned model
(``bertkit_task.json``, :meth:`bertkit.tasks.base.TaskAdapter.state`), or a classify adapter for a
Hugging Face sequence classifier folder that has none (a sentence-transformers CrossEncoder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.errors import CheckpointError
from bertkit.tasks.base import TASK_FILE, TASK_FORMAT, TaskAdapter
from bertkit.tasks.classification import ClassificationAdapter
from bertkit.tasks.registry import FAMILIES


def adapter_from_state(state: dict[str, Any]) -> TaskAdapter:
    """Rebuild an adapter from :meth:`TaskAdapter.state` output."""
    state = dict(state)
    found = state.pop("format", TASK_FORMAT)
    if not isinstance(found, int) or found > TASK_FORMAT:
        raise CheckpointError(
            f"{TASK_FILE}: format {found!r} is newer than this bertkit reads ({TASK_FORMAT}); upgrade bertkit"
        )
    family = state.get("family")
    if family not in FAMILIES:
        raise CheckpointError(
            f"unknown task family {family!r} in {TASK_FILE}; expected one of {sorted(FAMILIES)}"
        )
    cls = FAMILIES[family][0]
    try:
        return cls.from_state(state)
    except TypeError as e:
        raise CheckpointError(f"{TASK_FILE}: settings do not fit the {family} task ({e})") from e


def has_task(directory: str | Path) -> bool:
    """Whether a folder holds a fine-tuned model: ``bertkit_task.json``, or a Hugging Face
    sequence classifier (``config.json`` naming ``BertForSequenceClassification``, e.g. a
    sentence-transformers CrossEncoder)."""
    return (Path(directory) / TASK_FILE).is_file() or _hf_classifier_config(directory) is not None


def _hf_classifier_config(directory: str | Path) -> dict[str, Any] | None:
    path = Path(directory) / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    archs = config.get("architectures") or []
    return config if "BertForSequenceClassification" in archs else None


def adapter_from_hf_config(directory: str | Path, config: dict[str, Any]) -> ClassificationAdapter:
    """A classify adapter for a Hugging Face sequence classifier folder: its labels from
    ``id2label`` (one output: a score, as a reranker or a regression model gives), text and
    text pair read from ``text``/``text_pair``, windows up to its position limit (512 at most)."""
    n = int(config.get("num_labels") or len(config.get("id2label") or {}) or 2)
    id2label = {int(k): str(v) for k, v in (config.get("id2label") or {}).items()}
    labels = [] if n == 1 else [id2label.get(i, f"LABEL_{i}") for i in range(n)]
    metric = "pearson_spearman" if n == 1 else ("accuracy_f1" if n == 2 else "accuracy")
    msl = min(512, int(config.get("max_position_embeddings", 512)))
    return ClassificationAdapter(
        "classify",
        Path(directory).name,
        msl,
        labels=labels,
        metric=metric,
        columns={"text": "text", "text_pair": "text_pair"},
    )


def load_adapter(directory: str | Path) -> TaskAdapter:
    """The adapter saved with a fine-tuned model by ``bertkit finetune`` (or, for a Hugging Face
    sequence classifier folder without one, :func:`adapter_from_hf_config`)."""
    path = Path(directory) / TASK_FILE
    if not path.is_file():
        config = _hf_classifier_config(directory)
        if config is not None:
            return adapter_from_hf_config(directory, config)
        raise CheckpointError(
            f"{directory}: no {TASK_FILE} (is this a model written by `bertkit finetune`?)"
        )
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e
    return adapter_from_state(state)
