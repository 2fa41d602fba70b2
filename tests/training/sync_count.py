"""Count the host-synchronising ATen calls of one training step with torch.profiler.

On a GPU each of these makes the CPU wait for the device: a scalar read (``.item()``,
``float(t)``, ``int(t)``, ``bool(t)``, ``if t:`` -> ``aten::_local_scalar_dense`` /
``aten::is_nonzero`` / ``aten::item``) or an op whose output size depends on values
(``nonzero``, ``masked_select``, ``unique``, ``repeat_interleave`` without ``output_size``).
On the CPU the same calls are recorded, so the count is the one a CUDA run would pay. Only the
training thread is counted: a prefetch thread reads CPU tensors that never were on a device.

Also runnable as a script against any source tree (for the before/after table):
``PYTHONPATH=SRC:tests python tests/training/sync_count.py``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

SYNC_OPS = (
    "aten::_local_scalar_dense",
    "aten::item",
    "aten::is_nonzero",
    "aten::nonzero",
    "aten::nonzero_static",
    "aten::masked_select",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::repeat_interleave",
)
MARK = "bertkit.counted_step"
CPU_ONLY = ("aten::_fused_adamw_", "aten::_fused_adam_")
"""Ops whose CPU kernels read scalars on the host (fused AdamW reads each parameter's step
count) where their CUDA kernels read them on the device: what they run is not counted."""


def count_syncs(fn: Callable[[], object]) -> Counter:
    """{op: calls} of the host-synchronising ops ``fn()`` runs on the calling thread.

    ``_local_scalar_dense`` is what ``item`` and ``is_nonzero`` call: each read is counted once,
    under the outermost name."""
    with profile(activities=[ProfilerActivity.CPU]) as prof, record_function(MARK):
        fn()
    events = prof.events()
    mark = next(e for e in events if e.name == MARK)
    counts: Counter = Counter()
    for e in events:
        if e.thread != mark.thread or e.name not in SYNC_OPS:
            continue
        parent = e.cpu_parent
        nested = False
        while parent is not None:  # item -> _local_scalar_dense: count the outer call only
            if parent.name in SYNC_OPS or parent.name in CPU_ONLY:
                nested = True
                break
            parent = parent.cpu_parent
        if not nested:
            counts[e.name] += 1
    return counts


def pretraining_step_syncs(run_dir) -> Counter:
    """One non-logging pre-training update of the tiny test setup (after a warm-up update)."""
    try:
        from .helpers import make_trainer
    except ImportError:  # run as a script: tests/training on sys.path
        from helpers import make_trainer

    # collation ahead in the background thread, as on CUDA (the CPU's default runs it in series)
    trainer = make_trainer(
        run_dir, steps=6, log_every=1000, save_every=1000, dropout=0.1, prefetch=2
    )
    model = trainer.core.train()
    if hasattr(trainer, "start_prefetch"):
        trainer.start_prefetch()  # as fit() runs it: collation in the background thread
    trainer._train_step(model)  # warm-up (first-use work is not a step's)
    threading.Event().wait(0.05)
    return count_syncs(lambda: trainer._train_step(model))


def finetuning_step_syncs() -> Counter:
    """One fine-tuning update (sequence classification, padded batch of uneven lengths)."""
    try:
        from .helpers import tiny_config
    except ImportError:
        from helpers import tiny_config

    from bertkit.model import BertForSequenceClassification
    from bertkit.training.objectives import TaskLoss
    from bertkit.training.optim import OptimizerConfig, build_optimizer
    from bertkit.training.update import UpdateStep

    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config(0.1)).train()
    opt = build_optimizer(model, OptimizerConfig(lr=1e-3))
    update = UpdateStep(opt, TaskLoss(), list(model.parameters()), "fp32", "cpu", 1.0)
    lengths = [5, 9, 12, 16, 7, 3, 16, 10]
    B, T = len(lengths), max(lengths)
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(5, 40, (B, T), generator=g),
        "token_type_ids": torch.zeros(B, T, dtype=torch.long),
        "attention_mask": (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long(),
        "labels": torch.randint(0, 2, (B,), generator=g),
    }
    prepare = getattr(update, "prepare", None)  # the collation-side work, where it exists
    ready = (lambda: prepare(batch)) if prepare else (lambda: batch)
    update(model, [ready()])
    first = ready()
    return count_syncs(lambda: update(model, [first]))


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        pre = pretraining_step_syncs(d)
    fine = finetuning_step_syncs()
    for name, c in (("pre-training", pre), ("fine-tuning", fine)):
        print(f"{name}: {sum(c.values())} host syncs per step: {dict(sorted(c.items()))}")
