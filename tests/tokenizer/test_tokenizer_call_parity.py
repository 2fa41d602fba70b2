"""``tok(...)`` against transformers' BertTokenizerFast on the same vocabulary: exact outputs.

Both tokenizers are built from tests/fixtures/tok_vocab.txt. Each case compares the whole
returned mapping: key names and order, flat lists for a single text or pair, lists of rows for a
batch, padding (right side, [PAD] / type 0 / attention 0 / special 1 / offsets (0, 0)),
truncation with and without ``max_length`` (``model_max_length`` standing in), overflow rows
and ``overflow_to_sample_mapping``, and numpy arrays / torch tensors (dtype, shape, values).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertkit.tokenizer import VERY_LARGE_INTEGER, BertTokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

VOCAB = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"
TEN = "one two three four five six seven eight nine ten"
TEXTS = ["hello world", "hi", "", "UNwant\u00e9d,running", TEN, "Café 中文字 [MASK] x"]
PAIRS = ["a b c", "one two three four", "x", "", "hello", "d"]


def hf_tokenizer(tmp: Path, **config: Any):
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "vocab.txt").write_bytes(VOCAB.read_bytes())
    (tmp / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, **config}))
    ref = transformers.BertTokenizerFast.from_pretrained(tmp)
    # guard against an empty-vocabulary reference (a transformers 5 pitfall)
    assert ref("hello world")["input_ids"] == [2, 27, 28, 3]
    return ref


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(ours, theirs) with no model maximum."""
    return BertTokenizer(VOCAB), hf_tokenizer(tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def pair6(tmp_path_factory):
    """(ours, theirs) with model_max_length 6, ours read from the same tokenizer_config.json."""
    ref = hf_tokenizer(tmp_path_factory.mktemp("hf6"), model_max_length=6)
    return BertTokenizer.from_pretrained(Path(ref.name_or_path)), ref


def assert_same(ours: dict[str, Any], theirs: Any) -> None:
    theirs = dict(theirs)
    assert list(ours) == list(theirs)
    for key, want in theirs.items():
        got = ours[key]
        if isinstance(want, np.ndarray):
            assert isinstance(got, np.ndarray), key
            assert (got.dtype, got.shape) == (want.dtype, want.shape), key
            assert got.tolist() == want.tolist(), key
        elif type(want).__module__.startswith("torch"):
            assert type(got) is type(want), key
            assert (got.dtype, tuple(got.shape)) == (want.dtype, tuple(want.shape)), key
            assert got.tolist() == want.tolist(), key
        else:
            assert type(got) is type(want), key
            assert got == want, key  # also tells tuples (offsets) from lists


def compare(ours: BertTokenizer, theirs: Any, *args: Any, **kw: Any) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the padding=True + max_length notice: tested apart
        got = ours(*args, **kw)
        assert_same(got, theirs(*args, **kw))
    return got


# (args, kwargs): single texts and pairs, batches, every padding / truncation setting
CASES = [
    (("hello world",), {}),
    (("hello world", "hi"), {}),
    (("hello world", ""), {}),  # an empty pair string is no pair (transformers' rule)
    ((TEN,), {"return_offsets_mapping": True, "return_special_tokens_mask": True}),
    ((TEXTS,), {}),
    ((TEXTS, PAIRS), {}),
    ((TEXTS, PAIRS), {"return_offsets_mapping": True, "return_special_tokens_mask": True}),
    ((TEXTS,), {"padding": True}),
    ((TEXTS, PAIRS), {"padding": "longest", "return_offsets_mapping": True}),
    ((TEXTS, PAIRS), {"padding": "max_length", "max_length": 20}),
    ((TEXTS,), {"padding": "max_length", "max_length": 6}),  # longer rows stay longer
    ((TEXTS,), {"padding": "max_length"}),  # no max_length, no model maximum: no padding
    ((TEXTS,), {"padding": "do_not_pad", "truncation": "do_not_truncate"}),
    ((TEXTS,), {"padding": False, "truncation": False, "max_length": 5}),
    ((TEXTS,), {"max_length": 5}),  # max_length alone truncates (longest_first)
    ((TEXTS,), {"padding": True, "max_length": 5}),  # ...but not with padding
    ((TEXTS,), {"truncation": True}),  # no max_length, no model maximum: nothing cut
    ((TEXTS, PAIRS), {"truncation": True, "max_length": 7}),
    ((TEXTS, PAIRS), {"truncation": "longest_first", "max_length": 8, "padding": True}),
    (([TEN, TEN], PAIRS[:2]), {"truncation": "only_first", "max_length": 9}),
    ((PAIRS[:2], [TEN, TEN]), {"truncation": "only_second", "max_length": 9}),
    (
        (["what", "who is"], [TEN, TEN]),
        {
            "truncation": "only_second",
            "max_length": 10,
            "stride": 2,
            "return_overflowing_tokens": True,
            "return_offsets_mapping": True,
            "padding": "max_length",
        },
    ),
    ((TEXTS,), {"truncation": True, "max_length": 5, "return_overflowing_tokens": True}),
    ((TEN,), {"max_length": 5, "stride": 1, "return_overflowing_tokens": True}),  # batched
    ((TEXTS,), {"return_attention_mask": False}),
    ((TEXTS, PAIRS), {"return_token_type_ids": False, "padding": True}),
    (("hi",), {"return_attention_mask": False, "return_token_type_ids": False}),
    (("hi",), {"return_attention_mask": True, "return_token_type_ids": True}),
    ((TEXTS,), {"add_special_tokens": False, "padding": True}),
    ((TEXTS, PAIRS), {"add_special_tokens": False, "truncation": True, "max_length": 3}),
    ((("hello world", "hi"),), {}),  # a tuple is a batch
]


@pytest.mark.parametrize(("args", "kw"), CASES)
def test_lists_match(pair, args, kw) -> None:
    compare(*pair, *args, **kw)


def test_single_text_is_flat(pair) -> None:
    got = compare(*pair, "hello world", return_offsets_mapping=True)
    assert got["input_ids"] == [2, 27, 28, 3]
    assert got["offset_mapping"] == [(0, 0), (0, 5), (6, 11), (0, 0)]
    got = compare(*pair, "hello world", "hi")
    assert got["token_type_ids"] == [0, 0, 0, 0, 1, 1]
    assert compare(*pair, ["hello world"])["input_ids"] == [[2, 27, 28, 3]]


@pytest.mark.parametrize("tensors", ["np", "pt"])
@pytest.mark.parametrize(
    ("args", "kw"),
    [
        (("hello world",), {}),  # a single text gets a batch dimension of 1
        (("hello world", "a b"), {"return_offsets_mapping": True}),
        ((TEXTS,), {"padding": True}),
        ((TEXTS, PAIRS), {"padding": "longest", "return_offsets_mapping": True}),
        ((TEXTS, PAIRS), {"padding": "max_length", "max_length": 24}),
        (
            (TEXTS, PAIRS),
            {
                "padding": True,
                "truncation": True,
                "max_length": 6,
                "return_special_tokens_mask": True,
            },
        ),
        (
            ([TEN, "hi"],),
            {
                "padding": True,
                "truncation": True,
                "max_length": 5,
                "stride": 1,
                "return_overflowing_tokens": True,
            },
        ),
        ((TEXTS,), {"padding": True, "return_attention_mask": False}),
    ],
)
def test_tensors_match(pair, tensors, args, kw) -> None:
    if tensors == "pt":
        pytest.importorskip("torch")
    compare(*pair, *args, return_tensors=tensors, **kw)


def test_ragged_tensors_fail(pair) -> None:
    """Rows of different lengths make no tensor (transformers: ValueError for "pt", an object
    array of rows for "np"; bertkit raises for both)."""
    pytest.importorskip("torch")
    ours, theirs = pair
    with pytest.raises(ValueError, match="Unable to create tensor"):
        theirs(TEXTS, return_tensors="pt")
    for tensors in ("np", "pt"):
        with pytest.raises(ValueError, match="different lengths"):
            ours(TEXTS, return_tensors=tensors)


def test_too_short_to_truncate_fails_in_both(pair) -> None:
    ours, theirs = pair
    args = (["hi"], ["one two three four"])
    with pytest.raises(Exception, match="too short"):
        theirs(*args, truncation="only_first", max_length=7)
    with pytest.raises(ValueError, match="too few"):
        ours(*args, truncation="only_first", max_length=7)


def test_padding_true_with_max_length_warns_like_transformers(pair) -> None:
    ours, theirs = pair
    with pytest.warns(UserWarning) as hf_warned:
        theirs(TEXTS, padding=True, max_length=5)
    with pytest.warns(UserWarning) as ours_warned:
        ours(TEXTS, padding=True, max_length=5)
    assert [str(w.message) for w in ours_warned] == [str(w.message) for w in hf_warned]


# --- model_max_length --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kw"),
    [
        ((TEXTS,), {"truncation": True}),  # truncates to model_max_length
        ((TEXTS, PAIRS), {"truncation": "longest_first", "padding": True}),
        ((TEXTS, PAIRS), {"truncation": True, "return_overflowing_tokens": True}),
        ((TEXTS,), {"padding": "max_length"}),  # pads to model_max_length, cuts nothing
        ((TEXTS,), {"padding": "max_length", "truncation": True}),
        ((TEXTS,), {"padding": "max_length", "max_length": 8}),  # max_length wins
        ((TEXTS,), {"truncation": True, "max_length": 9}),  # above the model maximum: allowed
        ((TEN,), {"truncation": True}),
        ((TEXTS,), {"truncation": True, "return_tensors": "np", "padding": True}),
    ],
)
def test_model_max_length_matches(pair6, args, kw) -> None:
    ours, theirs = pair6
    assert ours.model_max_length == theirs.model_max_length == 6
    compare(ours, theirs, *args, **kw)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _logged(logger_name: str, fn) -> tuple[Any, list[str]]:
    logger = logging.getLogger(logger_name)
    handler = _Records()
    logger.addHandler(handler)
    try:
        return fn(), handler.messages
    finally:
        logger.removeHandler(handler)


