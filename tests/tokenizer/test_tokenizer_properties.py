"""Properties over arbitrary Unicode, and linear time on long space-free input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit.tokenizer import BertTokenizer, Vocab
from bertkit.tokenizer.wordpiece import wordpiece

VOCAB = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"
TOKENIZERS = {
    "uncased": BertTokenizer(VOCAB),
    "cased": BertTokenizer(VOCAB, do_lower_case=False),
    "tiny-max-chars": BertTokenizer(VOCAB, max_input_chars_per_word=3),
}

# every code point category, lone surrogates included, plus characters that stress cleaning
TRICKY = st.sampled_from(
    [
        "\u200b",
        "\u200d",
        "\ufeff",
        "\ue000",
        "\U000f0000",
        "\x00",
        "\x7f",
        "\ufffd",
        "\ud800",
        "\udfff",
        "\u0301",
        "[CLS]",
        "[MASK]",
        "[SEP",
        " ",
        "\t",
        "\n",
        "\u3000",
        "中",
        "Σ",
        "İ",
        "ﬁ",
        "e\u0301",
        "≠",
        "\u1fef",
        ",",
        "##",
    ]
)
ANY_CHAR = st.characters(blacklist_categories=())
TEXT = st.lists(st.one_of(ANY_CHAR, TRICKY), max_size=40).map("".join)
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))


def check(tok: BertTokenizer, text: str, enc, seq: int) -> None:
    """Ids in range; offsets inside the text, ordered and non-decreasing, for sequence ``seq``."""
    assert all(0 <= i < len(tok) for i in enc.input_ids)
    spans = [o for o, s in zip(enc.offsets, enc.sequence_ids) if s == seq]
    for start, end in spans:
        assert 0 <= start <= end <= len(text)
    assert [s for s, _ in spans] == sorted(s for s, _ in spans)
    assert [e for _, e in spans] == sorted(e for _, e in spans)
    for o, s in zip(enc.offsets, enc.sequence_ids):
        if s is None:
            assert o == (0, 0)


@SETTINGS
@given(text=TEXT, pair=TEXT, name=st.sampled_from(sorted(TOKENIZERS)))
def test_never_raises_and_offsets_are_sane(text: str, pair: str, name: str) -> None:
    tok = TOKENIZERS[name]
    single = tok.encode(text)
    check(tok, text, single, 0)
    both = tok.encode(text, pair)
    check(tok, text, both, 0)
    check(tok, pair, both, 1)
    # the fast paths agree with the full encoding
    assert tok.encode_ids(text) == single.input_ids[1:-1]
    assert [i for w in tok.encode_words(text) for i in w] == single.input_ids[1:-1]
    words = [w for w in single.word_ids if w is not None]
    assert words == sorted(words)
    for piece in tok.tokenize(text):
        assert piece in tok.vocab


@SETTINGS
@given(text=TEXT, max_length=st.integers(3, 12), stride=st.integers(0, 2))
def test_truncated_windows_cover_everything(text: str, max_length: int, stride: int) -> None:
    tok = TOKENIZERS["uncased"]
    stride = min(stride, max_length - 3)  # a stride must be smaller than the room left
    full = tok.encode(text, add_special_tokens=False).input_ids
    enc = tok.encode(text, max_length=max_length, stride=stride, return_overflowing_tokens=True)
    windows = [e.input_ids[1:-1] for e in [enc, *enc.overflowing]]
    assert all(len(e) <= max_length for e in [enc, *enc.overflowing])
    # windows overlap by `stride` tokens and together reproduce the sequence
    rebuilt = list(windows[0])
    for w in windows[1:]:
        assert w[:stride] == rebuilt[len(rebuilt) - stride :]
        rebuilt += w[stride:]
    assert rebuilt == full


def _cpu_seconds(tok: BertTokenizer, text: str) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        tok.segment(text)
        best = min(best, time.process_time() - t0)
    return best


def _growth_ratio(tok: BertTokenizer, text: str) -> float:
    """CPU time on ``text`` four times over, divided by the time on ``text``. Linear work gives
    4 and quadratic 16; the tests draw the line at their geometric mean, 8, so that timing noise
    (a factor of 1.3 on a shared machine) cannot decide them."""
    tok.segment(text[:1000])  # warm-up
    return _cpu_seconds(tok, text * 4) / max(_cpu_seconds(tok, text), 1e-6)


@pytest.mark.slow  # wall-clock based: noisy on a shared machine, so not in the default run
@pytest.mark.parametrize("unit", ["ab", "é中,"], ids=["letters", "mixed"])
def test_linear_time_without_spaces(unit: str) -> None:
    text = unit * (50_000 // len(unit))
    assert _growth_ratio(TOKENIZERS["uncased"], text) <= 8


class _CountingDict(dict):
    """A vocabulary dict that counts lookups: a machine-independent measure of matching cost."""

    lookups = 0

    def get(self, key, default=None):
        _CountingDict.lookups += 1
        return super().get(key, default)


def _wordpiece_lookups(word: str, vocab: dict[str, int]) -> int:
    table = _CountingDict(vocab)
    _CountingDict.lookups = 0
    pieces = wordpiece(word, table, max(len(t.removeprefix("##")) for t in vocab))
    assert pieces is not None
    return _CountingDict.lookups


def test_long_word_matching_cost_is_linear() -> None:
    # Greedy longest-match over one huge word: candidates are bounded by the longest vocabulary
    # token, so doubling the word doubles the dictionary lookups (no quadratic rescans).
    vocab = {"[UNK]": 0, "a": 1, "##a": 2, "##aa": 3, "##aaa": 4}
    tok = BertTokenizer(Vocab(list(vocab)), max_input_chars_per_word=10**9)
    assert tok.tokenize("aaaaaaa") == ["a", "##aaa", "##aaa"]
    n = _wordpiece_lookups("a" * 100_000, vocab)
    n2 = _wordpiece_lookups("a" * 200_000, vocab)
    assert n2 <= 2 * n + 10
    assert n <= 6 * 100_000  # a bounded number of lookups per character


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["ab", "é中,", "word-"], ids=["letters", "mixed", "punct"])
def test_linear_time_one_megabyte(unit: str) -> None:
    text = unit * (250_000 // len(unit))  # four times over: ~1 MB of characters, no spaces
    assert _growth_ratio(TOKENIZERS["uncased"], text) <= 8
