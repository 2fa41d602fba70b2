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
    assert "calibration:" in first and "min left of 0.001" in first
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


def test_the_budget_is_the_whole_job_so_data_preparation_comes_out_of_training(
    tmp_path, monkeypatch
):
    """plan_steps fits the updates into what is left of --minutes after ``spent`` seconds (the
    data preparation) and the calibration; a stubbed calibration reports 0.01 s per update."""
    from pathlib import Path

    from bertkit.training import quickstart as Q

    def calibrate(opts, log):
        rows = [{"type": "train", "seconds_per_step": 0.01}] * 3
        Path(opts.output).mkdir(parents=True, exist_ok=True)
        (Path(opts.output) / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )

    monkeypatch.setattr(Q, "pretrain", calibrate)

    def steps(spent: float, out: str) -> int:
        s = Q.QuickstartSettings(output=tmp_path / out, minutes=1.0)
        return Q.plan_steps(s, s.output, [tmp_path / "a", tmp_path / "b"], 1, lambda m: None, spent)

    fresh, late = steps(0.0, "fresh"), steps(30.0, "late")
    # (60 s - spent - the final steps' 5 s) x 0.92 / 0.01 s, less the stub's few milliseconds
    assert 5000 < fresh <= 5060 and 2240 < late <= 2300
    assert steps(59.0, "over") == 50  # nothing left: the floor
