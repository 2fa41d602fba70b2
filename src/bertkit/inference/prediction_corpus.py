"""Corpus-scale prediction with a fine-tuned model (``bertkit predict --output DIR/``): the
task's examples streamed in windows through :func:`bertkit.inference.corpus.write_stream`, one
JSON line per example (what ``bertkit predict`` writes to a ``.jsonl`` file) in JSONL shards
plus the manifest of :mod:`bertkit.inference.sharded`, resumable as ``embed_to`` is; each
shard's input hash is over the examples' canonical JSON
(:func:`bertkit.tasks.base.examples_bytes`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.errors import ConfigError
from bertkit.inference.corpus import StreamSummary, device_type, write_stream
from bertkit.inference.sharded import StreamConfig, shard_paths
from bertkit.tasks.base import examples_bytes
from bertkit.tasks.windows import WindowCounts

if TYPE_CHECKING:
    from bertkit.inference.task_model import TaskModel


def task_settings(model: TaskModel) -> dict[str, Any]:
    """Everything of ``model`` that changes its predictions' bytes, as JSON values."""
    windows = getattr(model.adapter, "windows", None)
    return {
        "task": f"{model.adapter.family}/{getattr(model.adapter, 'name', '')}",
        "precision": model.precision,
        "batch_size": model.batch_size,
        "device": device_type(model.model),
        "windows": dataclasses.asdict(windows) if dataclasses.is_dataclass(windows) else None,
        "split_special_tokens": bool(getattr(model.tokenizer, "split_special_tokens", False)),
    }


def predict_to(
    model: TaskModel,
    examples: Iterable[Any],
    folder: str | Path,
    *,
    config: StreamConfig | None = None,
    source: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    total: int | None = None,
    show_progress: bool | None = None,
    rank: int = 0,
    world: int = 1,
    barrier: Callable[[], None] | None = None,
) -> StreamSummary:
    """Predict ``examples`` (the task's examples, e.g. from :meth:`TaskModel.read`) into
    ``folder``: JSONL shards ``predictions-00000.jsonl`` ... of one JSON object per example (what
    ``bertkit predict`` writes to a ``.jsonl`` file) plus the manifest, resumable and split over
    ``world`` processes exactly as :func:`embed_to`. Each window of ``config.window`` examples is
    encoded and batched on its own, so memory for features and predictions is bounded by the
    window. Not for SQuAD (one ``predictions.json`` per run) or a document-context tagger
    (a window could cut a document): ConfigError.
    """
    adapter = model.adapter
    if adapter.family == "squad":
        raise ConfigError("a SQuAD model writes one predictions.json; give --output a .json file")
    if getattr(adapter, "document_context", False):
        raise ConfigError(
            "a document-context tagger reads whole documents, which a window of "
            "examples could cut; give --output a .jsonl file"
        )
    quiet = dataclasses.replace(model, show_progress=False)  # one bar, over examples

    def compute(chunk: list[Any]) -> tuple[Callable[[int, int], bytes], WindowCounts]:
        scored = quiet.run(chunk)
        if len(scored.predictions) != len(chunk):  # every family here predicts per example
            raise ConfigError(
                f"{adapter.family}: {len(scored.predictions)} predictions for "
                f"{len(chunk)} examples; give --output a .jsonl file"
            )
        rows = [json.dumps(p, ensure_ascii=False).encode() + b"\n" for p in scored.predictions]
        counts = scored.windows or WindowCounts(len(chunk), 0, len(chunk), 0)
        return (lambda a, b: b"".join(rows[a:b])), counts

    return write_stream(
        folder,
        examples,
        kind="predictions",
        suffix=".jsonl",
        model_dir=getattr(model, "source", None),
        settings={**task_settings(model), **(settings or {})},
        extra={},
        compute=compute,
        item_bytes=examples_bytes,
        desc="predict",
        config=config,
        source=source,
        total=total,
        show_progress=show_progress,
        rank=rank,
        world=world,
        barrier=barrier,
    )


def load_predictions(folder: str | Path, verify: bool = True) -> list[dict[str, Any]]:
    """Every prediction of a finished :func:`predict_to` folder, shards joined in input order."""
    return [
        json.loads(line)
        for _, path in shard_paths(folder, verify)
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
