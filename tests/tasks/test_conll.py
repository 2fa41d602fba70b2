"""CoNLL column files and tag schemes."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.data.tasks.conll import (
    TaggedSentence,
    read_conll,
    tag_spans,
    to_iob1,
    to_iob2,
    write_conll,
)
from bertkit.errors import InputError

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_reads_sentences_documents_and_last_column():
    sents = read_conll(FIXTURES / "task_conll.txt")
    assert [s.tokens for s in sents] == [
        ("Anna", "Berg", "visited", "New", "York", "."),
        ("Acme", "Corp", "hired", "Bob", "."),
        ("The", "German", "team", "won", "in", "Paris"),  # no blank line at the end of the file
    ]
    assert sents[0].tags == ("B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O")
    assert [s.line for s in sents] == [3, 10, 18]
    assert [s.document for s in sents] == [1, 1, 2]


def test_chosen_tag_column():
    chunks = read_conll(FIXTURES / "task_conll.txt", tag_column=2)
    assert chunks[0].tags == ("B-NP", "I-NP", "B-VP", "B-NP", "I-NP", "O")


def test_iob1_file_is_converted_to_iob2_with_same_spans():
    sents = read_conll(FIXTURES / "task_conll_iob1.txt", scheme="IOB1")
    assert sents[0].tags == ("B-PER", "I-PER", "O", "B-PER", "I-PER", "B-PER", "O", "B-LOC")
    assert sents[1].tags == ("B-ORG",)
    raw = read_conll(FIXTURES / "task_conll_iob1.txt", scheme="IOB1", convert_to_iob2=False)
    assert raw[0].tags[3:6] == ("I-PER", "I-PER", "B-PER")
    assert (
        tag_spans(raw[0].tags)
        == tag_spans(sents[0].tags)
        == [("PER", 0, 2), ("PER", 3, 5), ("PER", 5, 6), ("LOC", 7, 8)]
    )


def test_iob2_scheme_rejects_iob1_file_with_line():
    path = FIXTURES / "task_conll_iob1.txt"
    with pytest.raises(
        InputError,
        match=r"task_conll_iob1\.txt:1: expected B-PER to start an entity in an IOB2 file, got 'I-PER'",
    ):
        read_conll(path, scheme="IOB2")


@pytest.mark.parametrize(
    ("tags", "spans"),
    [
        (["B-PER", "I-PER", "O", "I-LOC", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5)]),
        (
            ["O", "I-ORG", "I-ORG", "I-PER"],
            [("ORG", 1, 3), ("PER", 3, 4)],
        ),  # type change ends a chunk
        (["B-MISC", "I-LOC"], [("MISC", 0, 1), ("LOC", 1, 2)]),
        (["I-X"], [("X", 0, 1)]),
        (
            ["S-PER", "B-LOC", "E-LOC", "O", "B-ORG", "I-ORG", "E-ORG"],
            [("PER", 0, 1), ("LOC", 1, 3), ("ORG", 4, 7)],
        ),
        (["O", "O"], []),
        ([], []),
    ],
)
def test_tag_spans_conlleval_rules(tags, spans):
    assert tag_spans(tags) == spans


def test_iob_round_trips():
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]
    iob2 = to_iob2(iob1)
    assert iob2 == ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]
    assert to_iob2(iob2) == iob2
    assert to_iob1(iob2) == iob1


def test_write_then_read(tmp_path):
    sents = [TaggedSentence(("a", "b"), ("B-X", "O")), TaggedSentence(("c",), ("O",))]
    buf = io.StringIO()
    write_conll(sents, buf)
    path = tmp_path / "out.txt"
    path.write_text(buf.getvalue())
    assert [(s.tokens, s.tags) for s in read_conll(path)] == [(s.tokens, s.tags) for s in sents]


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("EU NNP B-ORG\nrejects VBZ\n", 2, "expected 3 whitespace-separated columns, got 2"),
        (
            "EU NNP B-ORG\n\nX NNP B-ORG extra\n",
            3,
            "expected 3 whitespace-separated columns, got 4",
        ),
        ("EU NNP ORG\n", 1, "expected a tag O, B-TYPE or I-TYPE in column 3 of 3, got 'ORG'"),
        ("John lives in London\n", 1, "column 4 of 4, got 'London' (CoNLL columns: one token per"),
        ("EU NNP B-\n", 1, "got 'B-'"),
    ],
)
def test_malformed_lines(tmp_path, text, line, expected):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_conll(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert expected in str(info.value)


def test_tag_column_out_of_range(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("EU B-ORG\n")
    with pytest.raises(InputError, match=r"two\.txt:1: expected at least 4 columns, got 2"):
        read_conll(path, tag_column=3)


def test_unknown_scheme():
    with pytest.raises(InputError, match="unknown tag scheme 'BILOU'"):
        read_conll(FIXTURES / "task_conll.txt", scheme="BILOU")


TAG = st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-PER", "S-LOC", "I-MISC"])


@settings(max_examples=300, deadline=None)
@given(st.lists(TAG, max_size=20))
def test_scheme_conversions_keep_spans(tags):
    spans = tag_spans(tags)
    iob2 = to_iob2(tags)
    assert tag_spans(iob2) == spans
    assert tag_spans(to_iob1(tags)) == spans
    assert to_iob2(iob2) == iob2
    assert all(not t.startswith(("E-", "S-")) for t in iob2)
    # spans never overlap and are in order
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(spans))
