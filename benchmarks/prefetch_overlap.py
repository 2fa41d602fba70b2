"""Input pipeline overlap on the CPU: pre-training step time with a deliberately slow collate,
collated in series (--prefetch 0) or ahead in the background thread (--prefetch 2).

    python -m benchmarks.prefetch_overlap [--steps 24] [--delay-ms 40] [--repeats 2] [--json out]

The model is small (hidden 128, 2 layers, batch 32, lengths 16..128, the unpadded path) so that a
step's compute is comparable to the collate's delay; two delays are added to the real collation:
``sleep`` (reading from storage: the GIL is released) and ``python`` (a busy Python loop holding the
GIL, the worst case for a thread). Both settings run alternately in one process on the same data and
weights; the table gives seconds per step (best of --repeats) and the speed-up (the trainer's
``seconds_per_step``). Expected: with a sleeping collate the step takes max(compute, collate)
instead of their sum; a GIL-bound collate overlaps only with torch's kernels, which release the GIL.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertkit.config import BertConfig
from bertkit.cpu import cpu_info
from bertkit.data.collate import collate_pretraining
from bertkit.model import BertForPreTraining
from bertkit.training.loop import Phase, TrainConfig, Trainer
from bertkit.training.optim import OptimizerConfig, build_optimizer
from bertkit.training.schedule import ScheduleConfig

VOCAB = 1000


def examples(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        t = int(rng.integers(16, 129))
        ids = rng.integers(5, VOCAB, size=t)
        pos = np.sort(rng.choice(np.arange(1, t - 1), size=max(1, t * 15 // 100), replace=False))
        out.append(
            {
                "input_ids": ids,
                "token_type_ids": np.zeros(t, dtype=np.int64),
                "masked_positions": pos,
                "masked_labels": ids[pos].copy(),
                "next_sentence_label": int(rng.integers(0, 2)),
            }
        )
    return out


def slow_collate(kind: str, delay: float):
    def collate(items, epochs=None):
        if kind == "sleep":
            time.sleep(delay)
        else:  # hold the GIL for ``delay`` seconds
            end = time.perf_counter() + delay
            while time.perf_counter() < end:
                pass
        return collate_pretraining(items)

    return collate


def seconds_per_step(kind: str, delay: float, prefetch: int, steps: int, data: list) -> float:
    cfg = BertConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = BertForPreTraining(cfg)
    with tempfile.TemporaryDirectory() as run:
        trainer = Trainer(
            model,
            build_optimizer(model, OptimizerConfig()),
            ScheduleConfig(steps, 1),
            [Phase(data, steps)],
            slow_collate(kind, delay),
            TrainConfig(
                batch_size=32,
                log_every=steps,
                save_every=10 * steps,
                prefetch=prefetch,
                show_progress=False,
                peak_flops=1.0,
                precision="fp32",
            ),
            Path(run),
            log=lambda _m: None,
        )
        trainer.fit()  # the trainer's own clock: checkpoints, evaluation and plots excluded
        rec = [r for r in trainer.metrics.read() if r.get("type") == "train"][-1]
        return float(rec["seconds_per_step"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--delay-ms", type=float, default=40.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = examples(32 * args.steps)
    delay = args.delay_ms / 1e3
    rows = []
    none = {
        p: min(seconds_per_step("sleep", 0.0, p, args.steps, data) for _ in range(args.repeats))
        for p in (0, 2)
    }
    print(
        f"{cpu_info().label}, {torch.get_num_threads()} threads; {args.steps} steps per run, "
        f"best of {args.repeats}; compute alone: {none[0] * 1e3:.1f} ms/step"
    )
    print("| collate delay | in series (ms/step) | prefetch 2 (ms/step) | speed-up |")
    print("|---|---:|---:|---:|")
    for kind in ("sleep", "python"):
        best = {0: float("inf"), 2: float("inf")}
        for _ in range(args.repeats):
            for p in (0, 2):  # alternating
                best[p] = min(best[p], seconds_per_step(kind, delay, p, args.steps, data))
        rows.append(
            {
                "delay": kind,
                "delay_ms": args.delay_ms,
                "series_s": best[0],
                "prefetch_s": best[2],
                "speedup": best[0] / best[2],
            }
        )
        print(
            f"| {kind} {args.delay_ms:g} ms | {best[0] * 1e3:.1f} | {best[2] * 1e3:.1f} | "
            f"{best[0] / best[2]:.2f}x |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"compute_s": none, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
