"""``bertkit prepare-pretraining``: raw text -> sharded MLM + NSP instances (see
``bertkit.data.prepare``)."""

from __future__ import annotations

import argparse
import os

from bertkit.data.corpus import FORMATS

HELP = "build masked-LM + next-sentence pre-training shards from raw text files"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", nargs="+", required=True, metavar="FILE", help="corpus files")
    p.add_argument("--vocab", required=True, help="vocab.txt (WordPiece, one token a line)")
    p.add_argument("--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--max-seq-length", type=int, required=True, metavar="N")
    p.add_argument(
        "--format", choices=FORMATS, default="auto", help="corpus format (default: auto)"
    )
    p.add_argument("--text-field", default="text", help="JSONL field with the text (default: text)")
    p.add_argument("--cased", action="store_true", help="keep case (default: lower-case)")
    p.add_argument(
        "--dupe-factor",
        type=int,
        default=None,
        help="uses of each document, fresh masks each time (default: 10, or 1 with --dynamic-masking)",
    )
    p.add_argument("--short-seq-prob", type=float, default=0.1)
    p.add_argument("--masked-lm-prob", type=float, default=0.15)
    p.add_argument("--max-predictions-per-seq", type=int, default=20)
    p.add_argument("--whole-word-mask", action="store_true", help="mask all pieces of a word")
    p.add_argument(
        "--balanced-next",
        action="store_true",
        help="single-sentence chunks get an actual-next B half the time (google-research/bert "
        "makes them all random-next, which skews short instances' NSP labels)",
    )
    p.add_argument(
        "--dynamic-masking",
        action="store_true",
        help="store unmasked instances; the collator masks them again each epoch",
    )
    p.add_argument("--num-workers", type=int, default=min(4, os.cpu_count() or 1), metavar="N")
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--shard-size", type=int, default=10_000, help="instances per shard")
    p.add_argument(
        "--holdout-fraction",
        type=float,
        default=0.0,
        help="fraction of documents put in an 'eval' split (default: 0)",
    )
    p.add_argument("--encoding-errors", choices=("strict", "replace"), default="strict")
    p.add_argument(
        "--buffer-docs", type=int, default=1000, help="documents per chunk (memory bound)"
    )
    p.add_argument(
        "--buffer-tokens", type=int, default=250_000, help="tokens per chunk (memory bound)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing output folder")


def run(args: argparse.Namespace) -> int:
    from bertkit.data.prepare import PrepareSettings, prepare_pretraining

    dupe = args.dupe_factor if args.dupe_factor is not None else (1 if args.dynamic_masking else 10)
    settings = PrepareSettings(
        max_seq_length=args.max_seq_length,
        short_seq_prob=args.short_seq_prob,
        dupe_factor=dupe,
        masked_lm_prob=args.masked_lm_prob,
        max_predictions_per_seq=args.max_predictions_per_seq,
        whole_word_mask=args.whole_word_mask,
        balanced_next=args.balanced_next,
        dynamic_masking=args.dynamic_masking,
        do_lower_case=not args.cased,
        seed=args.seed,
        shard_size=args.shard_size,
        holdout_fraction=args.holdout_fraction,
        format=args.format,
        text_field=args.text_field,
        encoding_errors=args.encoding_errors,
        buffer_docs=args.buffer_docs,
        buffer_tokens=args.buffer_tokens,
    )
    summary = prepare_pretraining(
        args.input,
        args.vocab,
        args.output,
        settings,
        num_workers=args.num_workers,
        overwrite=args.overwrite,
    )
    rate = sum(c.instances for c in summary.splits.values()) / max(summary.seconds, 1e-9)
    print(f"prepared {summary.output} from {summary.files} file(s) in {summary.seconds:.1f}s")
    for name, c in summary.splits.items():
        rnd = c.random_next / max(c.instances, 1)
        print(
            f"  {name}: {c.documents} docs, {c.sentences} sentences, {c.tokens} tokens -> "
            f"{c.instances} instances in {len(c.shards)} shard(s), random-next {rnd:.3f}, "
            f"{c.masked / max(c.instances, 1):.2f} masked/instance"
        )
    print(f"  {rate:.0f} instances/s, {summary.output_bytes / 1e6:.1f} MB written")
    return 0
