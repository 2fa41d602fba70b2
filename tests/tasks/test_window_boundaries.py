"""Window edges: which window owns a token when the last window is shorter (google's max-context
score), and where a pair stops fitting (which segment slides, when the input counts as cut)."""

from __future__ import annotations

import pytest

from bertkit.data.tasks.glue import ClassificationExample
from bertkit.errors import ConfigError
from bertkit.tasks.features import encode_classification
from bertkit.tasks.windows import WindowConfig, WindowCounts, plan_pair, slice_starts, slices


def _owners(wins) -> list[int]:
    """The index of the window each token has its maximum context in."""
    owner = {
        pos: i
        for i, w in enumerate(wins)
        for k, pos in enumerate(range(w.start, w.stop))
        if w.is_max[k]
    }
    return [owner[p] for p in range(len(owner))]


def _google_owner(starts: list[int], lengths: list[int], pos: int) -> int:
    """google-research/bert run_squad.py ``_check_is_max_context``, transcribed: the window with
    the highest ``min(left, right) + 0.01 * length`` owns the token, the first one on a tie."""
    best_score, best = None, None
    for i, (start, length) in enumerate(zip(starts, lengths)):
        end = start + length - 1
        if start <= pos <= end:
            score = min(pos - start, end - pos) + 0.01 * length
            if best_score is None or score > best_score:
                best_score, best = score, i
    assert best is not None
    return best


def test_a_full_window_beats_a_shorter_last_one_at_equal_context():
    """10 tokens, room 5, stride 3: windows 0-4, 2-6, 4-8 and a shorter 6-9. Token 7 has one
    token of context on its short side in both 4-8 (score 1 + 0.05) and 6-9 (1 + 0.04): the full
    window owns it. Token 3 ties 0-4 and 2-6 exactly (1.05): the first window owns it."""
    wins = slices(10, 5, 3)
    assert [(w.start, w.stop) for w in wins] == [(0, 5), (2, 7), (4, 9), (6, 10)]
    assert _owners(wins) == [0, 0, 0, 0, 1, 1, 2, 2, 3, 3]
    assert [w.is_max for w in wins] == [
        [True, True, True, True, False],
        [False, False, True, True, False],
        [False, False, True, True, False],
        [False, False, True, True],
    ]


def test_step_mode_full_window_beats_the_shorter_last_one():
    """9 tokens, room 4, windows starting 3 apart: 0-3, 3-6 and a 3-token 6-8. Token 6 has no
    context on its right in 3-6 (0 + 0.04) nor on its left in 6-8 (0 + 0.03): the full 3-6 owns
    it. Token 3 ties 0-3 and 3-6 (0.04 each): the first owns it."""
    wins = slices(9, 4, 3, mode="step")
    assert [(w.start, w.stop) for w in wins] == [(0, 4), (3, 7), (6, 9)]
    assert _owners(wins) == [0, 0, 0, 0, 1, 1, 1, 2, 2]


@pytest.mark.parametrize("mode", ["overlap", "step"])
def test_owners_equal_googles_max_context_rule(mode):
    for n in range(2, 30):
        for room in range(2, 9):
            for stride in range(1, room):
                wins = slices(n, room, stride, mode=mode)
                starts = [w.start for w in wins]
                lengths = [w.stop - w.start for w in wins]
                want = [_google_owner(starts, lengths, p) for p in range(n)]
                assert _owners(wins) == want, (n, room, stride)


# max_length 16: 13 content tokens next to [CLS] a [SEP] b [SEP]
@pytest.mark.parametrize(
    ("len_a", "len_b", "stride", "plan"),
    [
        (8, 5, 5, ("b", 8, False)),  # fits exactly: one window, the first segment kept
        (7, 6, 7, ("b", 7, False)),  # fits exactly, neither segment leaves > stride: not cut
        (8, 6, 5, ("a", 6, False)),  # one over; the first leaves exactly the stride: b kept
        (7, 6, 5, ("b", 7, False)),  # fits again one shorter
        (7, 7, 5, ("b", 7, False)),  # one over; the first leaves stride + 1: a kept
        (8, 8, 5, ("b", 6, True)),  # neither leaves more than the stride: a cut to half
        (6, 8, 7, ("b", 6, False)),  # a no longer than half the room: kept whole, not cut
        (7, 8, 7, ("b", 6, True)),  # a one over half the room: cut
    ],
)
def test_pair_plan_at_its_boundaries(len_a, len_b, stride, plan):
    p = plan_pair(len_a, len_b, 16, stride)
    assert (p.slide, p.keep_len, p.cut) == plan


