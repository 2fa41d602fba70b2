"""Labelled sentence pairs for embedding evaluation: GLUE folders and TSVs, the user's own
CSV/TSV/JSONL, the kind chosen from the task or the labels or forced, bad input named by file
and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.data.tasks.sentence_pairs import read_sentence_pairs
from bertkit.errors import ConfigError, InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GLUE = FIXTURES / "task_glue"


def test_glue_folders_and_files_by_task() -> None:
    mrpc = read_sentence_pairs(GLUE / "MRPC", "dev")
    assert mrpc.kind == "pair_classification" and mrpc.labels == [0.0, 1.0]
    assert mrpc.texts_b[1] == "After a decade as chairman, he stepped down."
    assert mrpc.describe() == "pair_classification (GLUE MRPC; labels 0/1, 1 of 2 are 1)"
    sts = read_sentence_pairs(GLUE / "STS-B" / "dev.tsv")  # a file: its header names the task
    assert sts.kind == "sts" and sts.labels == [5.0, 0.25]
    assert sts.texts_a == ["A child is riding a bike.", "I think so."]
    assert sts.describe() == "sts (GLUE STS-B; scores 0.25 to 5)"
    assert read_sentence_pairs(GLUE / "QQP").kind == "pair_classification"


def test_own_files_kind_from_the_labels() -> None:
    sts = read_sentence_pairs(FIXTURES / "sts_pairs.csv")
    assert (sts.kind, len(sts.labels), sts.source) == ("sts", 40, "sentence1, sentence2, score")
    assert sts.texts_a[13] == "Prices rose sharply in March, the report said."  # CSV quoting
    para = read_sentence_pairs(FIXTURES / "paraphrase_pairs.jsonl")
    assert (para.kind, len(para.labels)) == ("pair_classification", 40)
    assert para.source == "text, text_pair, label"


def test_binary_needs_every_label_zero_or_one(tmp_path: Path) -> None:
    p = tmp_path / "p.tsv"
    p.write_text("question1\tquestion2\tscore\na\tb\t1\nc\td\t0.5\n")
    assert read_sentence_pairs(p).kind == "sts"
    p.write_text("question1\tquestion2\tscore\na\tb\t1.0\nc\td\t0\n")
    assert read_sentence_pairs(p).kind == "pair_classification"


def test_a_forced_kind_overrides_the_labels_and_says_so(tmp_path: Path) -> None:
    """An STS file whose scores all happen to be 0 or 1 reads as pair classification (auto,
    unchanged); kind="sts" reads it as scores, and the description says it was forced."""
    p = tmp_path / "sts01.csv"
    p.write_text("sentence1,sentence2,score\na,b,1\nc,d,0\ne,f,1\n")
    auto = read_sentence_pairs(p)
    assert (auto.kind, auto.forced) == ("pair_classification", False)
    assert (
        auto.describe()
        == "pair_classification (sentence1, sentence2, score; labels 0/1, 2 of 3 are 1)"
    )
    sts = read_sentence_pairs(p, kind="sts")
    assert (sts.kind, sts.forced, sts.labels) == ("sts", True, [1.0, 0.0, 1.0])
    assert sts.describe() == "sts (forced; sentence1, sentence2, score; scores 0 to 1)"
    # GLUE tasks too: MRPC's 0/1 labels as scores; a forced kind equal to the task's says so
    mrpc = read_sentence_pairs(GLUE / "MRPC", "dev", "sts")
    assert mrpc.kind == "sts" and mrpc.describe() == "sts (forced; GLUE MRPC; scores 0 to 1)"
    forced = read_sentence_pairs(GLUE / "MRPC", "dev", "pair_classification")
    assert forced.describe().startswith("pair_classification (forced; GLUE MRPC; ")
    assert read_sentence_pairs(FIXTURES / "sts_pairs.csv", kind="auto").kind == "sts"


def test_forcing_pair_classification_needs_zero_one_labels(tmp_path: Path) -> None:
    p = tmp_path / "pairs.tsv"
    p.write_text("question1\tquestion2\tscore\na\tb\t1\nc\td\t0\ne\tf\t0.5\ng\th\t3\n")
    with pytest.raises(
        InputError,
        match=r"pairs\.tsv:4: pair kind pair_classification needs every label to be 0 or 1, got 0\.5",
    ) as e:
        read_sentence_pairs(p, kind="pair_classification")
    assert (Path(e.value.path), e.value.line) == (p, 4)
    with pytest.raises(InputError, match=r"STS-B.dev\.tsv:2: .* got 5\.0"):
        read_sentence_pairs(GLUE / "STS-B", "dev", "pair_classification")
    with pytest.raises(
        ConfigError, match="pair kind must be one of auto, sts, pair_classification, got 'binary'"
    ):
        read_sentence_pairs(p, kind="binary")


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("sentence1,sentence2\na,b\n", 1, "expected a label or score field"),
        (
            "s1,s2,label\na,b,1\n",
            1,
            r"expected text fields text\+text_pair or sentence1\+sentence2",
        ),
        ("sentence1,sentence2,label\na,b,1\nc,d,yes\n", 3, "expected a numeric 'label' value"),
        ("sentence1,sentence2,label\na,b,1\nc,,0\n", 3, "expected a non-empty text"),
        ("sentence1,sentence2,label\n", None, "no pairs"),
    ],
)
def test_bad_files_name_file_line_and_expectation(tmp_path, body, line, message) -> None:
    p = tmp_path / "pairs.csv"
    p.write_text(body)
    with pytest.raises(InputError, match=message) as e:
        read_sentence_pairs(p)
    assert (Path(e.value.path), e.value.line) == (p, line)


def test_a_folder_that_is_no_glue_pair_task_and_a_test_split(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"expected a GLUE task folder \(STS-B, MRPC, QQP\)"):
        read_sentence_pairs(GLUE / "SST-2")
    with pytest.raises(InputError, match="a test split has no labels"):
        read_sentence_pairs(GLUE / "MRPC", "test")


def test_the_forced_kinds_are_the_scored_kinds() -> None:
    from bertkit.data.tasks.sentence_pairs import PAIR_KINDS
    from bertkit.evaluation.pairs import KINDS

    assert ("auto", *KINDS) == PAIR_KINDS
