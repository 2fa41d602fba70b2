"""Stage 2: pre-training speed, bertkit against transformers (sdpa) on the same batches, and the
host synchronisations of bertkit's own update counted with torch.profiler.

For each model size and length (BERT-Base and -Large at 128 x 256 and 512 x 32 on the GPU),
both models run the same step (``benchmarks.gpu_pretrain.step_fn``: forward and backward under
bf16 autocast, fused AdamW, fp32 master weights) with BERT's dropout of 0.1, in alternating
timed blocks (``time_steps``: CUDA events, median step), on two kinds of batch:

* ``real``: padded batches of real instances from stage 0's shards, collated as the trainer
  collates them (``gpu_pretrain.real_batches``, with bertkit's CPU-side Layout);
* ``full``: full-length batches (``benchmarks.speed.pretraining_batch``), no padding at all.

Each row: step time, sequences/s, real tokens/s, MFU by the ``real`` and ``padded`` FLOP counts
(``bertkit.training.metrics.pretraining_flops``) against the datasheet peak and against a
measured 8192^3 bf16 matmul, and the peak memory of the implementation's warm-up steps.

Host syncs: 10 updates of bertkit's training update (``UpdateStep``: MLM + NSP, bf16, fused
AdamW, clipping) on BERT-Base real batches, traced with torch.profiler, counting the CUDA
runtime's synchronisations and ATen's scalar reads; the goal is one per update (the loss).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from typing import Any

import torch

from benchmarks.gpu_check.common import (
    attempt,
    context,
    finish,
    hf_config,
    mfu,
    model_config,
    peaks,
    synchronize,
)
from benchmarks.gpu_pretrain import batch_flops, cycle_fn, real_batches, step_fn, time_steps
from benchmarks.speed import pretraining_batch

DROPOUT = 0.1
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero")
"""ATen ops that read a device value on the host (each is a wait on CUDA)."""


def batches(ctx, length: int, batch: int) -> tuple[dict[str, list[dict]], str]:
    """CPU batches by case, each with its Layout as the trainer attaches it at collation, and
    why the ``real`` case is missing (empty when it is there)."""
    from bertkit.model.batching import layout

    cases: dict[str, list[dict]] = {}
    why = ""
    data = ctx.data_dir(length)
    if (data / "manifest.json").exists():
        cases["real"] = real_batches(str(data), batch, ctx.sizes.real_batches)
    else:
        why = f"no prepared shards in {data} (stage 0 did not finish)"
    full = pretraining_batch(batch, length, ctx.sizes.model_vocab, round(0.15 * length))
    cases["full"] = [{**full, "layout": layout(full["attention_mask"], full["labels"])}]
    return cases, why


def memory_of(fn, steps: int, device: str) -> dict[str, float | None]:
    """Run ``fn`` ``steps`` times (the warm-up) and return the peak memory allocated meanwhile
    (GiB, both models' weights and optimizer states included) and its rise over the start."""
    if device != "cuda":
        for _ in range(steps):
            fn()
        return {"peak_gib": None, "step_gib": None}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    return {"peak_gib": peak / 2**30, "step_gib": (peak - before) / 2**30}


def measure(ctx, fns: dict[str, Any]) -> tuple[dict[str, float], dict[str, dict]]:
    """Median seconds per step of each function, timed in alternating blocks after a warm-up
    that also measures its memory."""
    s = ctx.sizes
    memory = {name: memory_of(fn, s.warmup, ctx.device) for name, fn in fns.items()}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(s.blocks):
        for name, fn in fns.items():
            samples[name].append(time_steps(fn, s.steps, ctx.device))
    return {name: statistics.median(v) for name, v in samples.items()}, memory


def _config(ctx, size: str):
    """The timed model: a preset (or the dry run's), BERT's vocabulary and dropout."""
    return model_config(
        size,
        ctx.sizes.model_vocab,
        hidden_dropout_prob=DROPOUT,
        attention_probs_dropout_prob=DROPOUT,
    )


def rows_for(
    cfg, label: str, length: int, case: str, cpu: list[dict], seconds, memory, peak: dict
) -> list[dict]:
    """The table rows of one (model, length, case): one per implementation."""
    real = statistics.fmean(batch_flops(cfg, b, "real") for b in cpu)
    padded = statistics.fmean(batch_flops(cfg, b, "padded") for b in cpu)
    tokens = statistics.fmean(b["layout"].tokens for b in cpu)
    B = cpu[0]["input_ids"].shape[0]
    ref = seconds.get("hf-sdpa")
    out = []
    for impl, sec in seconds.items():
        out.append(
            {
                "model": label,
                "seq": length,
                "batch": B,
                "case": case,
                "impl": impl,
                "step_ms": sec * 1e3,
                "sequences_per_s": B / sec,
                "tokens_per_s": tokens / sec,
                "real_token_share": tokens / (B * length),
                "mfu_real_datasheet": mfu(real, sec, peak["datasheet_tflops"]),
                "mfu_padded_datasheet": mfu(padded, sec, peak["datasheet_tflops"]),
                "mfu_real_measured": mfu(real, sec, peak["measured_tflops"]),
                "mfu_padded_measured": mfu(padded, sec, peak["measured_tflops"]),
                "speedup_vs_hf_sdpa": ref / sec if ref else None,
                **memory.get(impl, {}),
            }
        )
    return out


def build(cfg, device: str, compiled: bool = False) -> dict[str, torch.nn.Module]:
    """bertkit's and transformers' BertForPreTraining of ``cfg``, made on ``device``."""
    from transformers import BertForPreTraining as HFPreTraining

    from bertkit.model import BertForPreTraining

    torch.manual_seed(0)
    with torch.device(device):
        models = {"bertkit": BertForPreTraining(cfg), "hf-sdpa": HFPreTraining(hf_config(cfg))}
    if compiled:
        return {f"{k}-compiled": torch.compile(m, dynamic=False) for k, m in models.items()}
    return models


def time_size(ctx, size: str, peak: dict, rows: list[dict], cases_by_length: dict) -> None:
    """Every (length, case) row of one model size, written as each finishes."""
    cfg = _config(ctx, size)
    models = build(cfg, ctx.device)
    steps = {name: step_fn(m, ctx.device) for name, m in models.items()}
    for length, cases in cases_by_length.items():
        for case, cpu in cases.items():
            on_dev = [{k: v.to(ctx.device, non_blocking=True) for k, v in b.items()} for b in cpu]
            plain = [{k: v for k, v in b.items() if k != "layout"} for b in on_dev]
            fns = {
                "bertkit": cycle_fn(steps["bertkit"], on_dev),
                "hf-sdpa": cycle_fn(steps["hf-sdpa"], plain),
            }
            seconds, memory = measure(ctx, fns)
            rows += rows_for(cfg, size, length, case, cpu, seconds, memory, peak)
            print(
                f"stage 2: {size} T={length} {case}: "
                + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in seconds.items()),
                flush=True,
            )
            ctx.write(rows=rows)
    del models, steps
    if ctx.cuda:
        torch.cuda.empty_cache()