def test_too_long_warning_matches_transformers(tmp_path: Path) -> None:
    """No cut, and the same one-time warning per tokenizer, naming the first row over the
    maximum; a new tokenizer warns again."""
    hf_name, our_name = "transformers.tokenization_utils_base", "bertkit.tokenizer.tokenizer"
    calls = [
        lambda t: t(["hi", "one two three four five six seven", TEN]),  # 9 > 6 first
        lambda t: t(TEN + " one"),  # already warned: silent
        lambda t: t(TEN, truncation=True),  # cut: silent anyway
    ]
    for run in range(2):  # fresh tokenizers: the warning comes again
        theirs = hf_tokenizer(tmp_path / f"hf{run}", model_max_length=6)
        ours = BertTokenizer.from_pretrained(tmp_path / f"hf{run}")
        hf_log, our_log = [], []
        for call in calls:
            want, hf_msgs = _logged(hf_name, lambda: call(theirs))  # noqa: B023
            got, our_msgs = _logged(our_name, lambda: call(ours))  # noqa: B023
            assert_same(got, want)
            hf_log.append(hf_msgs)
            our_log.append(our_msgs)
        assert our_log == hf_log
        assert [len(m) for m in our_log] == [1, 0, 0]
        assert "(9 > 6)" in our_log[0][0]
    quiet = BertTokenizer(VOCAB, model_max_length=6)
    assert _logged(our_name, lambda: quiet(TEN, verbose=False))[1] == []


