"""Pairs, truncation strategies, stride windows, padding, tensors and batch/worker encoding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertkit.tokenizer import BertTokenizer
from bertkit.tokenizer.encoding import truncation_lengths, windows

VOCAB = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"
TEN = "one two three four five six seven eight nine ten"


@pytest.fixture(scope="module")
def tok() -> BertTokenizer:
    return BertTokenizer(VOCAB)


def words(tok: BertTokenizer, ids: list[int]) -> str:
    return " ".join(tok.convert_ids_to_tokens(ids))


def test_pair_fields(tok: BertTokenizer) -> None:
    enc = tok.encode("hello", "big world")
    assert words(tok, enc.input_ids) == "[CLS] hello [SEP] [UNK] world [SEP]"  # no "##g"
    assert enc.token_type_ids == [0, 0, 0, 1, 1, 1]
    assert enc.offsets == [(0, 0), (0, 5), (0, 0), (0, 3), (4, 9), (0, 0)]  # B indexes text B
    assert enc.sequence_ids == [None, 0, None, 1, 1, None]
    assert enc.word_ids == [None, 0, None, 0, 1, None]
    assert enc.special_tokens_mask == [1, 0, 1, 0, 0, 1]
    plain = tok.encode("hello", "world", add_special_tokens=False)
    assert plain.input_ids == [27, 28] and plain.token_type_ids == [0, 1]


def test_truncation_strategies(tok: BertTokenizer) -> None:
    a, b = "one two three four five six", "a b c"
    # longest_first: room 5 for 6 + 3 tokens -> both cut, the longer keeps the odd token
    assert words(tok, tok.encode(a, b, max_length=8).input_ids) == (
        "[CLS] one two three [SEP] a b [SEP]"
    )
    assert words(tok, tok.encode(a, b, max_length=10, truncation="only_first").input_ids) == (
        "[CLS] one two three four [SEP] a b c [SEP]"
    )
    assert words(tok, tok.encode(a, b, max_length=10, truncation="only_second").input_ids) == (
        "[CLS] one two three four five six [SEP] a [SEP]"
    )
    assert words(tok, tok.encode(a, max_length=4).input_ids) == "[CLS] one two [SEP]"
    # nothing to cut: unchanged
    assert len(tok.encode(a, b, max_length=50)) == 12
    assert tok.encode(a, b, max_length=8, truncation=False).input_ids == tok.encode(a, b).input_ids
    with pytest.raises(ValueError, match="second sequence has 3 tokens"):
        tok.encode(a, b, max_length=6, truncation="only_second")
    with pytest.raises(ValueError, match="needs a second sequence"):
        tok.encode(a, max_length=4, truncation="only_second")


def test_longest_first_lengths() -> None:
    assert truncation_lengths(6, 3, 5, "longest_first") == (3, 2)
    assert truncation_lengths(3, 6, 5, "longest_first") == (2, 3)
    assert truncation_lengths(10, 2, 5, "longest_first") == (3, 2)  # only the longer is cut
    assert truncation_lengths(4, 4, 5, "longest_first") == (2, 3)
    assert truncation_lengths(9, None, 5, "longest_first") == (5, None)


def test_stride_windows_single(tok: BertTokenizer) -> None:
    assert windows(10, 4, 1) == [(0, 4), (3, 7), (6, 10)]
    enc = tok.encode(TEN, max_length=6, stride=1, return_overflowing_tokens=True)
    got = [words(tok, e.input_ids) for e in [enc, *enc.overflowing]]
    assert got == [
        "[CLS] one two three four [SEP]",
        "[CLS] four five six seven [SEP]",
        "[CLS] seven eight nine ten [SEP]",
    ]
    assert enc.overflowing[0].offsets[1] == (14, 18)  # "four" in the original text
    assert enc.overflowing[0].word_ids[1:-1] == [3, 4, 5, 6]
    # without return_overflowing_tokens only the first window comes back
    assert tok.encode(TEN, max_length=6, stride=1).overflowing == []
    with pytest.raises(ValueError, match="stride"):
        tok.encode(TEN, max_length=6, stride=4, return_overflowing_tokens=True)


def test_squad_style_windows(tok: BertTokenizer) -> None:
    enc = tok.encode(
        "a b",
        TEN,
        max_length=9,
        truncation="only_second",
        stride=2,
        return_overflowing_tokens=True,
    )
    got = [words(tok, e.input_ids) for e in [enc, *enc.overflowing]]
    assert got == [
        "[CLS] a b [SEP] one two three four [SEP]",
        "[CLS] a b [SEP] three four five six [SEP]",
        "[CLS] a b [SEP] five six seven eight [SEP]",
        "[CLS] a b [SEP] seven eight nine ten [SEP]",
    ]
    last = enc.overflowing[-1]
    assert last.token_type_ids == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert last.offsets[4:8] == [(28, 33), (34, 39), (40, 44), (45, 48)]  # into the context
    assert last.sequence_ids == [None, 0, 0, None, 1, 1, 1, 1, None]


def test_longest_first_overflow_order(tok: BertTokenizer) -> None:
    enc = tok.encode("one two three four", "a b c d", max_length=7, return_overflowing_tokens=True)
    got = [words(tok, e.input_ids) for e in [enc, *enc.overflowing]]
    assert got == [
        "[CLS] one two [SEP] a b [SEP]",
        "[CLS] three four [SEP] a b [SEP]",
        "[CLS] three four [SEP] c d [SEP]",
        "[CLS] one two [SEP] c d [SEP]",
    ]


def test_batch_padding_and_tensors(tok: BertTokenizer) -> None:
    out = tok(["hello world", "hi"], padding="longest", return_tensors="np")
    assert out["input_ids"].dtype == np.int64
    assert out["input_ids"].tolist() == [[2, 27, 28, 3], [2, 29, 3, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert out["token_type_ids"].tolist() == [[0, 0, 0, 0], [0, 0, 0, 0]]
    fixed = tok(
        ["hello world", "hi"],
        ["a", "b c"],
        padding="max_length",
        truncation="longest_first",
        max_length=9,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
    )
    assert fixed["input_ids"] == [[2, 27, 28, 3, 44, 3, 0, 0, 0], [2, 29, 3, 45, 46, 3, 0, 0, 0]]
    assert fixed["token_type_ids"][1] == [0, 0, 0, 1, 1, 1, 0, 0, 0]
    assert fixed["special_tokens_mask"][1] == [1, 0, 1, 0, 0, 1, 1, 1, 1]
    assert fixed["offset_mapping"][1][3:] == [(0, 1), (2, 3), (0, 0), (0, 0), (0, 0), (0, 0)]
    torch = pytest.importorskip("torch")
    pt = tok(
        ["hello world", "hi"], padding="longest", return_tensors="pt", return_offsets_mapping=True
    )
    assert pt["input_ids"].dtype == torch.int64
    assert pt["offset_mapping"].shape == (2, 4, 2)
    assert pt["offset_mapping"].dtype == torch.int64
    assert pt["offset_mapping"].tolist() == [
        [[0, 0], [0, 5], [6, 11], [0, 0]],
        [[0, 0], [0, 2], [0, 0], [0, 0]],
    ]
    assert tok(["hi", "hello world"], padding=False)["input_ids"] == [[2, 29, 3], [2, 27, 28, 3]]
    with pytest.raises(ValueError, match="different lengths"):
        tok(["hi", "hello world"], padding=False, return_tensors="np")


def test_batch_overflow_mapping(tok: BertTokenizer) -> None:
    out = tok(
        ["hi", TEN],
        padding="longest",
        truncation="longest_first",
        max_length=6,
        stride=1,
        return_overflowing_tokens=True,
        return_tensors="np",
    )
    assert out["overflow_to_sample_mapping"].tolist() == [0, 1, 1, 1]
    assert out["input_ids"].shape == (4, 6)


def test_encode_batch_workers_match_serial(tok: BertTokenizer) -> None:
    texts = [f"{TEN} hello {i} world" for i in range(40)] + ["", "中文", "UNwant\u00e9d"]
    pairs = [f"a b {i}" for i in range(len(texts))]
    kw = {"max_length": 12, "stride": 2, "return_overflowing_tokens": True}
    serial = tok.encode_batch(texts, pairs, num_workers=1, **kw)
    parallel = tok.encode_batch(texts, pairs, num_workers=2, chunk_size=8, **kw)
    assert parallel == serial
    assert parallel[0].overflowing and parallel[0].word_ids == serial[0].word_ids


def test_encode_batch_restores_gc_state(tok: BertTokenizer) -> None:
    import gc

    assert gc.isenabled()
    tok.encode_batch(["hello world"] * 3)
    assert gc.isenabled()
    gc.disable()
    try:
        tok.encode_batch(["hello world"] * 3)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_encode_arrays_match_encodings(tok: BertTokenizer) -> None:
    texts = [f"{TEN} hello {i} world" for i in range(30)] + ["", "中文", "UNwant\u00e9d"]
    pairs = [f"a b {i}" for i in range(len(texts))]
    encs = tok.encode_batch(texts, pairs, max_length=12)
    for workers in (1, 2):
        arr = tok.encode_arrays(texts, pairs, max_length=12, num_workers=workers, chunk_size=8)
        assert len(arr) == len(texts)
        for i, e in enumerate(encs):
            lo, hi = arr.row_splits[i], arr.row_splits[i + 1]
            assert arr.row(i).tolist() == e.input_ids
            assert arr.token_type_ids[lo:hi].tolist() == e.token_type_ids
            assert [tuple(o) for o in arr.offsets[lo:hi].tolist()] == e.offsets
    assert len(tok.encode_arrays([])) == 0
    with pytest.raises(ValueError, match="overflow"):
        tok.encode_arrays(texts, max_length=6, return_overflowing_tokens=True)


def test_flat_offsets_match_offsets(tok: BertTokenizer) -> None:
    # offsets are stored flat (uint32 s0, e0, s1, e1, ...) and turned into tuples on access
    enc = tok.encode(
        "UNwant\u00e9d hello", "big world", max_length=7, return_overflowing_tokens=True
    )
    for e in (enc, *enc.overflowing):
        flat = e.flat_offsets.tolist()
        assert e.flat_offsets.typecode == "I"
        assert list(zip(flat[::2], flat[1::2])) == e.offsets
        assert len(e.offsets) == len(e.input_ids)
    assert enc.offsets == [(0, 0), (0, 2), (2, 6), (0, 0), (0, 3), (4, 9), (0, 0)]
    assert enc.overflowing[0].offsets == [(0, 0), (6, 8), (9, 14), (0, 0), (0, 3), (4, 9), (0, 0)]
