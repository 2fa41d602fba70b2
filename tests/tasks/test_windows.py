"""Long inputs: the window invariants every family relies on (coverage, max context, pairs,
aggregation, truncation counts, document context regrouped per sentence)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from bertkit.data.tasks.conll import TaggedSentence, read_conll
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.tasks.classification import ClassificationAdapter
from bertkit.tasks.features import (
    IGNORE_INDEX,
    EncodedInput,
    encode_classification,
    encode_tagged,
    word_predictions,
)
from bertkit.tasks.tagging import TaggingAdapter, documents, tag_label_list
from bertkit.tasks.windows import (
    WindowConfig,
    WindowCounts,
    aggregate,
    plan_pair,
    slices,
)

FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.mark.parametrize("mode", ["overlap", "step"])
def test_every_token_is_covered_and_has_exactly_one_max_context_window(mode):
    for n in range(1, 40):
        for room in range(2, 12):
            for stride in range(1, room):
                wins = slices(n, room, stride, mode=mode)
                covered = [0] * n
                best = [0] * n
                for w in wins:
                    assert 0 < w.stop - w.start <= room and len(w.is_max) == w.stop - w.start
                    for k, pos in enumerate(range(w.start, w.stop)):
                        covered[pos] += 1
                        best[pos] += w.is_max[k]
                assert min(covered) >= 1 and best == [1] * n, (n, room, stride)
                if mode == "overlap" and len(wins) > 1:  # neighbours share doc_stride tokens
                    assert all(a.stop - b.start == stride for a, b in itertools.pairwise(wins))


def test_max_context_is_the_window_with_the_most_tokens_on_the_shorter_side():
    """10 tokens, room 4, stride 2: windows 0-3, 2-5, 4-7, 6-9 (google's score)."""
    wins = slices(10, 4, 2)
    assert [(w.start, w.stop) for w in wins] == [(0, 4), (2, 6), (4, 8), (6, 10)]
    owner = {
        pos: i
        for i, w in enumerate(wins)
        for k, pos in enumerate(range(w.start, w.stop))
        if w.is_max[k]
    }
    assert [owner[p] for p in range(10)] == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]


def test_truncate_keeps_one_window():
    (w,) = slices(10, 4, 2, truncate=True)
    assert (w.start, w.stop) == (0, 4)


def test_pair_plan_keeps_the_first_segment_whole_when_it_fits():
    p = plan_pair(4, 30, 16, 5)
    assert (p.slide, p.keep_len, p.cut) == ("b", 4, False)
    p = plan_pair(30, 4, 16, 5)  # first too long, second short: the second is kept whole
    assert (p.slide, p.keep_len, p.cut) == ("a", 4, False)
    p = plan_pair(30, 30, 16, 5)  # both long: the first is cut to half the room
    assert (p.slide, p.keep_len, p.cut) == ("b", 6, True)
    assert plan_pair(5, 5, 16, 5).slide == "b"  # fits: one window


def _ids(tok, text):
    return list(tok.encode(text, add_special_tokens=False).input_ids)


def test_classification_windows_cover_the_text_and_keep_the_question(bk_tok):
    long = " ".join(f"word{i}" for i in range(60))
    content = _ids(bk_tok, long)
    single = encode_classification(
        bk_tok, [ClassificationExample("0", long, None, 1)], 16, WindowConfig(doc_stride=4)
    )
    assert len(single) > 1 and all(len(w.input_ids) <= 16 for w in single)
    assert {w.example_index for w in single} == {0} and {w.label for w in single} == {1}
    seen = [w.input_ids[1:-1] for w in single]
    assert seen[0] == content[:14]
    flat = seen[0] + [t for s in seen[1:] for t in s[4:]]  # neighbours share 4 tokens
    assert flat == content
    q = "is it good?"
    pair = encode_classification(
        bk_tok, [ClassificationExample("0", q, long, 1)], 24, WindowConfig(doc_stride=4)
    )
    head = [bk_tok.cls_token_id, *_ids(bk_tok, q), bk_tok.sep_token_id]
    assert len(pair) > 1 and all(w.input_ids[: len(head)] == head for w in pair)
    assert all(
        w.token_type_ids == [0] * len(head) + [1] * (len(w.input_ids) - len(head)) for w in pair
    )
    assert not any(w.truncated for w in pair)


