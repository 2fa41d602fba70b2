"""SQuAD end to end, and the v2.0 no-answer path: the null threshold is tuned on dev, saved with the
model, reloaded, and used by evaluate/predict (editing the saved value changes the predictions)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bertkit.cli.main import main
from support.tiny_glue import FILLER, FIXTURES, NEGATIVE, POSITIVE

WINDOWS = ["--max-seq-length", "40", "--doc-stride", "8", "--max-query-length", "12"]
FAST = ["--epochs", "2", "--batch-size", "4", "--learning-rate", "1e-3", "--seed", "5"]


def write_v2(path: Path) -> dict[str, str]:
    """Synthetic v2.0 data: contexts long enough for several windows; half the questions have no
    answer. Returns qas_id -> gold text ("" = unanswerable)."""
    gold, paragraphs = {}, []
    for p in range(4):
        words = [FILLER[(p + i) % len(FILLER)] for i in range(30)]
        words[20 + p] = POSITIVE[p]
        context = " ".join(words)
        start = context.index(f" {POSITIVE[p]} ") + 1
        qas = [
            {
                "id": f"p{p}",
                "question": f"which word is {POSITIVE[p]} ?",
                "answers": [{"text": POSITIVE[p], "answer_start": start}],
                "is_impossible": False,
            },
            {
                "id": f"n{p}",
                "question": f"which word is {NEGATIVE[p]} ?",
                "answers": [],
                "is_impossible": True,
            },
        ]
        gold.update({f"p{p}": POSITIVE[p], f"n{p}": ""})
        paragraphs.append({"context": context, "qas": qas})
    path.write_text(
        json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]})
    )
    return gold


def _windows_in_all(err: str) -> int:
    """The window count of predict's "long inputs: ... (N in all)" line."""
    return int(re.search(r"\((\d+) in all\)", err).group(1))


