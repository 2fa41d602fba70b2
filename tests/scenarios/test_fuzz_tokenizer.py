"""Fuzzing: 10^5 adversarial Unicode strings through the tokenizer on every run, bounded in time.

No exception, ids in range, offsets valid (see fuzz.check_encoding for every invariant). The seed
is fixed so a failure reproduces; ``BERTKIT_FUZZ_SEED`` picks another, and
``scripts/fuzz_tokenizer.py`` runs millions of strings with fresh seeds.
"""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.tokenizer import BertTokenizer

from .fuzz import check_encoding, fuzz

VOCAB = Path(__file__).resolve().parents[1] / "fixtures" / "tok_vocab.txt"
N = 100_000


def tokenizers() -> list[BertTokenizer]:
    return [
        BertTokenizer(VOCAB),
        BertTokenizer(VOCAB, do_lower_case=False),
        BertTokenizer(VOCAB, max_input_chars_per_word=3),
        BertTokenizer(VOCAB, strip_accents=False, tokenize_chinese_chars=False),
    ]


def test_checker_catches_broken_offsets(monkeypatch):
    """Negative control: the invariants do fail on an encoding with a bad offset."""
    tok = BertTokenizer(VOCAB)
    enc = tok.encode("hello world")
    enc.offsets[1] = (3, 99)
    monkeypatch.setattr(tok, "encode", lambda *a, **k: enc)
    try:
        check_encoding(tok, "hello world")
    except AssertionError as e:
        assert "outside sequence 0" in str(e)
    else:
        raise AssertionError("a bad offset went unnoticed")


def test_one_hundred_thousand_strings():
    seed = int(os.environ.get("BERTKIT_FUZZ_SEED", "20260101"))
    assert fuzz(tokenizers(), seed, N) == N
