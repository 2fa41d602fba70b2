"""``bertkit pretrain``: MLM + NSP pre-training on prepared data; rerun the same command to resume.

The flags are the fields of :class:`~bertkit.training.pretraining.PretrainOptions` (what to train)
and :class:`~bertkit.training.loop.TrainConfig` (how), with their defaults and docstrings.
"""

from __future__ import annotations

import argparse
import os

from bertkit.cli import options

HELP = "pre-train BERT (MLM + NSP) on prepare-pretraining output; rerunning resumes"

_WHAT = (
    "data",
    "output",
    "max_steps",
    "learning_rate",
    "optimizer",
    "weight_decay",
    "dropout",
    "initializer_range",
    "num_attention_heads",
    "eval_data",
    "phase2_data",
    "phase2_fraction",
    "phase2_batch_size",
    "phase2_learning_rate",
    "init_from",
    "threads",
    "objective",
    "nsp_weight",
    "random_next",
    "dynamic_masking",
)
_HOW = (
    "batch_size",
    "grad_accum",
    "seed",
    "save_every",
    "keep_last",
    "log_every",
    "eval_every",
    "eval_examples",
    "clip_norm",
    "max_consecutive_skips",
    "collective_timeout",
    "prefetch",
    "shard_window",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.config import PRESETS
    from bertkit.training.loop import TrainConfig
    from bertkit.training.objectives import OBJECTIVES
    from bertkit.training.optim import OPTIMIZERS
    from bertkit.training.pretraining import PretrainOptions

    options.add_fields(
        p,
        PretrainOptions,
        _WHAT,
        choices={"optimizer": OPTIMIZERS, "objective": OBJECTIVES, "random_next": ("keep", "drop")},
    )
    size = p.add_mutually_exclusive_group()
    options.add_fields(size, PretrainOptions, ["model_size"], choices={"model_size": PRESETS})
    options.add_fields(size, PretrainOptions, ["config_file"], flags={"config_file": "--config"})
    warm = p.add_mutually_exclusive_group()
    options.add_fields(warm, PretrainOptions, ["warmup_steps", "warmup_proportion"])
    options.add_fields(p, TrainConfig, _HOW, dest_prefix="train_")
    options.add_precision(p)
    options.add_device(p)
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="peak TFLOP/s per process for MFU (default: measured matmul throughput)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: on a terminal)",
    )
    # Test-only switches (bertkit.training.faults): fault injection and negative controls.
    hidden = argparse.SUPPRESS
    p.add_argument(
        "--debug-no-restore", choices=["rng", "cursor", "both"], default=None, help=hidden
    )
    p.add_argument("--debug-checkpoint-delay", type=float, default=0.0, help=hidden)
    p.add_argument("--debug-nan-at", type=int, nargs="*", default=[], help=hidden)
    p.add_argument("--debug-fail-checkpoint", type=int, nargs="*", default=[], help=hidden)
    p.add_argument("--debug-raise-at", type=int, nargs=2, metavar=("RANK", "STEP"), help=hidden)
    p.add_argument("--debug-hang-at", type=int, nargs=2, metavar=("RANK", "STEP"), help=hidden)


def options_from_args(args: argparse.Namespace):
    from bertkit.training.loop import TrainConfig
    from bertkit.training.pretraining import PretrainOptions

    train = options.values(
        args,
        TrainConfig,
        _HOW,
        dest_prefix="train_",
        precision=args.precision,
        peak_flops=None if args.peak_tflops is None else args.peak_tflops * 1e12,
        show_progress=args.progress,
    )
    return options.values(args, PretrainOptions, train=train)


def faults_from_args(args: argparse.Namespace):
    from bertkit.training.faults import Faults

    no_restore = args.debug_no_restore or ""
    return Faults(
        restore_rng=no_restore not in ("rng", "both"),
        restore_cursor=no_restore not in ("cursor", "both"),
        checkpoint_write_delay=args.debug_checkpoint_delay,
        nan_at_attempts=frozenset(args.debug_nan_at),
        fail_checkpoint_at=frozenset(args.debug_fail_checkpoint),
        raise_at=tuple(args.debug_raise_at) if args.debug_raise_at else None,
        hang_at=tuple(args.debug_hang_at) if args.debug_hang_at else None,
    )


def run(args: argparse.Namespace) -> int:
    from bertkit.training.objectives import OBJECTIVES
    from bertkit.training.pretraining import pretrain

    result = pretrain(options_from_args(args), faults=faults_from_args(args))
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun rank 0 alone reports the run
        return 0
    if result.final_eval:
        print(f"held-out {OBJECTIVES[args.objective]().describe(result.final_eval)}")
    print(f"done: {result.summary}; model in {args.output / 'model'}")
    return 0