def test_squad_v1_predictions_json(tiny_model: Path, tmp_path: Path, capsys) -> None:
    v1 = FIXTURES / "task_squad_v1.json"
    out = tmp_path / "sq1"
    assert (
        main(
            [
                "finetune",
                "squad",
                "--train",
                str(v1),
                "--dev",
                str(v1),
                "--model",
                str(tiny_model),
                "--output",
                str(out),
                *FAST,
                *WINDOWS,
            ]
        )
        == 0
    )
    m = json.loads((out / "metrics.json").read_text())
    assert {"exact", "f1", "total"} <= set(m["selected"]["dev"]["dev"])
    assert "null_threshold" not in m["selected"]["dev"]["dev"]
    pred = tmp_path / "predictions.json"
    assert main(["predict", "--model", str(out), "--input", str(v1), "--output", str(pred)]) == 0
    answers = json.loads(pred.read_text())
    ids = [
        q["id"]
        for a in json.loads(v1.read_text())["data"]
        for p in a["paragraphs"]
        for q in p["qas"]
    ]
    assert sorted(answers) == sorted(ids) and all(
        isinstance(a, str) and a for a in answers.values()
    )
    # --doc-stride is honoured (more overlap, more windows), flags a SQuAD model cannot use are refused
    long = tmp_path / "long.json"
    context = " ".join(FILLER[i % len(FILLER)] for i in range(80))
    qas = [
        {
            "id": "q",
            "question": "which word is good ?",
            "answers": [{"text": FILLER[0], "answer_start": 0}],
        }
    ]
    long.write_text(
        json.dumps(
            {
                "version": "1.1",
                "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
            }
        )
    )
    base = ["predict", "--model", str(out), "--input", str(long), "--output", str(pred)]
    capsys.readouterr()
    assert main(base) == 0
    saved = _windows_in_all(capsys.readouterr().err)
    assert main([*base, "--doc-stride", "16"]) == 0  # neighbours share 16 tokens, not 8
    assert _windows_in_all(capsys.readouterr().err) > saved
    assert main([*base, "--truncate"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "bertkit predict: error: --truncate: a squad model reads every window of a long "
        "context and keeps the best span; only --doc-stride applies"
    )


def test_squad_v2_threshold_tuned_saved_and_used(tiny_model: Path, tmp_path: Path) -> None:
    data = tmp_path / "v2.json"
    gold = write_v2(data)
    out = tmp_path / "sq2"
    assert (
        main(
            [
                "finetune",
                "squad",
                "--version-2-with-negative",
                "--train",
                str(data),
                "--dev",
                str(data),
                "--model",
                str(tiny_model),
                "--output",
                str(out),
                *FAST,
                *WINDOWS,
            ]
        )
        == 0
    )
    m = json.loads((out / "metrics.json").read_text())
    dev = m["selected"]["dev"]["dev"]
    assert {"HasAns_f1", "NoAns_f1", "null_threshold"} <= set(dev)
    task_file = out / "bertkit_task.json"
    task = json.loads(task_file.read_text())
    assert task["version_2"] is True
    assert task["null_threshold"] == dev["null_threshold"]  # saved with the selected checkpoint

    def run_predict(name: str) -> dict[str, str]:
        assert (
            main(
                [
                    "predict",
                    "--model",
                    str(out),
                    "--input",
                    str(data),
                    "--output",
                    str(tmp_path / name),
                ]
            )
            == 0
        )
        return json.loads((tmp_path / name).read_text())

    def run_eval() -> dict:
        assert (
            main(
                [
                    "evaluate",
                    "--model",
                    str(out),
                    "--data",
                    str(data),
                    "--output",
                    str(tmp_path / "e.json"),
                ]
            )
            == 0
        )
        return json.loads((tmp_path / "e.json").read_text())

    assert run_eval() == pytest.approx(dev)  # the reloaded threshold reproduces the tuned scores
    tuned = run_predict("tuned.json")
    assert sorted(tuned) == sorted(gold)
    # The threshold in the folder is what predict uses: answer everything / nothing.
    task_file.write_text(json.dumps({**task, "null_threshold": 1e9}))
    always = run_predict("always.json")
    task_file.write_text(json.dumps({**task, "null_threshold": -1e9}))
    never = run_predict("never.json")
    assert all(a != "" for a in always.values())
    assert all(a == "" for a in never.values())
    assert run_eval()["NoAns_f1"] == 100.0 and run_eval()["HasAns_f1"] == 0.0
    # A threshold between the questions' null_score_diffs splits them exactly by that rule.
    from bertkit.inference import TaskModel

    qa = TaskModel.load(out, device="cpu", precision="fp32")
    diffs = {p["id"]: p["null_score_diff"] for p in qa.predict_file(data).predictions}
    ordered = sorted(diffs.values())
    mid = (ordered[3] + ordered[4]) / 2
    assert ordered[3] < mid < ordered[4]
    task_file.write_text(json.dumps({**task, "null_threshold": mid}))
    split = run_predict("mid.json")
    assert {q for q, a in split.items() if a == ""} == {q for q, d in diffs.items() if d > mid}
    assert sum(a == "" for a in split.values()) == 4


def test_squad_at_128_tokens_needs_no_doc_stride(tiny_model: Path, tmp_path: Path) -> None:
    """`bertkit finetune squad --max-seq-length 128` stopped, asking for a --doc-stride (the
    references' 128 leaves a 128-token window no room to slide): the default now adapts, and the
    folder records the stride it trained with (30: half the 61 context tokens a 64-token
    question leaves; :func:`bertkit.tasks.squad_features.squad_doc_stride`)."""
    v1, out = FIXTURES / "task_squad_v1.json", tmp_path / "sq128"
    argv = ["finetune", "squad", "--train", str(v1), "--dev", str(v1), "--model", str(tiny_model)]
    assert main([*argv, "--output", str(out), *FAST, "--max-seq-length", "128"]) == 0
    task = json.loads((out / "bertkit_task.json").read_text())
    assert task["max_seq_length"] == 128 and task["windows"]["window"]["doc_stride"] == 30
