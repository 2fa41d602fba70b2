"""GPU check: bf16 BERT-Base pre-training steps at seq 128, bertkit vs transformers (sdpa).

    python -m benchmarks.gpu_pretrain [--data PREPARED] [--batch-size 64] [--steps 20]
                                      [--compile] [--json out.json]

Needs a CUDA build of torch and transformers. Both models run the same pre-training step
(forward + backward + fused AdamW) under torch.autocast(bfloat16) with fp32 master weights, timed
with CUDA events in alternating blocks, on two kinds of batch:

* ``all-ones``: a full-length synthetic batch (no padding, 15% of positions labelled), the case
  a flash kernel meets with no mask at all;
* ``real`` (with ``--data``, a ``bertkit prepare-pretraining`` folder): padded batches of real
  instances from the shards, collated as the trainer collates them (for bertkit with the
  CPU-side Layout, so attention takes the varlen path real data takes).

MFU uses the trainer's own functions (``bertkit.training.metrics``): ``pretraining_flops`` by
both definitions (``real``: real tokens and the work done; ``padded``: every position) over
``peak_flops`` (the GPU's datasheet bf16 figure; the measured 8192^3 matmul is printed beside
it). --compile also times bertkit under torch.compile (all-ones only); its compile time is
printed and excluded. Sized to finish in a few minutes on one H200.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from benchmarks.speed import pretraining_batch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def step_fn(model, device: str = "cuda"):
    """``step(batch)``: one training step of ``model`` on a batch already on ``device`` (the
    GPU; ``benchmarks.gpu_check --dry-run`` runs the same step on the CPU)."""
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6, fused=True)

    def step(batch: dict) -> None:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            out = model(**batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_steps(fn, steps: int, device: str = "cuda") -> float:
    """Median seconds per step over ``steps`` steps (CUDA events, one per step; a CPU timer on
    the CPU)."""
    times = []
    for _ in range(steps):
        if torch.device(device).type != "cuda":
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def real_batches(data: str, batch_size: int, count: int, seed: int = 0) -> list[dict]:
    """``count`` padded CPU batches of real instances from prepared shards, as the trainer
    collates them (the data order of phase 0, masks of epoch 0), each with its Layout."""
    from pathlib import Path

    from bertkit.data.collate import make_collate
    from bertkit.data.shards import PretrainingDataset
    from bertkit.model.batching import layout
    from bertkit.training.sharding import global_batch_indices

    ds = PretrainingDataset(Path(data), "train")
    collate = make_collate(ds, seed)
    out = []
    for k in range(count):
        idx, epochs = global_batch_indices(len(ds), k * batch_size, batch_size, seed, 0)
        b = collate([ds[int(i)] for i in idx], epochs)
        b["layout"] = layout(b["attention_mask"], b["labels"])
        out.append(b)
    return out


def batch_layout(batch: dict):
    """The batch's Layout (real_batches attaches it; the all-ones batch is laid out here)."""
    from bertkit.model.batching import layout

    return (
        batch["layout"] if "layout" in batch else layout(batch["attention_mask"], batch["labels"])
    )


def batch_flops(config, batch: dict, definition: str) -> float:
    """The trainer's FLOP count of one step on ``batch``, from its Layout."""
    from bertkit.training.metrics import layout_flops

    return layout_flops(config, batch_layout(batch), definition)


def cycle_fn(fn_of_batch, batches: list[dict]):
    """A step function that takes the next of ``batches`` each call."""
    state = {"k": 0}

    def step() -> None:
        fn_of_batch(batches[state["k"] % len(batches)])
        state["k"] += 1

    return step


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=None, help="a prepare-pretraining folder (real batches)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seq-length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per block")
    ap.add_argument("--blocks", type=int, default=3, help="alternating timed blocks per model")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "gpu.json"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this script is for the GPU machine")
        return 2
    from transformers import BertConfig as HFConfig
    from transformers import BertForPreTraining as HFPreTraining

    from bertkit.config import BertConfig
    from bertkit.model import BertForPreTraining
    from bertkit.training.metrics import measure_peak_flops, peak_flops

    torch.backends.cuda.matmul.allow_tf32 = True
    peak = peak_flops("cuda", "bf16")
    measured = measure_peak_flops("cuda", torch.bfloat16, seconds=1.0) / 1e12
    print(
        f"{torch.cuda.get_device_name()}: peak {peak.flops / 1e12:.0f} TFLOP/s ({peak.source}); "
        f"measured bf16 matmul {measured:.0f} TFLOP/s",
        flush=True,
    )
    B, T = args.batch_size, args.seq_length
    masked = round(T * 0.15)
    cases: dict[str, list[dict]] = {}
    vocab = None
    if args.data:
        cases["real"] = real_batches(args.data, B, 8)
        from bertkit.data.shards import read_manifest

        vocab = int(read_manifest(args.data)["vocab"]["size"])
    cfg = BertConfig.preset(
        "base",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **({"vocab_size": vocab} if vocab else {}),
    )
    cases = {"all-ones": [pretraining_batch(B, T, cfg.vocab_size, masked)], **cases}
    hf_cfg = HFConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    ours, theirs = BertForPreTraining(cfg), HFPreTraining(hf_cfg)
    result = {
        "peak_tflops": peak.flops / 1e12,
        "peak_source": peak.source,
        "measured_matmul_tflops": measured,
        "batch": B,
        "seq": T,
        "rows": {},
    }
    print("| batch | model | step ms | real tokens/s | MFU (real) | MFU (padded) | vs hf-sdpa |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for case, cpu_batches in cases.items():
        on_gpu = [{k: v.to("cuda", non_blocking=True) for k, v in b.items()} for b in cpu_batches]
        plain = [{k: v for k, v in b.items() if k != "layout"} for b in on_gpu]
        fns = {
            "bertkit": cycle_fn(step_fn(ours), on_gpu),
            "hf-sdpa": cycle_fn(step_fn(theirs), plain),
        }
        if args.compile and case == "all-ones":
            compiled = torch.compile(BertForPreTraining(cfg), dynamic=False)
            fn = cycle_fn(step_fn(compiled), plain)
            t0 = time.perf_counter()
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            print(f"torch.compile: first 3 steps {time.perf_counter() - t0:.1f}s (excluded)")
            fns["bertkit-compiled"] = fn
        for fn in fns.values():  # warm-up: allocator, cuBLAS heuristics, optimizer state
            for _ in range(3):
                fn()
        samples: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.blocks):
            for name, fn in fns.items():
                samples[name].append(time_steps(fn, args.steps))
        real = statistics.fmean(batch_flops(cfg, b, "real") for b in cpu_batches)
        padded = statistics.fmean(batch_flops(cfg, b, "padded") for b in cpu_batches)
        tokens = statistics.fmean(batch_layout(b).tokens for b in cpu_batches)
        ref = statistics.median(samples["hf-sdpa"])
        for name, s in samples.items():
            sec = statistics.median(s)
            row = {
                "seconds": sec,
                "tokens_per_s": tokens / sec,
                "mfu_real": real / sec / peak.flops,
                "mfu_padded": padded / sec / peak.flops,
            }
            result["rows"][f"{case}/{name}"] = row
            print(
                f"| {case} | {name} | {sec * 1e3:.1f} | {row['tokens_per_s']:,.0f} | "
                f"{row['mfu_real']:.0%} | {row['mfu_padded']:.0%} | {ref / sec:.2f}x |"
            )
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
