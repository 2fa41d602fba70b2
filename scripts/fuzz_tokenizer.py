"""Long tokenizer fuzzing: millions of adversarial Unicode strings, fresh seeds, optional real vocab.

    .venv/bin/python scripts/fuzz_tokenizer.py [--strings 2000000] [--seconds 600] [--seed N]
        [--vocab path/to/vocab.txt] [--workers 2]

Each worker runs batches of 10^5 strings with its own seed (seed, seed+1, ...) through four
tokenizer settings (uncased, cased, max 3 characters per word, no accent stripping / CJK
splitting), checking the invariants of tests/scenarios/fuzz.py: no exception, ids in range,
valid offsets, the fast path agreeing with the full encoding. Stops after ``--strings`` strings or
``--seconds`` seconds; a failure prints the seed, the index and the string (which reproduce it)
and exits 1.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
BATCH = 100_000


def _worker(vocab: str, seeds: list[int], deadline: float) -> tuple[int, str | None]:
    from bertkit.tokenizer import BertTokenizer
    from scenarios.fuzz import fuzz

    toks = [
        BertTokenizer(vocab),
        BertTokenizer(vocab, do_lower_case=False),
        BertTokenizer(vocab, max_input_chars_per_word=3),
        BertTokenizer(vocab, strip_accents=False, tokenize_chinese_chars=False),
    ]
    done = 0
    for seed in seeds:
        if time.time() > deadline:
            break
        try:
            done += fuzz(toks, seed, BATCH)
        except AssertionError as e:
            return done, str(e)
    return done, None


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--strings", type=int, default=2_000_000)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    ap.add_argument("--vocab", type=Path, default=ROOT / "tests" / "fixtures" / "tok_vocab.txt")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    first = args.seed if args.seed is not None else random.randrange(2**31)
    batches = max(1, -(-args.strings // BATCH))
    seeds = [first + i for i in range(batches)]
    chunks = [seeds[w :: args.workers] for w in range(args.workers)]
    deadline = time.time() + args.seconds
    t0 = time.perf_counter()
    print(
        f"fuzzing {batches * BATCH} strings, seeds {first}..{first + batches - 1}, "
        f"vocab {args.vocab}, {args.workers} worker(s)",
        flush=True,
    )
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = pool.starmap(_worker, [(str(args.vocab), c, deadline) for c in chunks if c])
    total = sum(n for n, _ in results)
    seconds = time.perf_counter() - t0
    failures = [f for _, f in results if f]
    print(f"{total} strings in {seconds:.1f}s ({total / seconds:.0f} strings/s)")
    for f in failures:
        print("FAILURE: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
