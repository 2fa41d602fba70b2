"""Exact tokens, ids and offsets on a hand-made vocabulary (tests/fixtures/tok_vocab.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.errors import ConfigError, InputError
from bertkit.tokenizer import BertTokenizer, Vocab

VOCAB = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"


@pytest.fixture(scope="module")
def uncased() -> BertTokenizer:
    return BertTokenizer(VOCAB, do_lower_case=True)


@pytest.fixture(scope="module")
def cased() -> BertTokenizer:
    return BertTokenizer(VOCAB, do_lower_case=False)


def toks_offsets(tok: BertTokenizer, text: str) -> list[tuple[str, tuple[int, int]]]:
    seg = tok.segment(text)
    return list(zip(tok.convert_ids_to_tokens(seg.ids), seg.offsets))


def test_google_example_uncased(uncased: BertTokenizer) -> None:
    text = "UNwant\u00e9d,running"
    assert uncased.tokenize(text) == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert toks_offsets(uncased, text) == [
        ("un", (0, 2)),
        ("##want", (2, 6)),
        ("##ed", (6, 8)),
        (",", (8, 9)),
        ("runn", (9, 13)),
        ("##ing", (13, 16)),
    ]


def test_google_example_cased(cased: BertTokenizer) -> None:
    # cased keeps "UN" and the accent: UN ##want ##é ##d
    assert cased.tokenize("UNwant\u00e9d,running") == [
        "UN",
        "##want",
        "##é",
        "##d",
        ",",
        "runn",
        "##ing",
    ]


def test_accents_cased_and_uncased() -> None:
    assert BertTokenizer(VOCAB).tokenize("Café") == ["cafe"]
    assert BertTokenizer(VOCAB, do_lower_case=False).tokenize("Café") == ["Café"]
    assert BertTokenizer(VOCAB, strip_accents=False).tokenize("Café") == ["café"]
    assert BertTokenizer(VOCAB, do_lower_case=False, strip_accents=True).tokenize("café") == [
        "cafe"
    ]
    # a decomposed accent (e + U+0301) is dropped; the offset covers only the kept letters
    tok = BertTokenizer(VOCAB)
    assert toks_offsets(tok, "cafe\u0301 x") == [("cafe", (0, 4)), ("x", (6, 7))]


def test_special_tokens_kept_whole(uncased: BertTokenizer) -> None:
    assert toks_offsets(uncased, "[CLS] hi [MASK]") == [
        ("[CLS]", (0, 5)),
        ("hi", (6, 8)),
        ("[MASK]", (9, 15)),
    ]
    assert uncased.tokenize("hi[MASK]hi") == ["hi", "[MASK]", "hi"]
    # matching is on the raw text and case-sensitive, as in Hugging Face
    assert uncased.tokenize("[mask]") == ["[", "[UNK]", "]"]
    assert uncased.encode("[SEP]").special_tokens_mask == [1, 0, 1]  # only added ones count


def test_cjk_characters_are_words(uncased: BertTokenizer) -> None:
    assert toks_offsets(uncased, "中文字x") == [
        ("中", (0, 1)),
        ("文", (1, 2)),
        ("字", (2, 3)),
        ("x", (3, 4)),
    ]
    assert uncased.tokenize("a中b") == ["a", "中", "b"]
    assert BertTokenizer(VOCAB, tokenize_chinese_chars=False).tokenize("a中b") == ["[UNK]"]


def test_control_and_whitespace_characters(uncased: BertTokenizer) -> None:
    # NUL, U+FFFD, zero-width space (Cf) and DEL (Cc) are dropped and join their neighbours
    assert toks_offsets(uncased, "a\x00b") == [("ab", (0, 3))]
    assert toks_offsets(uncased, "hel\u200blo") == [("hello", (0, 6))]
    assert uncased.tokenize("x\x7fy\ufffdz") == ["x", "##y", "##z"]
    assert uncased.tokenize("a\tb\nc\u00a0d\u3000e") == ["a", "b", "c", "d", "e"]
    assert uncased.tokenize("") == []
    assert uncased.tokenize(" \t\u200b ") == []
    assert uncased.encode("\u200b").input_ids == [2, 3]


def test_punctuation_and_unknown(uncased: BertTokenizer) -> None:
    assert uncased.tokenize("hello,world!") == ["hello", ",", "world", "!"]
    assert uncased.tokenize("(a)-b") == ["(", "a", ")", "-", "b"]
    assert uncased.tokenize("hello ☃") == ["hello", "[UNK]"]
    # U+2260 is not punctuation, but after NFD + accent stripping it is "=" (uncased only)
    assert uncased.tokenize("a\u2260b") == ["a", "=", "b"]
    assert BertTokenizer(VOCAB, do_lower_case=False).tokenize("a\u2260b") == ["[UNK]"]


def test_lowercase_is_per_character(uncased: BertTokenizer) -> None:
    # final capital sigma becomes σ (not ς) and İ becomes i, as in BertTokenizerFast
    assert uncased.tokenize("ΟΔΟΣ") == ["ο", "##δ", "##ο", "##σ"]
    assert toks_offsets(uncased, "İstanbul") == [("istanbul", (0, 8))]


def test_max_input_chars_per_word() -> None:
    tok = BertTokenizer(VOCAB, max_input_chars_per_word=5)
    assert toks_offsets(tok, "low lowest") == [("low", (0, 3)), ("[UNK]", (4, 10))]
    assert BertTokenizer(VOCAB).tokenize("a" * 101) == ["[UNK]"]
    assert BertTokenizer(VOCAB).tokenize("lowest") == ["lowest"]


def test_word_ids_and_encode_words(uncased: BertTokenizer) -> None:
    enc = uncased.encode("unwanted, running")
    assert enc.word_ids == [None, 0, 0, 0, 1, 2, 2, None]
    ids = uncased.convert_tokens_to_ids
    assert uncased.encode_words("unwanted, running") == [
        ids(["un", "##want", "##ed"]),
        ids([","]),
        ids(["runn", "##ing"]),
    ]
    assert uncased.encode_ids("unwanted") == ids(["un", "##want", "##ed"])


def test_single_encoding_fields(uncased: BertTokenizer) -> None:
    enc = uncased.encode("hello world")
    assert enc.input_ids == [2, 27, 28, 3]
    assert enc.token_type_ids == [0, 0, 0, 0]
    assert enc.attention_mask == [1, 1, 1, 1]
    assert enc.special_tokens_mask == [1, 0, 0, 1]
    assert enc.offsets == [(0, 0), (0, 5), (6, 11), (0, 0)]
    assert enc.word_ids == [None, 0, 1, None]
    assert enc.sequence_ids == [None, 0, 0, None]
    plain = uncased.encode("hello world", add_special_tokens=False)
    assert plain.input_ids == [27, 28]
    assert plain.special_tokens_mask == [0, 0]


def test_decode(uncased: BertTokenizer) -> None:
    ids = uncased.convert_tokens_to_ids(
        ["[CLS]", "un", "##want", "##ed", ",", "runn", "##ing", "!", "[SEP]", "[PAD]"]
    )
    assert uncased.decode(ids) == "unwanted, running!"
    assert uncased.decode(ids, skip_special_tokens=False) == "[CLS] unwanted, running! [SEP] [PAD]"
    assert uncased.decode([]) == ""


def test_vocab_roundtrip_and_pretrained_dir(tmp_path: Path, uncased: BertTokenizer) -> None:
    vocab = Vocab.from_file(VOCAB)
    assert vocab.token_to_id["[CLS]"] == 2 and vocab.id_to_token[9] == "un"
    vocab.save(tmp_path / "v.txt")
    assert (tmp_path / "v.txt").read_bytes() == VOCAB.read_bytes()
    BertTokenizer(VOCAB, do_lower_case=False).save_pretrained(tmp_path / "tok")
    loaded = BertTokenizer.from_pretrained(tmp_path / "tok")
    assert loaded.do_lower_case is False and len(loaded) == len(uncased)
    assert loaded.tokenize("Hello") == ["Hello"]
    assert (uncased.cls_token_id, uncased.sep_token_id, uncased.pad_token_id) == (2, 3, 0)
    assert (uncased.mask_token_id, uncased.unk_token_id) == (4, 1)


def test_bad_vocab_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"[UNK]\nok\n\xff\n")
    with pytest.raises(InputError, match=r"bad.txt:3: invalid UTF-8"):
        Vocab.from_file(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(InputError, match="empty vocabulary"):
        Vocab.from_file(empty)
    no_unk = tmp_path / "no_unk.txt"
    no_unk.write_text("a\nb\n")
    with pytest.raises(ConfigError, match=r"\[UNK\]"):
        BertTokenizer(no_unk)
