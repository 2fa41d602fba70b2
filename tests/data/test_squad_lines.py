"""SQuAD as JSON lines (:mod:`bertkit.data.tasks.squad_lines`): the layout Hugging Face
``datasets`` writes reads as the SQuAD JSON file it came from, unlabelled lines are questions
to predict, and bad lines name the file and the line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.squad import read_squad
from bertkit.errors import InputError
from bertkit.tasks.span_qa import SquadAdapter
from support.cli_runs import finetune
from support.tiny_glue import FIXTURES


def _flat(squad_json: Path) -> list[dict]:
    """The rows ``datasets``' squad / squad_v2 loading scripts build from a SQuAD JSON file."""
    rows = []
    for article in json.loads(squad_json.read_text())["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = [] if qa.get("is_impossible") else qa["answers"]
                rows.append(
                    {
                        "id": qa["id"],
                        "title": article["title"],
                        "context": para["context"],
                        "question": qa["question"],
                        "answers": {
                            "text": [a["text"] for a in answers],
                            "answer_start": [a["answer_start"] for a in answers],
                        },
                    }
                )
    return rows


def _as_datasets_writes(rows: list[dict], path: Path) -> Path:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).to_json(str(path))
    return path


@pytest.mark.parametrize("name", ["task_squad_v1.json", "task_squad_v2.json"])
def test_datasets_jsonl_reads_as_the_squad_json_it_came_from(name: str, tmp_path: Path) -> None:
    source = FIXTURES / name
    lines = _as_datasets_writes(_flat(source), tmp_path / "squad.jsonl")
    want = [dataclasses.replace(e, plausible_answers=()) for e in read_squad(source)]
    assert read_squad(lines) == want  # datasets' rows carry no plausible_answers
    if name.endswith("v2.json"):
        assert any(e.is_impossible for e in want)
        with pytest.raises(InputError, match=r"squad\.jsonl:\d+: .*no answer.*v1\.1"):
            read_squad(lines, version_2=False)


def _write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_lines_without_answers_are_questions_to_predict(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "q.jsonl",
        {"question": "Where?", "context": "In Paris."},
        {
            "id": 7,
            "question": "Who?",
            "context": "Ada.",
            "answers": [{"text": "Ada", "answer_start": 0}],
        },
    )
    first, second = read_squad(path)
    assert (first.qas_id, first.answers, first.is_impossible) == ("1", (), False)
    assert second.qas_id == "7" and second.answers[0].text == "Ada"
    adapter = SquadAdapter("squad", "squad1", 384)
    with pytest.raises(
        InputError, match=r"q\.jsonl: expected labelled train data, .*without answers"
    ):
        adapter.require_labelled(path, "train", [first, second])


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"context": "x"}, "missing field 'question'"),
        (
            {"question": "q", "context": "abc", "answers": {"text": ["b"], "answer_start": [0]}},
            "context there reads 'a'",
        ),
        (
            {"question": "q", "context": "abc", "answers": {"text": ["a"], "answer_start": []}},
            "two lists of the same length",
        ),
        ({"question": " ", "context": "abc"}, "empty question"),
        (
            {"question": "q", "context": "abc", "answers": [{"text": "a", "answer_start": 9}]},
            "expected answer_start in",
        ),
    ],
)
def test_bad_lines_name_the_file_and_line(tmp_path: Path, record: dict, message: str) -> None:
    good = {
        "id": "ok",
        "question": "q",
        "context": "abc",
        "answers": [{"text": "a", "answer_start": 0}],
    }
    path = _write(tmp_path / "bad.jsonl", good, record)
    with pytest.raises(InputError, match=r"bad\.jsonl:2: ") as e:
        read_squad(path)
    assert message in str(e.value)


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    rec = {"id": "q", "question": "q", "context": "abc"}
    with pytest.raises(InputError, match=r"d\.jsonl:2: duplicate question id 'q', first on line 1"):
        read_squad(_write(tmp_path / "d.jsonl", rec, rec))


def test_predict_and_finetune_take_the_jsonl_file(tiny_model: Path, tmp_path: Path) -> None:
    source = FIXTURES / "task_squad_v1.json"
    lines = _as_datasets_writes(_flat(source), tmp_path / "dev.jsonl")
    model = tmp_path / "qa"
    windows = ["--max-seq-length", "64", "--doc-stride", "16", "--max-query-length", "16"]
    metrics = finetune(
        "squad", tiny_model, model, "--train", str(lines), "--dev", str(lines), *windows
    )
    assert metrics["runs"][0]["epochs"]  # trained and scored on the JSON-lines file
    unlabelled = _write(
        tmp_path / "ask.jsonl",
        *({k: v for k, v in r.items() if k != "answers"} for r in _flat(source)),
    )
    outs = {}
    for name, data in (("json", source), ("lines", unlabelled)):
        out = tmp_path / f"{name}.json"
        assert (
            main(
                [
                    "predict",
                    "--model",
                    str(model),
                    "--input",
                    str(data),
                    "--output",
                    str(out),
                    "--precision",
                    "fp32",
                ]
            )
            == 0
        )
        outs[name] = json.loads(out.read_text())
    assert outs["lines"] == outs["json"] and len(outs["json"]) == len(_flat(source))


def test_the_progress_total_counts_questions_not_json_lines(tmp_path: Path) -> None:
    adapter = SquadAdapter("squad", "squad1", 384)
    source = FIXTURES / "task_squad_v1.json"
    lines = _write(tmp_path / "q.jsonl", *_flat(source))
    assert adapter.count_examples(lines) == len(_flat(source))
    assert adapter.count_examples(source) is None  # its lines are JSON text, not questions
