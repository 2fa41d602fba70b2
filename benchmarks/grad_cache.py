"""Cached contrastive updates (GradCache, ``--mini-batch-size``) on the CPU: one line per
setting, the wall time per update (median of ``--reps`` after one warm-up) and the process's
peak RSS.

A BERT-Mini-shaped bi-encoder (4 layers, hidden 256, 4 heads, random weights, mean pooling),
``--batch`` (query, positive) examples of ``--length`` tokens each (all real), fp32, dropout
0.1; one update = the :class:`~bertkit.training.update.UpdateStep` fine-tuning runs (AdamW,
clipping) over the whole batch, its rows encoded in one pass (``--mini-batch-size 0``) or that
many rows at a time. Peak RSS is the process's, so run one setting a process:

    for m in 0 8; do PYTHONPATH=src:. .venv/bin/python -m benchmarks.grad_cache --mini-batch-size $m; done
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mini-batch-size", type=int, default=0, help="rows per pass; 0: one pass")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args(argv)
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.model.contrastive import BiEncoder
    from bertkit.training.objectives import TaskLoss
    from bertkit.training.optim import OptimizerConfig, build_optimizer
    from bertkit.training.update import UpdateStep

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024
    )
    model = BiEncoder(BertModel(config), mini_batch_size=a.mini_batch_size or None).train()
    opt = build_optimizer(model, OptimizerConfig(lr=2e-5))
    update = UpdateStep(opt, TaskLoss(), list(model.parameters()), "fp32", "cpu")
    ids = torch.randint(1000, 20000, (2 * a.batch, a.length))  # B queries, then B positives
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    micro = update.prepare({**batch, "labels": torch.arange(a.batch)})
    times = []
    for _ in range(a.reps + 1):
        t0 = time.perf_counter()
        update(model, [micro])
        times.append(time.perf_counter() - t0)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"mini_batch_size {a.mini_batch_size or 'none'}: {a.batch} pairs ({2 * a.batch} rows) x "
        f"{a.length} tokens, {statistics.median(times[1:]):.2f} s/update, peak RSS "
        f"{peak_mib:.0f} MiB ({torch.get_num_threads()} threads)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