def test_truncate_counts_the_inputs_it_cut(bk_tok):
    long = " ".join(f"word{i}" for i in range(60))
    examples = [
        ClassificationExample(str(i), t, None, 0) for i, t in enumerate([long, "short", long])
    ]
    cut = encode_classification(bk_tok, examples, 16, WindowConfig(truncate=True))
    adapter = ClassificationAdapter("classify", "x", 16, labels=["a", "b"])
    assert len(cut) == 3
    assert adapter.window_counts(examples, cut) == WindowCounts(3, 0, 3, 2)
    win = encode_classification(bk_tok, examples, 16, WindowConfig(doc_stride=4))
    counts = adapter.window_counts(examples, win)
    assert (counts.inputs, counts.windowed, counts.truncated) == (3, 2, 0)
    assert counts.windows == len(win) > 3
    assert "2 windowed into" in counts.summary()


def test_aggregate_mean_is_token_weighted_and_max_elementwise():
    rows = np.array([[0.0, 2.0], [4.0, 0.0], [1.0, 1.0]])
    mean = aggregate(rows, [0, 0, 1], [3, 1, 5], 2, "mean")
    np.testing.assert_allclose(mean, [[1.0, 1.5], [1.0, 1.0]])
    np.testing.assert_allclose(aggregate(rows, [0, 0, 1], [3, 1, 5], 2, "max"), [[4, 2], [1, 1]])
    with pytest.raises(ValueError, match="no window"):
        aggregate(rows, [0, 0, 2], [1, 1, 1], 3, "mean")


def test_classifier_predicts_from_the_pooled_window_logits():
    """One input, two windows: a 1-token window votes label 0 strongly, a 9-token window label 1
    weakly; the token-weighted mean says 1, the max says 0."""
    feats = [
        EncodedInput([2, 5, 3], [0] * 3, [1] * 3, None, 0),
        EncodedInput([2] + [5] * 9 + [3], [0] * 11, [1] * 11, None, 0),
    ]
    rows = [np.array([3.0, 0.0]), np.array([0.0, 1.0])]
    ex = [ClassificationExample("0", "t", None, None)]
    mean = ClassificationAdapter("classify", "x", 16, labels=["neg", "pos"])
    assert mean.score(ex, feats, rows).predictions[0]["label"] == "pos"
    mx = ClassificationAdapter(
        "classify", "x", 16, labels=["neg", "pos"], windows=WindowConfig(window_pooling="max")
    )
    assert mx.score(ex, feats, rows).predictions[0]["label"] == "neg"


# pieces: a | b ##x ##y | c | d ##x | a | b  (9 pieces; first pieces at 0, 1, 4, 5, 7, 8)
WORDS = ("a", "bxy", "c", "dx", "a", "b")
TAGS = ("B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG")
L2I = {"O": 0, "B-PER": 1, "I-PER": 2, "B-LOC": 3, "B-ORG": 4}