def test_too_long_warning_text(tmp_path: Path) -> None:
    ours = BertTokenizer(VOCAB, model_max_length=6)
    got, msgs = _logged("bertkit.tokenizer.tokenizer", lambda: ours([TEN]))
    assert len(got["input_ids"][0]) == 12  # nothing cut
    assert msgs == [
        "Token indices sequence length is longer than the specified maximum sequence length "
        "for this model (12 > 6). Running this sequence through the model will result in "
        "indexing errors"
    ]


def test_save_pretrained_keeps_model_max_length_for_transformers(tmp_path: Path) -> None:
    BertTokenizer(VOCAB, model_max_length=6).save_pretrained(tmp_path / "six")
    assert transformers.BertTokenizerFast.from_pretrained(tmp_path / "six").model_max_length == 6
    BertTokenizer(VOCAB).save_pretrained(tmp_path / "none")
    config = json.loads((tmp_path / "none" / "tokenizer_config.json").read_text())
    assert "model_max_length" not in config
    ref = transformers.BertTokenizerFast.from_pretrained(tmp_path / "none")
    assert ref.model_max_length == VERY_LARGE_INTEGER


def test_reads_what_transformers_writes(tmp_path: Path) -> None:
    for limit in (6, None):
        ref = hf_tokenizer(
            tmp_path / str(limit), **({} if limit is None else {"model_max_length": 6})
        )
        out = tmp_path / f"saved{limit}"
        ref.save_pretrained(out)  # tokenizer.json and tokenizer_config.json (no vocab.txt)
        (out / "vocab.txt").write_bytes(VOCAB.read_bytes())
        assert "model_max_length" in json.loads((out / "tokenizer_config.json").read_text())
        ours = BertTokenizer.from_pretrained(out)
        assert ours.model_max_length == ref.model_max_length
        assert (ours.model_max_length == VERY_LARGE_INTEGER) == (limit is None)


def test_config_json_is_not_consulted(tmp_path: Path) -> None:
    """Like transformers: max_position_embeddings in config.json sets no tokenizer maximum."""
    (tmp_path / "vocab.txt").write_bytes(VOCAB.read_bytes())
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "bert", "max_position_embeddings": 8})
    )
    ref = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert BertTokenizer.from_pretrained(tmp_path).model_max_length == ref.model_max_length
    assert ref.model_max_length == VERY_LARGE_INTEGER
