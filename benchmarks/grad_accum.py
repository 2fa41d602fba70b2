"""Fine-tuning updates with gradient accumulation on the CPU: one line per ``--grad-accum``, the
wall time per update (median of ``--reps`` after one warm-up) and the process's peak RSS.

A BERT-Mini-shaped classifier (4 layers, hidden 256, 4 heads, random weights), SQuAD-length
inputs (``--batch`` x ``--length`` tokens, all real), fp32, dropout 0.1, one update = the
:class:`~bertkit.training.update.UpdateStep` fine-tuning runs (AdamW, clipping) over the batch
cut into ``grad_accum`` micro-batches. Peak RSS is the process's, so run one setting a process:

    for n in 1 4; do PYTHONPATH=src:. .venv/bin/python -m benchmarks.grad_accum --grad-accum $n; done
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=384)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args(argv)
    from bertkit.config import BertConfig
    from bertkit.model import BertForSequenceClassification
    from bertkit.training.objectives import TaskLoss
    from bertkit.training.optim import OptimizerConfig, build_optimizer
    from bertkit.training.update import UpdateStep

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024
    )
    model = BertForSequenceClassification(config).train()
    opt = build_optimizer(model, OptimizerConfig(lr=2e-5))
    update = UpdateStep(opt, TaskLoss(), list(model.parameters()), "fp32", "cpu")
    ids = torch.randint(1000, 20000, (a.batch, a.length))
    labels = torch.randint(0, 2, (a.batch,))
    size = a.batch // a.grad_accum
    micros = [
        update.prepare(
            {
                "input_ids": ids[k : k + size],
                "attention_mask": torch.ones_like(ids[k : k + size]),
                "labels": labels[k : k + size],
            }
        )
        for k in range(0, a.batch, size)
    ]
    times = []
    for _ in range(a.reps + 1):
        t0 = time.perf_counter()
        update(model, micros)
        times.append(time.perf_counter() - t0)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"grad_accum {a.grad_accum}: {len(micros)} x {size} x {a.length} tokens, "
        f"{statistics.median(times[1:]):.2f} s/update, peak RSS {peak_mib:.0f} MiB "
        f"({torch.get_num_threads()} threads)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
