"""GLUE readers: every task's original format, the official layout, and malformed rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.data.tasks.glue import GLUE_TASKS, glue_file, glue_task, read_glue, read_glue_split
from bertkit.errors import InputError

GLUE_DIR = Path(__file__).parent.parent / "fixtures" / "task_glue"


def test_registry_has_nine_tasks_with_metrics():
    assert list(GLUE_TASKS) == [
        "CoLA",
        "SST-2",
        "MRPC",
        "STS-B",
        "QQP",
        "MNLI",
        "QNLI",
        "RTE",
        "WNLI",
    ]
    assert glue_task("cola").metric == "mcc"
    assert glue_task("sst2").main_metric == "accuracy"
    assert glue_task("mrpc").main_metric == "f1"
    assert glue_task("STS-B").is_regression and glue_task("sts-b").num_labels == 1
    assert glue_task("mnli").labels == ("contradiction", "entailment", "neutral")
    assert glue_task("MNLI").dev_splits == ("dev_matched", "dev_mismatched")
    with pytest.raises(InputError, match="unknown GLUE task 'FOO'"):
        glue_task("FOO")


def test_cola_has_no_header_and_keeps_quotes():
    ex = read_glue_split(GLUE_DIR, "CoLA", "train")
    assert [(e.text_a, e.label, e.line) for e in ex] == [
        ("The cat sat on the mat.", 1, 1),
        ("Cat the mat on sat the.", 0, 2),
        ('She said "hello" to the neighbours.', 1, 3),
        ("Him went to store the.", 0, 4),
    ]
    assert all(e.text_b is None for e in ex)
    test = read_glue_split(GLUE_DIR, "CoLA", "test")
    assert [(e.guid, e.text_a, e.label) for e in test] == [
        ("0", "The dog barked loudly.", None),
        ("1", "Loudly dog the barked.", None),
    ]


def test_sst2_keeps_unbalanced_quote_and_trailing_space():
    ex = read_glue_split(GLUE_DIR, "sst-2", "train")
    assert [(e.text_a, e.label) for e in ex] == [
        ("a warm , funny little film ", 1),
        ("the plot goes nowhere and takes its time getting there ", 0),
        ('an "instant classic ', 1),
    ]
    assert [e.text_a for e in read_glue_split(GLUE_DIR, "SST-2", "test")] == [
        "a solid , if predictable , thriller .",
        "nothing here works .",
    ]


def test_mrpc_bom_header_pairs_and_test():
    ex = read_glue_split(GLUE_DIR, "MRPC", "train")
    assert len(ex) == 3
    assert ex[1].text_a == "The mayor opened the new bridge on Tuesday."
    assert ex[1].text_b == '"Traffic on the old bridge fell sharply last year.'
    assert [e.label for e in ex] == [1, 0, 1]
    assert [e.label for e in read_glue_split(GLUE_DIR, "MRPC", "dev")] == [0, 1]
    (t,) = read_glue_split(GLUE_DIR, "MRPC", "test")
    assert (t.guid, t.text_b, t.label) == ("0", "The factory shuts down in May.", None)


def test_stsb_scores_are_floats():
    ex = read_glue_split(GLUE_DIR, "STS-B", "train")
    assert [e.label for e in ex] == [4.8, 0.0, 3.6]
    assert (
        ex[0].text_a == "A man is playing a guitar." and ex[0].text_b == "A man plays the guitar."
    )
    assert read_glue_split(GLUE_DIR, "STS-B", "test")[0].label is None


def test_qqp_qnli_rte_wnli():
    qqp = read_glue_split(GLUE_DIR, "QQP", "train")
    assert [(e.guid, e.label) for e in qqp] == [("10", 1), ("11", 0)]
    assert qqp[1].text_b == "How do airplanes fly?"
    assert read_glue_split(GLUE_DIR, "QQP", "test")[0].text_a == "How tall is Everest?"
    qnli = read_glue_split(GLUE_DIR, "QNLI", "train")
    assert [(e.text_a, e.label) for e in qnli] == [
        ("When was the bridge built?", 0),
        ("Who painted the ceiling?", 1),
    ]
    assert [e.label for e in read_glue_split(GLUE_DIR, "RTE", "train")] == [0, 1]
    assert [e.label for e in read_glue_split(GLUE_DIR, "WNLI", "train")] == [1, 0]
    for task in ("QNLI", "RTE", "WNLI"):
        assert read_glue_split(GLUE_DIR, task, "test")[0].label is None


def test_mnli_label_is_last_column_in_train_and_dev():
    train = read_glue_split(GLUE_DIR, "MNLI", "train")
    assert [e.label for e in train] == [1, 0, 2]  # entailment, contradiction, neutral
    assert train[0].text_a == "The boy ran home." and train[0].text_b == "The boy moved."
    matched = read_glue_split(GLUE_DIR, "MNLI", "dev")  # "dev" means dev_matched
    assert [e.label for e in matched] == [1, 0]
    mismatched = read_glue_split(GLUE_DIR, "MNLI", "dev_mismatched")
    assert [e.text_a for e in mismatched] == ["Thank you for your gift."]
    assert read_glue_split(GLUE_DIR, "MNLI", "test_mismatched")[0].label is None
    assert glue_file(GLUE_DIR, "MNLI", "test").name == "test_matched.tsv"


def test_task_folder_itself_works_as_data_dir():
    assert len(read_glue_split(GLUE_DIR / "RTE", "RTE", "dev")) == 1


def test_missing_split_file_names_the_official_layout(tmp_path):
    with pytest.raises(
        InputError, match=r"RTE/train\.tsv: file not found \(expected the official GLUE layout"
    ):
        read_glue_split(tmp_path, "RTE", "train")
    with pytest.raises(InputError, match="has no split 'validation'"):
        glue_file(tmp_path, "RTE", "validation")
    # --data-dir naming a split's file: the file is named, not DIR/RTE/train.tsv under it
    dev = GLUE_DIR / "RTE" / "dev.tsv"
    with pytest.raises(InputError) as info:
        read_glue_split(dev, "RTE", "train")
    assert str(info.value) == f"{dev}: is a file, expected the GLUE folder (holding RTE/) or RTE/"


def _write(tmp_path: Path, text: str, name: str = "bad.tsv") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("task", "text", "line", "expected"),
    [
        (
            "SST-2",
            "sentence\tlabel\ngood\t1\nbad film\t0\textra\n",
            3,
            "expected 2 tab-separated columns, got 3",
        ),
        (
            "SST-2",
            "sentence\tlabel\nnice\tpositive\n",
            2,
            "expected a SST-2 label in {0, 1}, got 'positive'",
        ),
        (
            "SST-2",
            "text\tlabel\nnice\t1\n",
            1,
            "expected the SST-2 header sentence<TAB>label, got text<TAB>label",
        ),
        (
            "CoLA",
            "src\t1\t\tok sentence.\nsrc\t1\tbroken row\n",
            2,
            "expected 4 tab-separated columns (source, label, original-label, sentence), got 3",
        ),
        ("CoLA", "src\t2\t\tok sentence.\n", 1, "expected a CoLA label in {0, 1}, got '2'"),
        (
            "MRPC",
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA.\n",
            2,
            "expected 5 tab-separated columns, got 4",
        ),
        (
            "MRPC",
            "Quality\t#2 ID\t#1 ID\t#1 String\t#2 String\n",
            1,
            "expected the MRPC header Quality<TAB>#1 ID",
        ),
        (
            "STS-B",
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
            "0\tg\tf\ty\to\ts\ts\tA.\tB.\thigh\n",
            2,
            "expected a numeric 'score' score, got 'high'",
        ),
        (
            "MNLI",
            "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
            "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n"
            "0\t1\t1e\tg\tp\tp\tp\tp\tA.\tB.\tentailment\tmaybe\n",
            2,
            "expected a MNLI label in {contradiction, entailment, neutral}, got 'maybe'",
        ),
        (
            "RTE",
            "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tyes\n",
            2,
            "expected a RTE label in {entailment, not_entailment}",
        ),
        (
            "QQP",
            "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\tA?\tB?\n",
            2,
            "expected 6 tab-separated columns, got 5",
        ),
        (
            "QNLI",
            "index\tquestion\tlabel\n",
            1,
            "expected the QNLI header index<TAB>question<TAB>sentence<TAB>label, got index<TAB>question<TAB>label",
        ),
        (
            "QNLI",
            "index\tquestion\n",
            1,
            "expected a QNLI header with columns index<TAB>question<TAB>sentence (test)",
        ),
        ("WNLI", "", 1, "empty file"),
    ],
)
def test_malformed_rows_name_file_line_and_expectation(tmp_path, task, text, line, expected):
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as info:
        read_glue(path, task)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert expected in msg
    assert "\n" not in msg


def test_invalid_utf8_names_line(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\ngood\t1\nbad \xff\t0\n")
    with pytest.raises(InputError, match=r"dev\.tsv:3: invalid UTF-8"):
        read_glue(path, "SST-2")


def test_split_kind_is_enforced(tmp_path):
    sst = tmp_path / "SST-2"
    sst.mkdir()
    (sst / "train.tsv").write_text("index\tsentence\n0\tgood .\n")
    with pytest.raises(
        InputError,
        match=r"train\.tsv:1: expected a labelled train/dev SST-2 file with header "
        r"sentence<TAB>label, got index<TAB>sentence",
    ):
        read_glue_split(tmp_path, "SST-2", "train")
    (sst / "test.tsv").write_text("sentence\tlabel\ngood .\t1\n")
    with pytest.raises(
        InputError,
        match=r"test\.tsv:1: expected an unlabelled test SST-2 file with header index<TAB>sentence",
    ):
        read_glue_split(tmp_path, "SST-2", "test")
    cola = tmp_path / "CoLA"
    cola.mkdir()
    (cola / "test.tsv").write_text("src\t1\t\tA sentence.\n")
    with pytest.raises(
        InputError,
        match=r"test\.tsv:1: expected a CoLA header with columns index<TAB>sentence \(test\)",
    ):
        read_glue_split(tmp_path, "CoLA", "test")


@pytest.mark.parametrize(
    "path", sorted(GLUE_DIR.glob("*/*.tsv")), ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_the_progress_total_is_the_examples_the_reader_yields(path: Path) -> None:
    """A GLUE file's header is no example (CoLA's train and dev have none, its test one)."""
    from bertkit.tasks import ClassificationAdapter

    adapter = ClassificationAdapter.for_glue(path.parent.name)
    assert adapter.count_examples(path) == len(list(adapter.iter_read(path)))
