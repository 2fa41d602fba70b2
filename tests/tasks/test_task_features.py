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
    pad_token_windows,
    word_predictions,
)
from bertkit.tokenizer import BertTokenizer

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_pairs_get_segment_ids_like_hf(bk_tok, hf_tok):
    examples = read_glue_split(FIXTURES / "task_glue", "MRPC", "train")
    ours = encode_classification(bk_tok, examples, max_length=16)
    for ex, enc in zip(examples, ours):
        ref = hf_tok(ex.text_a, ex.text_b, truncation="longest_first", max_length=16)
        assert enc.input_ids == ref["input_ids"]
        assert enc.token_type_ids == ref["token_type_ids"]
        assert enc.label == ex.label
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


def _tiny_tokenizer(tmp_path: Path) -> BertTokenizer:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "##x", "##y"])
        + "\n"
    )
    return BertTokenizer(vocab)


# pieces per word: a=1, bxy=3, c=1, dx=2, a=1, b=1 (9 pieces)
WORDS = ("a", "bxy", "c", "dx", "a", "b")
TAGS = ("B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG")


def test_long_sentence_split_into_windows_without_loss(tmp_path):
    tok = _tiny_tokenizer(tmp_path)
    l2i = {"O": 0, "B-PER": 1, "I-PER": 2, "B-LOC": 3, "B-ORG": 4}
    sent = TaggedSentence(WORDS, TAGS)
    wins = encode_tagged(tok, [sent], l2i, max_length=6)  # 4 pieces per window
    assert [w.core for w in wins] == [(0, 2), (2, 5), (5, 6)]
    assert [w.word_ids for w in wins] == [
        [None, 0, 1, 1, 1, None],
        [None, 2, 3, 3, 4, None],
        [None, 5, None],
    ]
    assert wins[1].labels == [IGNORE_INDEX, 0, 3, IGNORE_INDEX, 0, IGNORE_INDEX]
    assert all(len(w.input_ids) <= 6 for w in wins)
    ctx = encode_tagged(tok, [sent], l2i, max_length=8, context=1)
    assert [w.core for w in ctx] == [(0, 2), (2, 5), (5, 6)]
    assert [[x for x in w.word_ids if x is not None] for w in ctx] == [
        [0, 1, 1, 1, 2],  # right context: "c"
        [2, 3, 3, 4, 5],  # right context: "b" ("bxy" is too long for 1 piece of context)
        [4, 5],  # left context: "a"
    ]
    # context words are never labelled
    assert ctx[0].labels[-2] == IGNORE_INDEX and ctx[2].labels[1] == IGNORE_INDEX
    # every word is labelled exactly once across the windows
    labelled = [w.word_ids[i] for w in ctx for i, y in enumerate(w.labels) if y != IGNORE_INDEX]
    assert sorted(labelled) == list(range(len(WORDS)))


def test_word_predictions_rebuild_every_word(tmp_path):
    tok = _tiny_tokenizer(tmp_path)
    sents = [list(WORDS), ["c", "dx"]]
    wins = encode_tagged(tok, sents, max_length=8, context=1)
    # predict "10 * word index + 1" on each word's first piece, junk elsewhere
    preds = []
    for w in wins:
        p = np.full(len(w.input_ids) + 2, -7)
        for pos, wi in w.label_positions():
            p[pos] = 10 * wi + 1
        preds.append(p)
    assert word_predictions(wins, preds, [6, 2]) == [[1, 11, 21, 31, 41, 51], [1, 11]]
    with pytest.raises(ValueError, match="sentence 1: some words got no prediction"):
        word_predictions(wins, preds, [6, 3])
    batch = pad_token_windows(wins)
    assert batch["labels"].shape == batch["input_ids"].shape
    assert (batch["labels"] == IGNORE_INDEX).all()  # no tags given


def test_word_without_pieces_gets_unk(tmp_path):
    tok = _tiny_tokenizer(tmp_path)
    (w,) = encode_tagged(tok, [["a", "\u200b", "b"]], max_length=128)
    assert w.input_ids == [2, 5, 1, 6, 3] and w.word_ids == [None, 0, 1, 2, None]


def test_context_too_large_rejected(tmp_path):
    with pytest.raises(ValueError, match="leaves no room"):
        encode_tagged(_tiny_tokenizer(tmp_path), [["a"]], max_length=6, context=2)


def test_unknown_tag_is_reported_with_line(tmp_path):
    sent = TaggedSentence(("a", "b"), ("O", "B-EVENT"), line=42)
    with pytest.raises(
        ValueError, match=r"sentence 0 \(line 42\): tag 'B-EVENT' is not in the label list"
    ):
        encode_tagged(_tiny_tokenizer(tmp_path), [sent], {"O": 0}, max_length=128)


def test_a_word_longer_than_a_window_keeps_only_its_first_pieces(tmp_path):
    """ "bxy" has 3 pieces; with max_length 4 a window holds 2: the word is cut to its first 2
    pieces (label on the first), never dropped and never overflowing the window."""
    tok = _tiny_tokenizer(tmp_path)
    l2i = {"O": 0, "B-PER": 1, "I-PER": 2}
    sent = TaggedSentence(("a", "bxy", "c"), ("B-PER", "I-PER", "O"))
    wins = encode_tagged(tok, [sent], l2i, max_length=4)
    assert all(len(w.input_ids) <= 4 for w in wins)
    long = next(w for w in wins if 1 in w.word_ids)
    assert long.word_ids == [None, 1, 1, None]  # 2 of its 3 pieces
    assert long.labels[1] == 2 and long.labels[2] == IGNORE_INDEX
    labelled = [w.word_ids[i] for w in wins for i, y in enumerate(w.labels) if y != IGNORE_INDEX]
    assert sorted(labelled) == [0, 1, 2]


def test_context_never_overflows_a_window_around_an_over_long_core(tmp_path):
    """A word longer than the core budget is a core group of its own; context words are added
    only while the window still fits (here "a" on the left fits, "c" on the right would not)."""
    tok = _tiny_tokenizer(tmp_path)
    sent = TaggedSentence(("a", "bxy", "c"), ("O", "O", "O"))
    wins = encode_tagged(tok, [sent], {"O": 0}, max_length=6, context=1)  # content 4, core 2
    assert all(len(w.input_ids) <= 6 for w in wins)
    middle = next(w for w in wins if w.core == (1, 2))
    assert middle.word_ids == [None, 0, 1, 1, 1, None]  # left context "a", no room for "c"


def test_multiple_choice_pads_with_the_pad_id(tmp_path):
    from bertkit.tasks.features import EncodedInput, pad_multiple_choice

    items = [
        [EncodedInput([2, 7, 3], [0, 0, 0], [1, 1, 1], 0), EncodedInput([2, 3], [0, 0], [1, 1], 0)]
    ]
    batch = pad_multiple_choice(items)
    assert batch["input_ids"].tolist() == [[[2, 7, 3], [2, 3, 0]]]  # default pad id 0
    assert pad_multiple_choice(items, pad_id=9)["input_ids"].tolist() == [[[2, 7, 3], [2, 3, 9]]]
    assert batch["attention_mask"].tolist() == [[[1, 1, 1], [1, 1, 0]]]