def time_compiled(ctx, peak: dict, rows: list[dict], cases_by_length: dict) -> dict:
    """Both sides under torch.compile on the first size and length, full batch; compile time
    (the first steps) is reported and excluded."""
    size, length = ctx.sizes.speed_models[0], ctx.sizes.lengths[0]
    cfg = _config(ctx, size)
    cpu = cases_by_length[length]["full"]
    on_dev = [{k: v.to(ctx.device) for k, v in b.items()} for b in cpu]
    plain = [{k: v for k, v in b.items() if k != "layout"} for b in on_dev]
    fns, compile_s = {}, {}
    for name, model in build(cfg, ctx.device, compiled=True).items():
        fn = cycle_fn(step_fn(model, ctx.device), on_dev if name.startswith("bertkit") else plain)
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        synchronize(ctx.device)
        compile_s[name] = time.perf_counter() - t0
        fns[name] = fn
    seconds, memory = measure(ctx, fns)
    rows += rows_for(cfg, size, length, "full", cpu, seconds, memory, peak)
    return {"first_3_steps_s": compile_s}


def host_syncs(ctx, cpu: list[dict]) -> dict[str, Any]:
    """Host synchronisations in ``profile_updates`` updates of bertkit's training update on
    ``cpu`` batches (prepared on the CPU and pinned beforehand, as the prefetching thread does;
    copied to the device inside the traced loop, as the training thread does)."""
    from torch.profiler import ProfilerActivity, profile

    from bertkit import precision as P
    from bertkit.model import BertForPreTraining
    from bertkit.training.objectives import MlmNsp
    from bertkit.training.optim import OptimizerConfig, build_optimizer
    from bertkit.training.update import UpdateStep

    size = ctx.sizes.speed_models[0]
    cfg = _config(ctx, size)
    torch.manual_seed(0)
    with torch.device(ctx.device):
        model = BertForPreTraining(cfg).train()
    opt = build_optimizer(model, OptimizerConfig())
    precision = P.resolve("bf16", ctx.device)
    update = UpdateStep(opt, MlmNsp(), list(model.parameters()), precision, ctx.device, 1.0)
    ready = [update.prepare(b) for b in cpu]
    ready = [m.pin_memory() for m in ready] if ctx.cuda else ready
    n = ctx.sizes.profile_updates
    for m in ready[:2]:  # warm-up: allocator, cuBLAS handles, optimizer state
        update(model, [m.to(ctx.device, non_blocking=True)])
    synchronize(ctx.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
    with profile(activities=activities) as prof:
        for k in range(n):
            update(model, [ready[k % len(ready)].to(ctx.device, non_blocking=True)])
    synchronize(ctx.device)
    counts = Counter(e.name for e in prof.events() if e.name in SYNC_OPS or "Synchronize" in e.name)
    waits = sum(v for k, v in counts.items() if "Synchronize" in k)
    out: dict[str, Any] = {
        "model": size,
        "updates": n,
        "precision": precision,
        "counts": dict(sorted(counts.items())),
        "per_update": {k: v / n for k, v in sorted(counts.items())},
    }
    if not ctx.cuda:
        out.update(
            applicable=False,
            reason="no CUDA: the runtime's synchronisations exist only "
            "on a GPU; the ATen reads counted on the CPU are kept for reference (the CPU "
            "kernel of fused AdamW reads each parameter's step count, CUDA's does not)",
        )
        return out
    # the loss read waits for the device once per update: fewer waits than updates means the
    # profiler recorded no CUDA runtime events (CUPTI unavailable), not that nothing waited
    recorded = waits >= n
    out.update(
        applicable=recorded,
        cuda_waits_per_update=waits / n,
        goal_met=recorded and waits / n <= 1.0 and counts["aten::_local_scalar_dense"] / n <= 1.0,
    )
    if not recorded:
        out["reason"] = (
            f"{waits} CUDA runtime waits recorded in {n} updates, fewer than the loss reads: "
            "the profiler saw no runtime events (CUPTI), so the count is not measured"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ctx = context(2, argv)
    s = ctx.sizes
    if ctx.cuda:
        torch.backends.cuda.matmul.allow_tf32 = True  # the fp32 parts, as --precision auto does
    peak = peaks(ctx.device)
    import transformers

    ctx.write(
        peak=peak,
        dropout=DROPOUT,
        vocab=s.model_vocab,
        transformers=transformers.__version__,
        torch=torch.__version__,
        timing=f"{s.blocks} alternating blocks of {s.steps} "
        f"steps after {s.warmup} warm-up steps; median step",
    )
    cases_by_length, missing = {}, {}
    for length, batch in zip(s.lengths, s.batches, strict=True):
        cases_by_length[length], why = batches(ctx, length, batch)
        if why:
            missing[length] = why
    rows: list[dict] = []
    ctx.write(rows=rows, real_missing=missing)
    # the host-sync count first (small, and a goal of its own), then each model size; a part
    # that fails is recorded in "errors" and the others still run
    first = cases_by_length[s.lengths[0]]
    syncs = attempt(ctx, "host_syncs", lambda: host_syncs(ctx, first.get("real", first["full"])))
    if syncs is not None:
        print(f"stage 2: host syncs {syncs['counts']} in {syncs['updates']} updates", flush=True)
        ctx.write(host_syncs=syncs)
    for size in s.speed_models:
        attempt(
            ctx,
            f"speed {size}",
            lambda size=size: time_size(ctx, size, peak, rows, cases_by_length),
        )
    if ctx.compile:
        try:
            ctx.write(compiled=time_compiled(ctx, peak, rows, cases_by_length), rows=rows)
        except Exception as e:  # optional: a compile failure is reported, not fatal
            ctx.write(compiled={"error": f"{type(e).__name__}: {e}"[:500]})
    problems = [f"T={k}: {v}" for k, v in missing.items()]
    problems += [f"{k}: {v}" for k, v in ctx.record.get("errors", {}).items()]
    if syncs is not None and syncs.get("applicable") and not syncs["goal_met"]:
        problems.append(f"{syncs['cuda_waits_per_update']:.1f} host waits per update")
    return finish(ctx, not problems, "; ".join(problems))


if __name__ == "__main__":
    sys.exit(main())
