"""Running a task model over encoded features: length-sorted batches, unpadded forward, precision.

:func:`predict_rows` is the one forward loop of evaluation, prediction, dev scoring during
fine-tuning and the task pipelines: features are sorted by length so each batch pads little (the
encoder's unpadded path skips the rest), and rows come back in the input order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from bertkit import precision as P
from bertkit.progress import progress
from bertkit.tasks.base import TaskAdapter


def to_torch(batch: dict[str, np.ndarray], device: torch.device | str) -> dict[str, torch.Tensor]:
    """numpy arrays -> tensors on ``device`` (same keys)."""
    return {k: torch.from_numpy(v).to(device) for k, v in batch.items()}


@torch.no_grad()
def predict_rows(
    model: torch.nn.Module,
    adapter: TaskAdapter,
    features: Sequence[Any],
    *,
    pad_id: int = 0,
    batch_size: int = 64,
    precision: str = "fp32",
    show_progress: bool | None = None,
    desc: str = "eval",
    outputs: Callable[[Any, dict[str, np.ndarray]], list[Any]] | None = None,
) -> list[Any]:
    """Run ``model`` over ``features`` and return the adapter's per-feature outputs, in order
    (``outputs(model_output, batch)``: other rows than the adapter's, e.g. a tagger's logits)."""
    outputs = outputs or adapter.outputs
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(features)), key=lambda i: adapter.length(features[i]))
    rows: list[Any] = [None] * len(features)
    starts = range(0, len(order), batch_size)
    for s in progress(
        starts, total=len(starts), desc=desc, unit="batch", enabled=show_progress, leave=False
    ):
        idx = order[s : s + batch_size]
        batch = adapter.collate([features[i] for i in idx], pad_id, training=False)
        with P.autocast(precision, device):
            out = model(**to_torch(batch, device))
        for i, row in zip(idx, outputs(out, batch)):
            rows[i] = row
    return rows
