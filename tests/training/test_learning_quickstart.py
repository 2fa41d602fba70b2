"""``bertkit quickstart``'s time budget (calibrated step count, kept for a rerun) and the
input-blind baselines it prints next to the held-out accuracies."""

from __future__ import annotations

import json

import numpy as np

from bertkit.cli.main import main
from bertkit.evaluation.baselines import input_blind_baselines

SENTENCES = [
    "the cat sat on the mat .",
    "a dog ran in the park .",
    "the sun is hot today .",
    "we like to read books .",
    "birds fly over the sea .",
]


def _corpus(tmp_path):
    articles = []
    for i in range(20):
        body = " ".join(SENTENCES[(i + j) % 5].capitalize() for j in range(8))
        articles.append(f" = Article {i} = \n \n {body} \n \n")
    path = tmp_path / "small.raw"
    path.write_text("".join(articles))
    return path


def test_minutes_budget_calibrates_once_and_a_rerun_resumes_the_same_plan(tmp_path, capsys):
    out = tmp_path / "qs"
    args = ["quickstart", "--output", str(out), "--corpus", str(_corpus(tmp_path))]
    args += ["--minutes", "0.001", "--batch-size", "8", "--vocab-size", "120", "--threads", "1"]
    args += ["--seq-length", "32"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "calibration:" in first and "updates in 0.001 min" in first
    steps = json.loads((out / "plan.json").read_text())["max_steps"]
    assert steps == 50  # the floor: 0.06 s of budget is far fewer updates
    assert f"for {steps} updates of 8" in first
    assert not (out / "calibration").exists()
    records = [json.loads(x) for x in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == steps

    assert main(args) == 0  # rerun: no new calibration, the finished run is reused
    second = capsys.readouterr().out
    assert "calibration:" not in second and f"for {steps} updates of 8" in second
    assert "already finished" in second


def test_input_blind_baselines_exact() -> None:
    def item(labels, nsp):
        return {"masked_labels": np.asarray(labels), "next_sentence_label": nsp}

    data = [item([7, 7, 9], 1), item([7, 3], 0), item([9], 1), item([5, 5, 5, 5], 1)]
    # first 3 items: labels 7,7,9,7,3,9 -> "7" is 3 of 6; NSP labels 1,0,1 -> majority 2 of 3
    assert input_blind_baselines(data, 3) == {"mlm_acc": 0.5, "nsp_acc": 2 / 3}
    # all: 7 x3, 5 x4 of 10 -> 0.4; NSP 3 of 4
    assert input_blind_baselines(data, 10) == {"mlm_acc": 0.4, "nsp_acc": 0.75}
