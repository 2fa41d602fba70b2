"""SQuAD windows and answer positions: hand cases and parity with the Hugging Face QA recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.data.tasks.squad import SquadAnswer, SquadExample, read_squad
from bertkit.tasks.squad_features import (
    SquadFeatureConfig,
    answer_token_span,
    convert_squad_examples,
)
from bertkit.tasks.windows import WindowConfig, max_context_flags, slice_starts

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_slice_starts_overlap_and_step():
    assert slice_starts(10, 4, 1, "overlap") == [0, 3, 6]
    assert slice_starts(10, 4, 1, "step") == [0, 1, 2, 3, 4, 5, 6]
    assert slice_starts(10, 4, 3, "step") == [0, 3, 6]
    assert slice_starts(3, 4, 1, "overlap") == [0]
    assert slice_starts(0, 4, 1, "overlap") == [0]
    with pytest.raises(ValueError, match="must be smaller than the slice length"):
        slice_starts(10, 4, 4, "overlap")


def test_max_context_prefers_the_most_central_window():
    # slices [0,4), [2,6), [4,8) over 8 tokens; token 3 is central in slice 1 (min(1,2)) vs
    # slice 0 (min(3,0)); token 2: slice 0 gives min(2,1)=1, slice 1 gives min(0,3)=0 -> slice 0
    flags = max_context_flags([0, 2, 4], 8, 4)
    assert flags == [
        [True, True, True, False],
        [False, True, True, False],
        [False, True, True, True],
    ]


def test_answer_token_span():
    offs = [(0, 3), (4, 9), (9, 12)]
    assert answer_token_span(offs, 4, 12) == (1, 2)
    assert answer_token_span(offs, 5, 8) == (1, 1)  # inside one token
    assert answer_token_span(offs, 0, 13) is None  # ends past the window
    assert answer_token_span(offs[1:], 0, 3) is None  # starts before the window


def _hf_windows(hf_tok, examples, max_len, stride):
    """The Hugging Face run_qa.py prepare_train_features logic (reference for the test)."""
    out = []
    for ex in examples:
        enc = hf_tok(
            ex.question.lstrip(),
            ex.context,
            truncation="only_second",
            max_length=max_len,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        for i, ids in enumerate(enc["input_ids"]):
            offsets = enc["offset_mapping"][i]
            seq = enc.sequence_ids(i)
            if not ex.answers:
                out.append((ids, enc["token_type_ids"][i], 0, 0))
                continue
            start_char = ex.answers[0].start
            end_char = start_char + len(ex.answers[0].text)
            ts = seq.index(1)
            te = len(ids) - 1
            while seq[te] != 1:
                te -= 1
            if not (offsets[ts][0] <= start_char and offsets[te][1] >= end_char):
                out.append((ids, enc["token_type_ids"][i], 0, 0))
                continue
            while ts < len(offsets) and offsets[ts][0] <= start_char:
                ts += 1
            while offsets[te][1] >= end_char:
                te -= 1
            out.append((ids, enc["token_type_ids"][i], ts - 1, te + 1))
    return out


@pytest.mark.parametrize(("max_len", "stride"), [(384, 128), (32, 8), (24, 4)])
def test_windows_and_positions_match_hf(bk_tok, hf_tok, max_len, stride):
    examples = read_squad(FIXTURES / "task_squad_v1.json")
    cfg = SquadFeatureConfig(WindowConfig(doc_stride=stride), max_query_length=16)
    ours = convert_squad_examples(bk_tok, examples, max_len, cfg, is_training=True)
    ref = _hf_windows(hf_tok, examples, max_len, stride)
    assert len(ours) == len(ref)
    assert [(f.input_ids, f.token_type_ids, f.start_position, f.end_position) for f in ours] == ref
    if max_len < 384:
        assert len(ours) > len(examples)  # really several windows
        assert any(f.start_position == 0 for f in ours) and any(f.start_position > 0 for f in ours)


def test_positions_point_at_the_answer_and_offsets_map_back(bk_tok):
    examples = read_squad(FIXTURES / "task_squad_v1.json")
    feats = convert_squad_examples(
        bk_tok,
        examples,
        24,
        SquadFeatureConfig(WindowConfig(doc_stride=4), max_query_length=12),
        is_training=True,
    )
    for f in feats:
        ex = examples[f.example_index]
        assert len(f.input_ids) <= 24
        if f.start_position:
            a, b = f.offsets[f.start_position][0], f.offsets[f.end_position][1]
            assert ex.context[a:b] == ex.answers[0].text
        # each context token is max-context in exactly one window
    for ex_i in range(len(examples)):
        counts: dict[tuple[int, int], int] = {}
        for f in (f for f in feats if f.example_index == ex_i):
            for off, flag in zip(f.offsets, f.token_is_max_context):
                if off is not None:
                    counts[off] = counts.get(off, 0) + int(flag)
        assert set(counts.values()) == {1}


def test_question_cut_to_max_query_length_and_impossible_gets_cls(bk_tok):
    ex = SquadExample(
        "x",
        "why " * 30 + "?",
        "Because it rained all day.",
        (),
        is_impossible=True,
        plausible_answers=(SquadAnswer("rained", 11),),
    )
    (f,) = convert_squad_examples(
        bk_tok, [ex], 384, SquadFeatureConfig(max_query_length=10), is_training=True
    )
    assert f.input_ids[11] == bk_tok.sep_token_id and f.doc_offset == 12
    assert (f.start_position, f.end_position) == (0, 0)
    assert f.token_type_ids == [0] * 12 + [1] * (len(f.input_ids) - 12)


def test_config_validation():
    from bertkit.errors import ConfigError  # a one-line CLI error, not a traceback
    from bertkit.tasks.span_qa import SquadAdapter

    with pytest.raises(ConfigError, match="stride_mode"):
        SquadFeatureConfig(WindowConfig(stride_mode="jump"))
    with pytest.raises(ConfigError, match="max_query_length"):
        SquadFeatureConfig(max_query_length=64).check_fits(64)
    with pytest.raises(ConfigError, match="max_query_length"):
        SquadAdapter("squad", "squad1", 64, windows=SquadFeatureConfig(max_query_length=64))
    with pytest.raises(ConfigError, match=r"^truncate, window_pooling: SQuAD reads every window"):
        SquadFeatureConfig(WindowConfig(truncate=True))
    with pytest.raises(ConfigError, match=r"^truncate, window_pooling"):
        SquadFeatureConfig(WindowConfig(window_pooling="max"))


def test_a_question_cut_to_max_query_length_is_counted(bk_tok):
    from bertkit.tasks.span_qa import SquadAdapter

    long_q = " ".join(["why"] * 80) + "?"
    examples = [
        SquadExample("a", long_q, "It rained.", ()),
        SquadExample("b", "Why?", "It rained.", ()),
    ]
    feats = convert_squad_examples(
        bk_tok, examples, 128, SquadFeatureConfig(WindowConfig(doc_stride=32))
    )
    assert [f.truncated for f in feats] == [True, False]
    assert SquadAdapter("squad", "squad1", 128).window_counts(examples, feats).truncated == 1
