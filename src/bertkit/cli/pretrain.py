"""``bertkit pretrain``: MLM + NSP pre-training on prepared data; rerun the same command to resume."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "pre-train BERT (MLM + NSP) on prepare-pretraining output; rerunning resumes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="prepare-pretraining output folder")
    p.add_argument(
        "--output",
        type=Path,
        required=True,
        help="run folder: checkpoints, metrics.jsonl, curves.png, model/ (resumes if present)",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--model-size", default="tiny", choices=["tiny", "mini", "small", "medium", "base", "large"]
    )
    size.add_argument("--config", type=Path, dest="config_file", help="a BERT config.json instead")
    p.add_argument("--max-steps", type=int, default=1000, help="optimizer updates in total")
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="examples per update, all processes and accumulation steps together",
    )
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per update and process")
    p.add_argument("--learning-rate", type=float, default=1e-4)
    warm = p.add_mutually_exclusive_group()
    warm.add_argument("--warmup-steps", type=int, default=None)
    warm.add_argument("--warmup-proportion", type=float, default=0.01)
    p.add_argument("--optimizer", choices=["adamw", "lamb"], default="adamw")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="override hidden and attention dropout (default: the config's, 0.1)",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="bf16 autocast (CPU or CUDA) or fp16 with a GradScaler (CUDA)",
    )
    p.add_argument("--save-every", type=int, default=1000, help="checkpoint every K updates")
    p.add_argument("--keep-last", type=int, default=3, help="checkpoints to keep")
    p.add_argument("--log-every", type=int, default=10, help="metrics.jsonl line every N updates")
    p.add_argument(
        "--eval-every",
        type=int,
        default=0,
        help="held-out evaluation every N updates (0: at the end only)",
    )
    p.add_argument(
        "--eval-data",
        type=Path,
        default=None,
        help="held-out prepared data (default: the 'eval' split of --data, if any)",
    )
    p.add_argument("--eval-examples", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--phase2-data",
        type=Path,
        default=None,
        help="prepared data for the last phase (e.g. max length 512)",
    )
    p.add_argument(
        "--phase2-fraction",
        type=float,
        default=0.1,
        help="fraction of the updates spent on --phase2-data",
    )
    p.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="warm start: initial weights from a model folder (not a resume)",
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument(
        "--threads", type=int, default=None, help="CPU threads per process (default: torch's)"
    )
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
    # Test-only switches: fault injection and negative controls for the resume tests.
    hidden = argparse.SUPPRESS
    p.add_argument(
        "--debug-no-restore", choices=["rng", "cursor", "both"], default=None, help=hidden
    )
    p.add_argument("--debug-checkpoint-delay", type=float, default=0.0, help=hidden)
    p.add_argument("--debug-nan-at", type=int, nargs="*", default=[], help=hidden)


def options_from_args(args: argparse.Namespace):
    from bertkit.training.loop import TrainConfig
    from bertkit.training.pretraining import PretrainOptions

    no_restore = args.debug_no_restore or ""
    train = TrainConfig(
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        seed=args.seed,
        precision=args.precision,
        log_every=args.log_every,
        eval_every=args.eval_every,
        eval_examples=args.eval_examples,
        save_every=args.save_every,
        keep_last=args.keep_last,
        peak_flops=None if args.peak_tflops is None else args.peak_tflops * 1e12,
        show_progress=args.progress,
        restore_rng=no_restore not in ("rng", "both"),
        restore_cursor=no_restore not in ("cursor", "both"),
        checkpoint_write_delay=args.debug_checkpoint_delay,
        nan_at_attempts=frozenset(args.debug_nan_at),
    )
    return PretrainOptions(
        data=args.data,
        output=args.output,
        model_size=args.model_size,
        config_file=args.config_file,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        warmup_proportion=args.warmup_proportion,
        optimizer=args.optimizer,
        weight_decay=args.weight_decay,
        dropout=args.dropout,
        eval_data=args.eval_data,
        phase2_data=args.phase2_data,
        phase2_fraction=args.phase2_fraction,
        init_from=args.init_from,
        device=args.device,
        threads=args.threads,
        train=train,
    )


def run(args: argparse.Namespace) -> int:
    from bertkit.training.pretraining import pretrain

    result = pretrain(options_from_args(args))
    if result.final_eval:
        e = result.final_eval
        print(f"held-out MLM accuracy {e['mlm_acc']:.4f}  NSP accuracy {e['nsp_acc']:.4f}")
    print(
        f"done: {result.step} steps ({result.skipped} skipped) in {result.seconds:.1f}s; "
        f"model in {args.output / 'model'}"
    )
    return 0
