"""SQuAD windows through the shared WindowConfig: frozen against the previous implementation.

``EXPECTED`` was computed once from ``convert_squad_examples`` as it was at commit 14c2d65 (its
own ``SquadFeatureConfig(max_seq_length, doc_stride, max_query_length, stride_mode)`` and its
own slicing entry without the stride clamp), on the MiniLM vocabulary. Per case: a digest of every
field of every feature, and one readable row per window: ``example @first-context-char
max-context-flags start,end`` (``cut``: the question was cut). Saved ``bertkit_task.json`` files
of that version must load with the same settings.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bertkit.data.tasks.squad import SquadExample, read_squad
from bertkit.errors import ConfigError
from bertkit.tasks.registry import TaskSettings, build_task, default_max_seq_length
from bertkit.tasks.saved import adapter_from_state
from bertkit.tasks.span_qa import SquadAdapter
from bertkit.tasks.squad_features import (
    SquadFeatureConfig,
    convert_squad_examples,
    squad_doc_stride,
)
from bertkit.tasks.windows import DEFAULT_MAX_SEQ_LENGTH, WindowConfig

FIXTURES = Path(__file__).parent.parent / "fixtures"

# (fixture, max_seq_length, doc_stride, max_query_length, stride_mode): (digest, windows)
EXPECTED = {
    ("v1", 384, 128, 64, "overlap"): (
        "8b14f0ea17e952fe",
        [
            "0 @0 111111111111111111111 15,15",
            "1 @0 111111111111111111111 24,27",
            "2 @0 11111111111111111111 31,31",
            "3 @0 11111111111111111111 14,18",
        ],
    ),
    ("v1", 32, 8, 16, "overlap"): (
        "dbb5796ed5d2bc76",
        [
            "0 @0 111111111111111111111 15,15",
            "1 @0 11111111111111110000 24,27",
            "1 @63 000011111 12,15",
            "2 @0 111111111111110000 0,0",
            "2 @46 0000111111 21,21",
            "3 @0 11111111111111111111 14,18",
        ],
    ),
    ("v1", 24, 4, 12, "overlap"): (
        "b53e1ae989a1093c",
        [
            "0 @0 1111111111100 15,15",
            "0 @45 001111111111 0,0",
            "1 @0 111111111100 0,0",
            "1 @42 001111111100 16,19",
            "1 @86 00111 0,0",
            "2 @0 1111111100 0,0",
            "2 @26 0011111100 0,0",
            "2 @55 00111111 19,19",
            "3 @0 1111111111100 14,18",
            "3 @43 00111111111 0,0",
        ],
    ),
    ("v1", 24, 4, 12, "step"): (
        "1c3a38a4898caa5d",
        [
            "0 @0 1111111110000 15,15",
            "0 @23 0000011110000 11,11",
            "0 @42 0000011111111 0,0",
            "1 @0 111111110000 0,0",
            "1 @23 000011110000 0,0",
            "1 @42 000011110000 16,19",
            "1 @63 000011111 12,15",
            "2 @0 1111111000 0,0",
            "2 @16 0001111000 0,0",
            "2 @35 0001111000 0,0",
            "2 @55 00011111 19,19",
            "3 @0 1111111110000 14,18",
            "3 @16 0000011110000 10,14",
            "3 @35 000001111111 0,0",
        ],
    ),
    ("v1", 28, 10, 8, "step"): (
        "127d001922f7142d",
        [
            "0 @0 11111111111111000 15,15",
            "0 @49 00001111111 0,0",
            "1 @0 11111111111111000 23,26 cut",
            "1 @49 00001111111 13,16 cut",
            "2 @0 11111111111111000 0,0 cut",
            "2 @46 0000111111 18,18 cut",
            "3 @0 11111111111111000 14,18",
            "3 @46 0000111111 0,0",
        ],
    ),
    ("v2", 384, 128, 64, "overlap"): (
        "4dc631888a710ebd",
        [
            "0 @0 111111111111111111111 15,15",
            "1 @0 111111111111111111111 0,0",
            "2 @0 11111111111111111111 31,31",
            "3 @0 11111111111111111111 0,0",
        ],
    ),
    ("v2", 32, 8, 16, "overlap"): (
        "e6780b195c7966eb",
        [
            "0 @0 111111111111111111111 15,15",
            "1 @0 111111111111111111111 0,0",
            "2 @0 111111111111110000 0,0",
            "2 @46 0000111111 21,21",
            "3 @0 111111111111110000 0,0",
            "3 @46 0000111111 0,0",
        ],
    ),
    ("v2", 24, 4, 12, "overlap"): (
        "07e6e773f558bb29",
        [
            "0 @0 1111111111100 15,15",
            "0 @45 001111111111 0,0",
            "1 @0 1111111111100 0,0",
            "1 @45 001111111111 0,0",
            "2 @0 1111111100 0,0",
            "2 @26 0011111100 0,0",
            "2 @55 00111111 19,19",
            "3 @0 1111111100 0,0",
            "3 @26 0011111100 0,0",
            "3 @55 00111111 0,0",
        ],
    ),
    ("v2", 24, 4, 12, "step"): (
        "2e716d663242679b",
        [
            "0 @0 1111111110000 15,15",
            "0 @23 0000011110000 11,11",
            "0 @42 0000011111111 0,0",
            "1 @0 1111111110000 0,0",
            "1 @23 0000011110000 0,0",
            "1 @42 0000011111111 0,0",
            "2 @0 1111111000 0,0",
            "2 @16 0001111000 0,0",
            "2 @35 0001111000 0,0",
            "2 @55 00011111 19,19",
            "3 @0 1111111000 0,0",
            "3 @16 0001111000 0,0",
            "3 @35 0001111000 0,0",
            "3 @55 00011111 0,0",
        ],
    ),
    ("v2", 28, 10, 8, "step"): (
        "42b1b88698c98178",
        [
            "0 @0 11111111111111000 15,15",
            "0 @49 00001111111 0,0",
            "1 @0 11111111111111000 0,0",
            "1 @49 00001111111 0,0",
            "2 @0 11111111111111000 0,0 cut",
            "2 @46 0000111111 18,18 cut",
            "3 @0 11111111111111000 0,0 cut",
            "3 @46 0000111111 0,0 cut",
        ],
    ),
}


def _digest(feats) -> str:
    fields = [
        (
            f.example_index,
            f.qas_id,
            f.input_ids,
            f.token_type_ids,
            f.attention_mask,
            f.offsets,
            f.token_is_max_context,
            f.start_position,
            f.end_position,
            f.doc_offset,
            f.truncated,
        )
        for f in feats
    ]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


def _row(f) -> str:
    ctx = [(o, b) for o, b in zip(f.offsets, f.token_is_max_context) if o is not None]
    flags = "".join("1" if b else "0" for _, b in ctx)
    cut = " cut" if f.truncated else ""
    return f"{f.example_index} @{ctx[0][0][0]} {flags} {f.start_position},{f.end_position}{cut}"


@pytest.mark.parametrize("case", list(EXPECTED), ids=lambda c: "-".join(map(str, c)))
def test_windows_equal_the_previous_implementation(bk_tok, case):
    version, max_len, stride, query, mode = case
    examples = read_squad(FIXTURES / f"task_squad_{version}.json")
    config = SquadFeatureConfig(WindowConfig(doc_stride=stride, stride_mode=mode), query)
    feats = convert_squad_examples(bk_tok, examples, max_len, config, is_training=True)
    digest, rows = EXPECTED[case]
    assert [_row(f) for f in feats] == rows
    assert _digest(feats) == digest


def test_a_stride_longer_than_the_slice_is_lowered_as_for_every_family(bk_tok):
    """The previous entry raised ValueError here ("doc_stride 50 must be smaller than the slice
    length 5"); the shared one lowers the stride to the slice length - 1 (each window starts one
    token later), as it does for every other family."""
    ex = SquadExample("x", "Why?", "a b c d a b c d a b", ())  # 10 context tokens
    config = SquadFeatureConfig(WindowConfig(doc_stride=50), max_query_length=4)
    feats = convert_squad_examples(bk_tok, [ex], 10, config)  # [CLS] why ? [SEP] ... [SEP]: room 5
    assert [f.offsets[f.doc_offset][0] for f in feats] == [0, 2, 4, 6, 8, 10]
    flags = ["".join(str(int(b)) for b in f.token_is_max_context[f.doc_offset : -1]) for f in feats]
    assert flags == ["11100", "00100", "00100", "00100", "00100", "00111"]


def test_an_empty_context_is_one_window_without_context_tokens(bk_tok):
    """As before: ``[CLS] why ? [SEP] [SEP]``, no max-context token."""
    config = SquadFeatureConfig(WindowConfig(doc_stride=4), max_query_length=8)
    (f,) = convert_squad_examples(bk_tok, [SquadExample("x", "Why?", "", ())], 16, config)
    assert f.input_ids == [101, 2339, 1029, 102, 102]
    assert f.token_is_max_context == [False] * 5 and f.offsets == [None] * 5


@pytest.mark.parametrize(
    ("max_len", "query", "stride"),
    [
        (512, 64, 128),  # the references' 128 at the paper's 384 and longer windows
        (384, 64, 128),
        (256, 64, 85),  # a third of the window
        (128, 32, 42),
        (128, 64, 30),  # half the 61 context tokens a 64-token question leaves
        (96, 64, 14),
        (69, 64, 1),  # room 2: the only stride that slides
    ],
)
def test_default_stride_is_128_at_384_and_slides_in_shorter_windows(max_len, query, stride):
    assert squad_doc_stride(max_len, query) == stride
    config = SquadFeatureConfig(max_query_length=query)
    assert config.window.doc_stride is None and config.stride(max_len) == stride
    config.check_stride(max_len)  # the default is never refused
    adapter = SquadAdapter("squad", "squad1", max_len, windows=config)
    assert adapter.windows.window.doc_stride == stride  # what bertkit_task.json records
    room = max_len - query - 3
    assert 1 <= stride < room and (stride <= room // 2 or room < 2)


OLD_STATE = {  # SquadAdapter(...).state() of 14c2d65
    "format": 1,
    "family": "squad",
    "name": "squad2",
    "max_seq_length": 256,
    "version_2": True,
    "windows": {
        "max_seq_length": 256,
        "doc_stride": 100,
        "max_query_length": 32,
        "stride_mode": "step",
    },
    "search": {"n_best_size": 20, "max_answer_length": 30, "use_max_context": True},
    "null_threshold": -1.5,
}


def test_saved_window_settings_of_older_versions_load():
    adapter = adapter_from_state(OLD_STATE)
    assert isinstance(adapter, SquadAdapter) and adapter.max_seq_length == 256
    assert adapter.windows == SquadFeatureConfig(
        WindowConfig(doc_stride=100, stride_mode="step"), max_query_length=32
    )
    assert adapter.null_threshold == -1.5 and adapter.version_2
    # the flat keys saved before windows and search were grouped
    flat = {
        "family": "squad",
        "name": "squad1",
        "max_seq_length": 128,
        "doc_stride": 32,
        "max_query_length": 16,
        "n_best_size": 5,
    }
    adapter = adapter_from_state(flat)
    assert adapter.windows == SquadFeatureConfig(WindowConfig(doc_stride=32), 16)
    assert adapter.search.n_best_size == 5


def test_state_round_trips_in_the_new_layout():
    adapter = SquadAdapter(
        "squad", "squad1", 200, windows=SquadFeatureConfig(WindowConfig(doc_stride=50), 20)
    )
    state = json.loads(json.dumps(adapter.state()))
    assert state["windows"] == {
        "window": {
            "doc_stride": 50,
            "truncate": False,
            "window_pooling": "mean",
            "stride_mode": "overlap",
        },
        "max_query_length": 20,
    }
    assert adapter_from_state(state) == adapter


def test_a_window_flag_squad_cannot_honour_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^truncate, window_pooling: SQuAD reads every window"):
        adapter_from_state({**OLD_STATE, "windows": {"window": {"truncate": True}}})


def test_max_seq_length_defaults_come_from_the_adapters():
    assert default_max_seq_length("glue") == DEFAULT_MAX_SEQ_LENGTH == 128
    assert default_max_seq_length("squad") == SquadAdapter.max_seq_length == 384
    assert {default_max_seq_length(f) for f in ("ner", "swag", "classify", "embeddings")} == {128}


@pytest.mark.parametrize(
    ("max_len", "stride", "query", "refused"),
    [
        (128, 128, 64, True),  # the references' 128 at 128 tokens: slices of 61
        (128, 61, 64, True),
        (128, 60, 64, False),
        (128, 128, 16, True),  # 109 context tokens: still below 128
        (192, 128, 64, True),  # 125
        (256, 128, 64, False),  # 189
        (384, None, 64, False),  # the paper's setting
        (128, None, 64, False),  # the default adapts (30 at 128, see above)
        (192, None, 64, False),
    ],
)
def test_a_stride_no_window_can_slide_by_is_refused_before_fine_tuning(
    max_len, stride, query, refused
):
    """`bertkit finetune squad --max-seq-length 128 --doc-stride 128`: every window would be
    lowered to its slice length - 1 (1,057 questions became 130,272 windows, each one token after
    the last). Fine-tuning stops first with one line (transformers' tokenizer refuses such a
    stride too); the library's lowering (the test above) is unchanged. The default stride adapts
    to the window instead (the test above), so only an explicit stride is refused."""
    config = SquadFeatureConfig(WindowConfig(doc_stride=stride), max_query_length=query)
    if not refused:
        config.check_stride(max_len)
        return
    with pytest.raises(ConfigError) as e:
        config.check_stride(max_len)
    slice_len = max_len - query - 3
    assert str(e.value).startswith(
        f"--doc-stride {stride} leaves no room to slide at --max-seq-length {max_len}: "
        f"a question of --max-query-length {query} tokens leaves {slice_len} context tokens"
    )


def test_step_mode_is_not_refused():
    """google's step mode moves by the stride itself, so no stride makes it crawl."""
    SquadFeatureConfig(WindowConfig(doc_stride=128, stride_mode="step")).check_stride(128)


def test_fine_tuning_checks_the_stride_before_reading_the_files(tmp_path):
    """The hint is the default stride at that length (30 at 128 with 64-token questions)."""
    settings = TaskSettings(
        "squad",
        train=tmp_path / "missing.json",
        dev=tmp_path / "missing.json",
        max_seq_length=128,
        windows=SquadFeatureConfig(WindowConfig(doc_stride=128)),
    )
    with pytest.raises(ConfigError, match=r"pass --doc-stride 30 or a smaller --max-query-length"):
        build_task(settings)
