"""`bertkit predict --output NAME.tsv`: the GLUE benchmark's submission file (index, prediction)
of a classifier, in the test file's order and with its ids, the labels the JSONL output gives;
regression scores as written; a .tsv for a family without that format is refused before any
file is touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.errors import ConfigError
from bertkit.inference.prediction_files import submission_rows, write_predictions
from support.tiny_glue import write_sentiment


@pytest.fixture(scope="module")
def model_and_data(tiny_model: Path, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("submission")
    data = write_sentiment(root / "glue", n_train=24, n_dev=8)
    out = root / "model"
    argv = ["finetune", "glue", "--task", "SST-2", "--data-dir", str(data), "--model"]
    argv += [str(tiny_model), "--output", str(out), "--max-steps", "10", "--batch-size", "8"]
    assert main([*argv, "--seed", "1", "--learning-rate", "3e-3", "--dropout", "0"]) == 0
    # a GLUE test file: an index column (ids not in line order), no label
    dev = (data / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    rows = [f"{100 - i}\t{line.split(chr(9))[0]}" for i, line in enumerate(dev)]
    (data / "SST-2" / "test.tsv").write_text("index\tsentence\n" + "\n".join(rows) + "\n")
    return out, data / "SST-2"


def test_tsv_output_is_the_glue_submission_file(model_and_data, tmp_path: Path) -> None:
    model, task_dir = model_and_data
    base = ["predict", "--model", str(model), "--input", str(task_dir), "--precision", "fp32"]
    assert main([*base, "--output", str(tmp_path / "SST-2.tsv")]) == 0
    assert main([*base, "--output", str(tmp_path / "p.jsonl")]) == 0
    lines = (tmp_path / "SST-2.tsv").read_text(encoding="utf-8").splitlines()
    jsonl = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    test = (task_dir / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    assert lines[0] == "index\tprediction"
    assert [x.split("\t")[0] for x in lines[1:]] == [t.split("\t")[0] for t in test]
    assert [x.split("\t")[1] for x in lines[1:]] == [p["label"] for p in jsonl]
    assert {x.split("\t")[1] for x in lines[1:]} <= {"0", "1"}


def test_regression_scores_are_written_unclipped() -> None:
    rows = submission_rows([{"guid": "7", "score": 5.25}, {"guid": "8", "score": -0.125}])
    assert rows == [("7", "5.25"), ("8", "-0.125")]
    with pytest.raises(ConfigError, match="example 9: score nan"):
        submission_rows([{"guid": "9", "score": float("nan")}])


@pytest.mark.parametrize("family", ["ner", "squad", "swag"])
def test_tsv_for_another_family_is_refused_and_keeps_the_old_file(
    family: str, tmp_path: Path
) -> None:
    out = tmp_path / "preds.tsv"
    out.write_text("kept\n")
    with pytest.raises(ConfigError, match=rf"a {family} model writes"):
        write_predictions(out, family, [{"guid": "1", "label": "x", "id": "1", "answer": ""}])
    assert out.read_text() == "kept\n"


def test_other_suffixes_keep_their_formats(tmp_path: Path) -> None:
    preds = [{"guid": "1", "label": "1", "id": "q1", "answer": "Paris"}]
    write_predictions(tmp_path / "a.jsonl", "glue", preds)
    assert json.loads((tmp_path / "a.jsonl").read_text()) == preds[0]
    write_predictions(tmp_path / "predictions.json", "squad", preds)
    assert json.loads((tmp_path / "predictions.json").read_text()) == {"q1": "Paris"}
    # a squad model asked for .jsonl writes JSON lines, not predictions.json's one object
    two = [preds[0], {**preds[0], "id": "q2", "answer": "Rome"}]
    write_predictions(tmp_path / "qa.jsonl", "squad", two)
    lines = (tmp_path / "qa.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == two


def test_the_diagnostic_set_reads_as_mnli_test_rows(tmp_path: Path) -> None:
    """AX.tsv is predicted by the MNLI model from GLUE's diagnostic.tsv (index, sentence1,
    sentence2): its rows read as unlabelled MNLI pairs keeping their ids."""
    from bertkit.data.tasks.glue import read_glue

    path = tmp_path / "diagnostic.tsv"
    path.write_text("index\tsentence1\tsentence2\n0\tThe cat sat.\tA cat sat.\n1\tNo.\tYes.\n")
    rows = read_glue(path, "MNLI")
    assert [(r.guid, r.text_a, r.text_b, r.label) for r in rows] == [
        ("0", "The cat sat.", "A cat sat.", None),
        ("1", "No.", "Yes.", None),
    ]


def test_csv_is_the_same_table_comma_separated(tmp_path: Path) -> None:
    import csv

    preds = [{"guid": "3", "label": "a, b"}, {"guid": "4", "label": 'say "x"'}]
    write_predictions(tmp_path / "p.csv", "classify", preds)
    with open(tmp_path / "p.csv", newline="") as f:
        assert list(csv.reader(f)) == [["index", "prediction"], ["3", "a, b"], ["4", 'say "x"']]
    with pytest.raises(ConfigError, match=r"a \.csv output .* a ner model writes"):
        write_predictions(tmp_path / "q.csv", "ner", preds)
    assert not (tmp_path / "q.csv").exists()