def test_tagging_reads_each_word_from_its_max_context_window(tiny_tok):
    wins = encode_tagged(
        tiny_tok,
        [TaggedSentence(WORDS, TAGS)],
        L2I,
        max_length=6,
        windows=WindowConfig(doc_stride=2),
    )
    # piece windows 0-3, 2-5, 4-7, 6-8 (as test_max_context_... for 9 pieces)
    assert [w.word_ids for w in wins] == [
        [None, 0, 1, 1, 1, None],
        [None, 1, 1, 2, 3, None],
        [None, 2, 3, 3, 4, None],
        [None, 3, 4, 5, None],
    ]
    # training labels: every first piece in every window holding it ("bxy" in window 1 is not)
    assert wins[1].labels == [IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 0, 3, IGNORE_INDEX]
    assert wins[3].labels == [IGNORE_INDEX, IGNORE_INDEX, 0, 4, IGNORE_INDEX]
    preds = []  # "100 * window + word" on every first piece
    for k, w in enumerate(wins):
        p = np.full(len(w.input_ids) + 2, -7)
        for pos, wid in enumerate(w.word_ids):
            if wid is not None and w.first_piece[pos]:
                p[pos] = 100 * k + wid
        preds.append(p)
    # first pieces 0, 1, 4, 5, 7, 8 have their max context in windows 0, 0, 1, 2, 3, 3
    assert word_predictions(wins, preds, [6]) == [[0, 1, 102, 203, 304, 305]]
    with pytest.raises(ValueError, match="sentence 0: some words got no prediction"):
        word_predictions(wins[:2], preds[:2], [6])


def test_tagging_truncate_cuts_and_fills(tiny_tok):

    (w,) = encode_tagged(tiny_tok, [list(WORDS)], max_length=6, windows=WindowConfig(truncate=True))
    assert w.truncated and w.word_ids == [None, 0, 1, 1, 1, None]
    assert word_predictions([w], [[0, 7, 8, 9, 9, 0]], [6], fill=0) == [[7, 8, 0, 0, 0, 0]]


def test_document_context_windows_documents_and_scores_per_sentence(bk_tok):
    sents = read_conll(FIXTURES / "task_conll.txt")
    assert len(documents(sents)) == 2 < len(sents)
    labels = tag_label_list(sents)
    for doc in (False, True):
        adapter = TaggingAdapter(
            "ner", "x", 6, labels=labels, document_context=doc, windows=WindowConfig(doc_stride=2)
        )
        feats = adapter.encode(bk_tok, sents, training=True)
        counts = adapter.window_counts(sents, feats)
        assert counts.inputs == (2 if doc else len(sents)) and counts.windows == len(feats)
        if doc:
            assert counts.windowed == 2  # both documents need several 6-token windows
        # an oracle that predicts the gold tag on every labelled piece scores F1 = 1 per sentence
        rows = [np.where(np.asarray(f.labels) == IGNORE_INDEX, 0, f.labels) for f in feats]
        scored = adapter.score(sents, feats, rows)
        assert scored.main == 1.0
        assert [p["tokens"] for p in scored.predictions] == [list(s.tokens) for s in sents]
        assert [p["tags"] for p in scored.predictions] == [list(s.tags) for s in sents]
        # a wrong prediction in the document's last window lands in its last sentence only
        rows[-1] = np.where(rows[-1] > 0, 0, rows[-1])
        bad = adapter.score(sents, feats, rows).predictions
        assert bad[:-1] == scored.predictions[:-1] and bad[-1] != scored.predictions[-1]


def test_saved_tagger_state_from_before_windows_still_loads():
    state = {"family": "ner", "name": "x", "max_seq_length": 128, "labels": ["O"], "context": 16}
    adapter = TaggingAdapter.from_state(state)
    assert adapter.windows == WindowConfig() and not adapter.document_context
    again = TaggingAdapter.from_state({k: v for k, v in adapter.state().items() if k != "format"})
    assert again == adapter


def test_inputs_that_fit_are_encoded_as_before(bk_tok, hf_tok):
    """One window, the same ids and segment ids as the tokenizer (and transformers) give."""
    from bertkit.data.tasks.glue import read_glue_split

    examples = read_glue_split(FIXTURES / "task_glue", "MRPC", "train")
    windows = encode_classification(bk_tok, examples, 128)
    assert [w.example_index for w in windows] == list(range(len(examples)))
    for ex, w in zip(examples, windows):
        ref = hf_tok(ex.text_a, ex.text_b)
        assert w.input_ids == ref["input_ids"] and w.token_type_ids == ref["token_type_ids"]
        assert not w.truncated
