"""Classification, multiple-choice and NER feature conversion (parity with HF recipes + windows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertkit.data.tasks.conll import TaggedSentence, read_conll
from bertkit.data.tasks.glue import read_glue_split
from bertkit.data.tasks.swag import read_swag
from bertkit.tasks.features import (
    IGNORE_INDEX,
    encode_classification,
    encode_multiple_choice,
    encode_tagged,
    pad_batch,
    pad_multiple_choice,
)
from bertkit.tasks.windows import WindowConfig

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_pairs_get_segment_ids_like_hf(bk_tok, hf_tok):
    """With --truncate, pairs are cut longest-first exactly as transformers cuts them."""
    examples = read_glue_split(FIXTURES / "task_glue", "MRPC", "train")
    ours = encode_classification(
        bk_tok, examples, max_length=16, windows=WindowConfig(truncate=True)
    )
    for ex, enc in zip(examples, ours):
        ref = hf_tok(ex.text_a, ex.text_b, truncation="longest_first", max_length=16)
        assert enc.input_ids == ref["input_ids"]
        assert enc.token_type_ids == ref["token_type_ids"]
        assert enc.label == ex.label
        assert enc.truncated == (len(hf_tok(ex.text_a, ex.text_b)["input_ids"]) > 16)
    sep = enc.input_ids.index(bk_tok.sep_token_id)
    assert set(enc.token_type_ids[: sep + 1]) == {0} and set(enc.token_type_ids[sep + 1 :]) == {1}
    batch = pad_batch(ours, bk_tok.pad_token_id)
    assert batch["input_ids"].shape == (3, 16) and batch["labels"].tolist() == [1, 0, 1]
    single = encode_classification(
        bk_tok, read_glue_split(FIXTURES / "task_glue", "STS-B", "dev"), max_length=128
    )
    assert pad_batch(single)["labels"].dtype == np.float32


def test_multiple_choice_shape(bk_tok, hf_tok):
    examples = read_swag(FIXTURES / "task_swag.csv")
    enc = encode_multiple_choice(bk_tok, examples, max_length=32)
    batch = pad_multiple_choice(enc, bk_tok.pad_token_id)
    b, c, _ = batch["input_ids"].shape
    assert (b, c) == (3, 4) and batch["labels"].tolist() == [0, 1, 2]
    ref = hf_tok("The chef slices an onion.", "Then, she adds it to the hot pan.")
    assert batch["input_ids"][2, 2, : len(ref["input_ids"])].tolist() == ref["input_ids"]
    assert batch["attention_mask"][2, 2].sum() == len(ref["input_ids"])


def test_ner_first_subtoken_labels_match_hf_recipe(bk_tok, hf_tok):
    sents = read_conll(FIXTURES / "task_conll.txt")
    labels = sorted({t for s in sents for t in s.tags})
    l2i = {t: i for i, t in enumerate(labels)}
    windows = encode_tagged(bk_tok, sents, l2i, max_length=64)
    assert len(windows) == len(sents)
    for s, w in zip(sents, windows):
        ref = hf_tok(list(s.tokens), is_split_into_words=True, truncation=True, max_length=64)
        ref_labels, prev = [], None
        for wid in ref.word_ids():
            ref_labels.append(IGNORE_INDEX if wid is None or wid == prev else l2i[s.tags[wid]])
            prev = wid
        assert w.input_ids == ref["input_ids"]
        assert w.word_ids == ref.word_ids()
        assert w.labels == ref_labels


def test_word_without_pieces_gets_unk(tiny_tok):

    (w,) = encode_tagged(tiny_tok, [["a", "\u200b", "b"]], max_length=128)
    assert w.input_ids == [2, 5, 1, 6, 3] and w.word_ids == [None, 0, 1, 2, None]


def test_unknown_tag_is_reported_with_line(tiny_tok):
    sent = TaggedSentence(("a", "b"), ("O", "B-EVENT"), line=42)
    with pytest.raises(
        ValueError, match=r"sentence 0 \(line 42\): tag 'B-EVENT' is not in the label list"
    ):
        encode_tagged(tiny_tok, [sent], {"O": 0}, max_length=128)


def test_multiple_choice_pads_with_the_pad_id(tmp_path):
    from bertkit.tasks.features import EncodedInput, pad_multiple_choice

    items = [
        [EncodedInput([2, 7, 3], [0, 0, 0], [1, 1, 1], 0), EncodedInput([2, 3], [0, 0], [1, 1], 0)]
    ]
    batch = pad_multiple_choice(items)
    assert batch["input_ids"].tolist() == [[[2, 7, 3], [2, 3, 0]]]  # default pad id 0
    assert pad_multiple_choice(items, pad_id=9)["input_ids"].tolist() == [[[2, 7, 3], [2, 3, 9]]]
    assert batch["attention_mask"].tolist() == [[[1, 1, 1], [1, 1, 0]]]
