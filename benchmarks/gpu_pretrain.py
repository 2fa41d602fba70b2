"""GPU check: bf16 BERT-Base pre-training steps at seq 128, bertkit vs transformers (sdpa).

    python -m benchmarks.gpu_pretrain [--batch-size 64] [--steps 20] [--compile] [--json out.json]

Needs a CUDA build of torch and transformers. Both models run the same pre-training step
(forward + backward + fused AdamW) under torch.autocast(bfloat16) with fp32 master weights, on the
same full-length batch (15% of positions labelled), timed with CUDA events in alternating blocks.
The bf16 matmul peak is measured in the same run (8192^3, best of 20) and model FLOPs utilisation
(MFU) uses the FLOP formula of benchmarks/flops.py. --compile also times bertkit under
torch.compile; its compile time (first steps) is printed and excluded from the step time.
Sized to finish in a few minutes on one H200 (targets: MFU >= 45%, faster than transformers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from benchmarks.flops import pretraining_step_flops
from benchmarks.speed import pretraining_batch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def bf16_peak_tflops(n: int = 8192, repeats: int = 20) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * n**3 / best / 1e12


def step_fn(model, batch: dict):
    model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6, fused=True)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(**batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_steps(fn, steps: int) -> float:
    """Median seconds per step over ``steps`` steps (CUDA events, one per step)."""
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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

    torch.backends.cuda.matmul.allow_tf32 = True
    peak = bf16_peak_tflops()
    print(f"{torch.cuda.get_device_name()}: bf16 matmul peak {peak:.0f} TFLOP/s", flush=True)
    cfg = BertConfig.preset("base", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    B, T = args.batch_size, args.seq_length
    masked = round(T * 0.15)
    batch = {k: v.cuda() for k, v in pretraining_batch(B, T, cfg.vocab_size, masked).items()}
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
    fns = {"bertkit": step_fn(BertForPreTraining(cfg), batch)}
    fns["hf-sdpa"] = step_fn(HFPreTraining(hf_cfg), batch)
    compile_s = None
    if args.compile:
        model = BertForPreTraining(cfg)
        compiled = torch.compile(model, dynamic=False)
        fn = step_fn(compiled, batch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        fns["bertkit-compiled"] = fn
        print(f"torch.compile: first 3 steps {compile_s:.1f}s (excluded)", flush=True)
    for fn in fns.values():  # warm-up: allocator, cuBLAS heuristics, optimizer state
        for _ in range(3):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.blocks):
        for name, fn in fns.items():
            samples[name].append(time_steps(fn, args.steps))
    flops = pretraining_step_flops(
        B, T, masked, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    )
    result = {"peak_tflops": peak, "batch": B, "seq": T, "compile_s": compile_s, "rows": {}}
    ref = statistics.median(samples["hf-sdpa"])
    print("| model | step ms | tokens/s | MFU (bf16 peak) | vs hf-sdpa |")
    print("|---|---:|---:|---:|---:|")
    for name, s in samples.items():
        sec = statistics.median(s)
        mfu = flops / sec / (peak * 1e12)
        result["rows"][name] = {"seconds": sec, "tokens_per_s": B * T / sec, "mfu": mfu}
        print(f"| {name} | {sec * 1e3:.1f} | {B * T / sec:,.0f} | {mfu:.0%} | {ref / sec:.2f}x |")
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
