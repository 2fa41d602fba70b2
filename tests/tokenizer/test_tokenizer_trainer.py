"""Vocabulary training: format, coverage, loadability by Hugging Face, bounded counting."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bertkit.tokenizer import BertTokenizer, train_wordpiece
from bertkit.tokenizer.normalize import Normalizer
from bertkit.tokenizer.trainer import count_words, learn_merges

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "while",
    "the",
    "dog",
    "ran",
    "after",
    "another",
    "cat",
    "in",
    "the",
    "garden",
]


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    extra = ["Zürich", "naïve", "中文", "running", "unwanted", "jumped", "É"]
    return [
        " ".join(rng.choices(WORDS + extra, k=12)) + rng.choice([".", "!", ","]) for _ in range(n)
    ]


def test_merges_follow_pair_frequency() -> None:
    # "ab" is the most frequent pair, then "abc" (ab + ##c): BPE merge order
    tokens = learn_merges({"abc": 10, "ab": 5, "bc": 1}, ["a", "b", "c"], 3, 1)
    assert tokens[:2] == ["ab", "abc"]
    assert learn_merges({"abc": 10}, ["a", "b", "c"], 5, 11) == []  # min_frequency stops


def test_train_small_vocab(tmp_path: Path) -> None:
    texts = corpus(300)
    vocab, stats = train_wordpiece(
        iter(texts), vocab_size=120, min_frequency=2, lowercase=True, output=tmp_path / "vocab.txt"
    )
    tokens = vocab.id_to_token
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(tokens) == len(set(tokens)) == stats.vocab_size <= 120
    seen = set("".join(Normalizer(True).normalize_word(w)[0] for t in texts for w in t.split()))
    for ch in seen:  # every character, as a word start and as a continuation
        assert ch in vocab and "##" + ch in vocab
    assert "the" in vocab and "cat" in vocab  # frequent words became whole tokens
    assert all(t == t.lower() for t in tokens[5:])
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines() == tokens
    # deterministic
    again, _ = train_wordpiece(iter(texts), vocab_size=120, min_frequency=2)
    assert again.id_to_token == tokens
    tok = BertTokenizer(tmp_path / "vocab.txt")
    assert tok.tokenize("the cat") == ["the", "cat"]
    assert "[UNK]" not in tok.tokenize(" ".join(texts[:20]))


def test_trained_vocab_loads_in_huggingface(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    texts = corpus(200, seed=1)
    for cased in (False, True):
        path = tmp_path / f"vocab-{cased}.txt"
        train_wordpiece(texts, vocab_size=150, lowercase=not cased, output=path)
        ours = BertTokenizer(path, do_lower_case=not cased)
        ref = tokenizers.BertWordPieceTokenizer(str(path), lowercase=not cased)
        assert ref.get_vocab_size() == len(ours)
        for text in texts[:50]:
            enc = ref.encode(text)
            mine = ours.encode(text)
            assert (enc.ids, enc.offsets) == (mine.input_ids, mine.offsets)
        if cased:
            assert "Zürich"[0] in ours.vocab and "É" in ours.vocab


def test_counting_is_bounded() -> None:
    # 2000 distinct rare words and a few frequent ones; the table never exceeds max_words
    texts = [f"common word rare{i} common" for i in range(2000)]
    counts, n_texts, n_words, prunes = count_words(iter(texts), Normalizer(True), 100)
    assert n_texts == 2000 and n_words == 8000
    assert prunes > 0 and len(counts) <= 100
    assert counts["common"] >= 3000 and counts["word"] >= 1500  # frequent words survive
    vocab, stats = train_wordpiece(iter(texts), vocab_size=60, max_words=100)
    assert stats.prunes > 0 and "common" in vocab


def test_vocab_too_small_for_alphabet() -> None:
    with pytest.raises(ValueError, match="smaller than the specials plus the alphabet"):
        train_wordpiece(["abcdefghij"], vocab_size=10)
