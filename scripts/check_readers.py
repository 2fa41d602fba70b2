"""Check the task readers against the real data files and their official counts.

Usage: .venv/bin/python scripts/check_readers.py [--data DIR]   (default DIR: ../shared/data)

Reads GLUE SST-2 and MRPC (train/dev/test), CoNLL-2003 train/valid/test and SQuAD v1.1 dev,
and compares row, label, sentence, document, token, entity and question counts with the
official figures (those in each folder's SOURCE.txt). Exits 1 if any count differs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from bertkit.data.tasks.conll import read_conll, tag_spans
from bertkit.data.tasks.glue import read_glue_split
from bertkit.data.tasks.squad import read_squad

# official figures (GLUE download, Tjong Kim Sang & De Meulder 2003, SQuAD v1.1 dev)
GLUE_EXPECTED = {
    ("SST-2", "train"): (67349, {1: 37569, 0: 29780}),
    ("SST-2", "dev"): (872, {1: 444, 0: 428}),
    ("SST-2", "test"): (1821, None),
    ("MRPC", "train"): (3668, {1: 2474, 0: 1194}),
    ("MRPC", "dev"): (408, {1: 279, 0: 129}),
    ("MRPC", "test"): (1725, None),
}
CONLL_EXPECTED = {  # sentences, documents, tokens, entities by type
    "train": (14041, 946, 203621, {"LOC": 7140, "MISC": 3438, "ORG": 6321, "PER": 6600}),
    "valid": (3250, 216, 51362, {"LOC": 1837, "MISC": 922, "ORG": 1341, "PER": 1842}),
    "test": (3453, 231, 46435, {"LOC": 1668, "MISC": 702, "ORG": 1661, "PER": 1617}),
}
SQUAD_EXPECTED = {"articles": 48, "paragraphs": 2067, "questions": 10570}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data"
    )
    args = ap.parse_args()
    ok = True
    rows: list[tuple[str, str, str, str]] = []

    def check(name: str, got: object, want: object, seconds: float) -> None:
        nonlocal ok
        status = "OK" if got == want else "MISMATCH"
        ok &= got == want
        rows.append((name, str(got), str(want), f"{status} ({seconds:.2f}s)"))

    for (task, split), (n, labels) in GLUE_EXPECTED.items():
        t0 = time.perf_counter()
        ex = read_glue_split(args.data / "glue", task, split)
        dt = time.perf_counter() - t0
        got_labels = dict(Counter(e.label for e in ex)) if labels else None
        check(f"GLUE {task} {split} rows, labels", (len(ex), got_labels), (n, labels), dt)

    for split, (n_sent, n_doc, n_tok, ents) in CONLL_EXPECTED.items():
        t0 = time.perf_counter()
        sents = read_conll(args.data / "conll2003" / f"{split}.txt", scheme="IOB2")
        dt = time.perf_counter() - t0
        docs = len({s.document for s in sents})
        toks = sum(len(s.tokens) for s in sents)
        by_type = dict(sorted(Counter(k for s in sents for k, _, _ in tag_spans(s.tags)).items()))
        check(
            f"CoNLL-2003 {split} sentences, docs, tokens, entities",
            (len(sents), docs, toks, by_type),
            (n_sent, n_doc, n_tok, ents),
            dt,
        )

    t0 = time.perf_counter()
    sq = read_squad(args.data / "squad_v1.1" / "dev-v1.1.json")
    dt = time.perf_counter() - t0
    got = {
        "articles": len({e.title for e in sq}),
        "paragraphs": len({(e.title, e.context) for e in sq}),
        "questions": len(sq),
    }
    check("SQuAD v1.1 dev articles, paragraphs, questions", got, SQUAD_EXPECTED, dt)
    bad = sum(e.context[a.start : a.end] != a.text for e in sq for a in e.answers)
    check("SQuAD v1.1 dev answers not at answer_start", bad, 0, 0.0)

    width = max(len(r[0]) for r in rows)
    for name, got_s, want_s, status in rows:
        print(f"{name:<{width}}  {status}\n    got:      {got_s}\n    official: {want_s}")
    print("ALL COUNTS MATCH" if ok else "SOME COUNTS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
