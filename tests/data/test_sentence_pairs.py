"""Labelled sentence pairs for embedding evaluation: GLUE folders and TSVs, the user's own
CSV/TSV/JSONL, the kind chosen from the task or the labels, bad input named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.data.tasks.sentence_pairs import read_sentence_pairs
from bertkit.errors import InputError

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