def test_pair_that_fits_exactly_is_one_whole_window_and_one_over_slides_the_first(tiny_tok):
    """Through the encoder: 8 + 5 tokens fill max 16 exactly (one window, not truncated); 8 + 6
    leaves the first segment only the stride, so the first slides past the whole second."""
    a, b5, b6 = "a " * 8, "b " * 5, "b " * 6
    ids = {"a": tiny_tok.convert_tokens_to_ids("a"), "b": tiny_tok.convert_tokens_to_ids("b")}
    cls_id, sep_id = tiny_tok.cls_token_id, tiny_tok.sep_token_id
    (one,) = encode_classification(
        tiny_tok, [ClassificationExample("0", a, b5, 0)], 16, WindowConfig(doc_stride=5)
    )
    assert one.input_ids == [cls_id, *[ids["a"]] * 8, sep_id, *[ids["b"]] * 5, sep_id]
    assert one.token_type_ids == [0] * 10 + [1] * 6 and not one.truncated
    over = encode_classification(
        tiny_tok, [ClassificationExample("0", a, b6, 0)], 16, WindowConfig(doc_stride=5)
    )
    tail = [sep_id, *[ids["b"]] * 6, sep_id]
    assert [w.input_ids for w in over] == [
        [cls_id, *[ids["a"]] * 7, *tail],
        [cls_id, *[ids["a"]] * 6, *tail],  # a's tokens 2-7: they share 5 with the first
    ]
    assert not any(w.truncated for w in over)


def test_a_one_token_room_still_slides_one_token_at_a_time():
    """Room 1 (e.g. a pair whose kept segment leaves one token): the stride drops to 0 and every
    token is its own window; no room at all is an error."""
    for mode, stride in (("overlap", 2), ("step", 1)):
        wins = slices(3, 1, stride, mode=mode)
        assert [(w.start, w.stop, w.is_max) for w in wins] == [
            (0, 1, [True]),
            (1, 2, [True]),
            (2, 3, [True]),
        ], mode
    with pytest.raises(ValueError, match="no room for context tokens"):
        slice_starts(3, 0, 1, "step")


def test_a_stride_of_one_is_accepted_zero_is_not():
    assert WindowConfig(doc_stride=1).stride(384) == 1
    assert WindowConfig().stride(384) == 128 and WindowConfig().stride(2) == 1
    with pytest.raises(ConfigError, match="doc_stride must be at least 1, got 0"):
        WindowConfig(doc_stride=0)


def test_window_counts_summary_and_sum():
    """35 of 872 inputs windowed, 906 windows in all: the 837 others take one window each, so the
    35 were cut into 69."""
    counts = WindowCounts(872, 35, 906, 0)
    assert counts.summary() == "872 inputs: 35 windowed into 69 windows (906 in all), 0 truncated"
    both = counts + WindowCounts(3, 1, 4, 2)
    assert both == WindowCounts(875, 36, 910, 2)
    assert both.summary("line") == (
        "875 lines: 36 windowed into 71 windows (910 in all), 2 truncated"
    )
    one = WindowCounts(1, 1, 2, 0)  # one line cut into one extra window: no "1 lines", "1 windows"
    assert one.summary("line") == "1 line: 1 windowed into 2 windows (2 in all), 0 truncated"
    assert WindowCounts(2, 1, 2, 0).summary() == (
        "2 inputs: 1 windowed into 1 window (2 in all), 0 truncated"
    )
    assert WindowCounts.of([0, 1, 1, 1, 2], cut=[2, 2], inputs=4) == WindowCounts(4, 1, 5, 1)


def test_a_single_input_slides_itself_and_keeps_nothing():
    p = plan_pair(30, None, 16, 5)
    assert (p.slide, p.keep_len, p.cut) == ("a", 0, False)


def test_window_config_from_a_saved_state():
    saved = {"doc_stride": 5, "truncate": True, "window_pooling": "max"}
    assert WindowConfig.of(saved) == WindowConfig(doc_stride=5, truncate=True, window_pooling="max")
    assert WindowConfig.of(None) == WindowConfig() == WindowConfig.of({})
    config = WindowConfig(stride_mode="step")
    assert WindowConfig.of(config) is config
