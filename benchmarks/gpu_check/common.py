"""What the GPU check's driver and stage processes share: the stage table, the sizes of a full
run and of a CPU dry run, a stage's context (its arguments, deadline and JSON), model configs.

A stage process is ``python -m benchmarks.gpu_check.<module> --out OUT --work WORK --budget S
[--dry-run] ...``: it writes ``OUT/<stage file>.json`` with at least ``stage``, ``status``
(passed / failed / skipped) and ``reason`` (why, when not passed), rewriting it as parts finish,
so a stage stopped at its cap still leaves what it measured. Bulky outputs (shards, runs,
weights) go to WORK, never to OUT: the device tool brings back at most 8 files from OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass(frozen=True)
class Stage:
    number: int
    name: str
    """Also the module under ``benchmarks.gpu_check`` that runs it."""
    budget_s: float
    """The cap on the stage's wall time on one H200 (the driver stops it there)."""
    title: str

    @property
    def file(self) -> str:
        """Its JSON's name in OUT."""
        return f"stage{self.number}_{self.name}.json"


STAGES = (
    Stage(0, "data", 40, "shards of the built-in corpus (bertkit's prepare pipeline)"),
    Stage(1, "correctness", 90, "gpu-marked tests on CUDA (pytest)"),
    Stage(2, "pretrain_speed", 180, "pre-training speed vs transformers; host syncs"),
    Stage(3, "task_speed", 60, "fine-tuning step and embedding speed vs transformers"),
    Stage(4, "pretrain_run", 100, "a short real `bertkit pretrain` run"),
    Stage(5, "glue", 0, "pre-train on a given corpus, then SST-2 and MRPC"),  # budget: minutes
)
COMPILE_EXTRA_S = 150
"""Stage 2's cap grows by this with ``--compile`` (both BERT-Base models compiled, ~1 minute
each): beyond one command's 10 minutes with every stage, so ``--stages 0,2 --compile``."""
STAGE5_EXTRA_S = 240
"""Stage 5's cap beyond its pre-training minutes: preparation (~60 s for one wikipedia-large
file), calibration (~25 s), fine-tuning SST-2 (1 epoch) and MRPC (3 epochs) (~120 s)."""


@dataclass(frozen=True)
class Sizes:
    """Every size the stages use; :data:`FULL` for one H200, :data:`DRY` for a CPU dry run."""

    articles: int | None
    """Articles of the corpus read (None: all)."""
    holdout: float
    """Share of the articles held out (the dry run's few articles need a large one)."""
    vocab: int
    """WordPiece pieces trained (stage 0, stage 5)."""
    model_vocab: int
    """The speed models' vocabulary: BERT's 30522 on the GPU, whatever the shards used (their
    ids are below it); the full-length batches draw ids from [1000, model_vocab)."""
    lengths: tuple[int, int]
    """The two instance lengths prepared and timed (the paper's 128 and 512)."""
    batches: tuple[int, int]
    """Sequences per pre-training step at each of ``lengths``."""
    speed_models: tuple[str, ...]
    """Model sizes timed in stage 2 (presets; "dry" is :func:`model_config`'s tiny one)."""
    task_model: str
    steps: int
    """Timed steps per block (one CUDA event pair each; the median is kept)."""
    blocks: int
    """Alternating timed blocks per implementation."""
    warmup: int
    real_batches: int
    """Distinct padded real batches cycled through."""
    profile_updates: int
    finetune_batch: tuple[int, int]
    embed_texts: int
    embed_batch: int
    run_size: str
    """Stage 4's model (``bertkit pretrain --model-size``)."""
    run_batch: int
    calibration_steps: int
    run_steps_cap: int | None
    """Stage 4/5: at most this many updates (the dry run's bound); None: what the time allows."""
    evaluations: int = 4
    """Stage 4/5: held-out evaluations along a run (the first and last are compared)."""
    glue_epochs: dict[str, int] = field(default_factory=lambda: {"SST-2": 1, "MRPC": 3})
    glue_examples: int | None = None


FULL = Sizes(
    articles=None,
    holdout=0.05,
    vocab=30522,
    model_vocab=30522,
    lengths=(128, 512),
    batches=(256, 32),
    speed_models=("base", "large"),
    task_model="base",
    steps=10,
    blocks=3,
    warmup=3,
    real_batches=4,
    profile_updates=10,
    finetune_batch=(32, 128),
    embed_texts=4096,
    embed_batch=128,
    run_size="small",
    run_batch=256,
    calibration_steps=60,
    run_steps_cap=None,
)
DRY = Sizes(
    articles=24,
    holdout=0.3,
    vocab=600,
    model_vocab=2048,
    lengths=(32, 64),
    batches=(4, 2),
    speed_models=("dry",),
    task_model="dry",
    steps=1,
    blocks=2,
    warmup=1,
    real_batches=2,
    profile_updates=2,
    finetune_batch=(4, 32),
    embed_texts=32,
    embed_batch=16,
    run_size="tiny",
    run_batch=8,
    calibration_steps=2,
    run_steps_cap=4,
    evaluations=2,
    glue_epochs={"SST-2": 1, "MRPC": 1},
    glue_examples=16,
)


