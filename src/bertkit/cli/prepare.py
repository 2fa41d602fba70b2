"""``bertkit prepare-pretraining``: raw text -> sharded MLM + NSP instances (see
``bertkit.data.prepare``). The flags are the fields of ``PrepareSettings`` and its parts."""

from __future__ import annotations

import argparse
import os
import sys

from bertkit.cli import options

HELP = "build masked-LM + next-sentence pre-training shards from raw text files"

_FIELDS = (
    "instance.max_seq_length",
    "corpus.format",
    "corpus.text_field",
    "instance.short_seq_prob",
    "masking.masked_lm_prob",
    "masking.max_predictions_per_seq",
    "masking.mask_ratios",
    "split_special_tokens",
    "masking.whole_word_mask",
    "instance.balanced_next",
    "dynamic_masking",
    "seed",
    "shard_size",
    "holdout_fraction",
    "piece_mib",
    "corpus.encoding_errors",
    "instance.buffer_docs",
    "instance.buffer_tokens",
)
"""The flags, in the order shown: paths into ``PrepareSettings`` (flags and ``args`` are named
by the last part, as in the manifest's flat record)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.data.corpus import FORMATS
    from bertkit.data.prepare import PrepareSettings
    from bertkit.data.pretraining import InstanceConfig
    from bertkit.io import ENCODING_ERRORS

    p.add_argument("--input", nargs="+", required=True, metavar="FILE", help="corpus files")
    p.add_argument("--vocab", required=True, help="vocab.txt (WordPiece, one token a line)")
    p.add_argument("--output", required=True, metavar="DIR", help="output folder")
    options.add_fields(
        p,
        PrepareSettings,
        _FIELDS,
        choices={"corpus.format": FORMATS, "corpus.encoding_errors": ENCODING_ERRORS},
        metavars={"masking.mask_ratios": ("MASK", "SAME", "RANDOM")},
    )
    options.add_cased(p)
    p.add_argument(
        "--dupe-factor",
        type=int,
        default=None,
        help="uses of each document, fresh masks each time "
        f"(default: {InstanceConfig.dupe_factor}, or 1 with --dynamic-masking)",
    )
    p.add_argument("--num-workers", type=int, default=min(4, os.cpu_count() or 1), metavar="N")
    options.add_overwrite(p)
    p.add_argument(
        "--collective-timeout",
        type=float,
        default=86_400.0,
        metavar="SECONDS",
        help="under torchrun: how long a rank waits for the others at the end (the "
        "slowest rank's share of the files); a failing rank stops all at once",
    )


def run(args: argparse.Namespace) -> int:
    import resource
    from pathlib import Path

    from bertkit.data.prepare import PrepareSettings, prepare_pretraining
    from bertkit.data.pretraining import InstanceConfig
    from bertkit.training import distributed as D

    default_dupe = 1 if args.dynamic_masking else InstanceConfig.dupe_factor
    dupe = args.dupe_factor if args.dupe_factor is not None else default_dupe
    flags = options.given(args, _FIELDS) | {"dupe_factor": dupe, "do_lower_case": not args.cased}
    settings = PrepareSettings.from_record(flags)  # every bad value in one error
    info = D.init_from_env("cpu", timeout=args.collective_timeout, kernels=False)  # alone: no-op

    def share(obj):
        out = D.all_gather_json(obj, info)
        D.mark("preparing its files", 0, publish=False)  # what a failing rank was doing
        return out

    with D.reported(info):
        summary = prepare_pretraining(
            args.input,
            args.vocab,
            args.output,
            settings,
            num_workers=args.num_workers,
            overwrite=args.overwrite,
            show_progress=None if info.is_main else False,
            rank=info.rank,
            world=info.world_size,
            share=share,
        )
    if not info.is_main:
        c = summary.splits.get("train")
        print(
            f"rank {info.rank}/{info.world_size}: {summary.files} file(s), "
            f"{c.instances if c else 0} training instances, {summary.seconds:.1f}s"
        )
        return 0
    rate = sum(c.instances for c in summary.splits.values()) / max(summary.seconds, 1e-9)
    print(f"prepared {summary.output} from {summary.files} file(s) in {summary.seconds:.1f}s")
    for name, c in summary.splits.items():
        rnd = c.random_next / max(c.instances, 1)
        print(
            f"  {name}: {c.documents} docs, {c.sentences} sentences, {c.tokens} tokens -> "
            f"{c.instances} instances in {len(c.shards)} shard(s), random-next {rnd:.3f}, "
            f"{c.masked / max(c.instances, 1):.2f} masked/instance"
        )
    held = summary.splits.get("eval")
    if settings.holdout_fraction > 0 and (held is None or held.documents == 0):
        # each document is held out with that probability: a small corpus can draw none
        docs = sum(c.documents for c in summary.splits.values())
        print(
            f"note: --holdout-fraction {settings.holdout_fraction:g} held out none of the "
            f"{docs} documents: pretrain will run no held-out evaluation (raise the fraction, "
            "or give pretrain --eval-data)",
            file=sys.stderr,
        )
    peak = max(
        resource.getrusage(who).ru_maxrss
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    print(
        f"  {rate:.0f} instances/s, {summary.output_bytes / 1e6:.1f} MB written, "
        f"{sum(p.stat().st_size for p in map(Path, args.input)) / 1e6 / max(summary.seconds, 1e-9):.2f} MB/s "
        f"of input; peak RSS {peak / 1024:.0f} MiB (largest process)"
    )
    return 0