@dataclass
class Context:
    """One stage process's view of the run."""

    stage: Stage
    out: Path
    work: Path
    dry_run: bool
    budget_s: float
    started: float
    compile: bool = False
    corpus: list[Path] = field(default_factory=list)
    glue: Path | None = None
    stage5_minutes: float = 5.0
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def sizes(self) -> Sizes:
        return DRY if self.dry_run else FULL

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def seconds_left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def data_dir(self, length: int) -> Path:
        """Stage 0's shards of ``length``-token instances (train and eval splits)."""
        return self.work / "data" / f"data{length}"

    @property
    def vocab(self) -> Path:
        return self.work / "data" / "vocab.txt"

    def write(self, **updates: Any) -> None:
        """Merge ``updates`` into the stage's record and rewrite its JSON atomically."""
        from bertkit.io import atomic_write_text

        self.record.update(updates)
        self.record["seconds"] = round(time.perf_counter() - self.started, 2)
        atomic_write_text(self.out / self.stage.file, json.dumps(self.record, indent=2) + "\n")


def stage_args(p: argparse.ArgumentParser) -> None:
    """The options the driver passes on to every stage."""
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="tiny sizes on the CPU: every stage end to end, for the test suite",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="stage 2 also times both sides under torch.compile (compile excluded)",
    )
    p.add_argument(
        "--corpus",
        nargs="*",
        type=Path,
        default=[],
        help="stage 5: corpus files or folders (.xz read as is; default: built-in)",
    )
    p.add_argument("--glue", type=Path, default=None, help="stage 5: the GLUE root (SST-2/, MRPC/)")
    p.add_argument(
        "--stage5-minutes",
        type=float,
        default=5.0,
        help="stage 5: minutes of pre-training (the 10-minute command cap allows ~5)",
    )


def context(stage_number: int, argv: list[str] | None = None) -> Context:
    """Parse a stage process's arguments; the stage's record starts as ``status: running``."""
    stage = STAGES[stage_number]
    p = argparse.ArgumentParser(description=f"GPU check, stage {stage_number}: {stage.title}")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--budget", type=float, required=True, help="this stage's cap in seconds")
    stage_args(p)
    a = p.parse_args(argv)
    ctx = Context(
        stage,
        a.out,
        a.work,
        a.dry_run,
        a.budget,
        time.perf_counter(),
        a.compile,
        a.corpus,
        a.glue,
        a.stage5_minutes,
    )
    ctx.out.mkdir(parents=True, exist_ok=True)
    ctx.work.mkdir(parents=True, exist_ok=True)
    ctx.write(
        stage=stage.name,
        status="running",
        reason="",
        device=ctx.device,
        dry_run=ctx.dry_run,
        budget_s=ctx.budget_s,
    )
    return ctx


def model_config(name: str, vocab_size: int = 30522, **overrides: Any):
    """A bertkit BertConfig: a preset by name, or "dry" (H=32, L=2), the CPU dry run's."""
    from bertkit.config import BertConfig

    if name == "dry":
        return BertConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            **overrides,
        )
    return BertConfig.preset(name, vocab_size=vocab_size, **overrides)


def hf_config(config, attention: str = "sdpa"):
    """transformers' BertConfig with the same fields (bertkit's are config.json's keys)."""
    from transformers import BertConfig as HFConfig

    hf = HFConfig(**config.to_dict())
    hf._attn_implementation = attention
    return hf


def peaks(device: str) -> dict[str, Any]:
    """The two peaks MFU is given against: the datasheet's dense bf16 figure (None off a known
    GPU) and the best 8192^3 bf16 matmul measured here (on a CPU a 1024^3 fp32 one, briefly:
    the dry run only needs a number)."""
    import torch

    from bertkit.training.metrics import measure_peak_flops, peak_flops

    out: dict[str, Any] = {"datasheet_tflops": None, "datasheet_source": "none: not a known GPU"}
    if device == "cuda":
        peak = peak_flops(device, "bf16")
        if "datasheet" in peak.source:
            out.update(datasheet_tflops=peak.flops / 1e12, datasheet_source=peak.source)
        measured = measure_peak_flops(device, torch.bfloat16, seconds=1.0)
        out.update(measured_tflops=measured / 1e12, measured_source="8192^3 bf16 matmul, best")
    else:
        measured = measure_peak_flops(device, torch.float32, seconds=0.05)
        out.update(measured_tflops=measured / 1e12, measured_source="1024^3 fp32 matmul (CPU)")
    return out


def mfu(flops: float, seconds: float, tflops: float | None) -> float | None:
    return None if not tflops else flops / seconds / (tflops * 1e12)


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def attempt(ctx: Context, part: str, fn: Callable[[], T]) -> T | None:
    """``fn()``, or None when it raises: the error goes into the stage's ``errors`` and the
    stage goes on with its other parts (one model's out-of-memory must not lose the rest of a
    device call). The GPU's cache is emptied after a failure so the next part starts clean."""
    try:
        return fn()
    except Exception as e:
        import gc
        import traceback

        import torch

        errors = ctx.record.setdefault("errors", {})
        errors[part] = f"{type(e).__name__}: {e}"[:500]
        print(f"stage {ctx.stage.title}: {part} failed:\n{traceback.format_exc()}", flush=True)
        ctx.write(errors=errors)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return None


def finish(ctx: Context, ok: bool, reason: str = "") -> int:
    """Write the final status (passed / failed) and return the process's exit code."""
    ctx.write(status="passed" if ok else "failed", reason=reason)
    return 0 if ok else 1
