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
    plan = json.loads((out / "plan.json").read_text())
    assert plan["max_steps"] == 50  # the floor: 0.06 s of budget is far fewer updates
    assert len(plan["seconds_per_update"]) == 2  # one calibration per phase
    # phase 1 runs its planned 85%; phase 2 gets what fits in the time left: nothing, so 1
    assert plan["phase2_steps"] == 1 and "phase 2: 1 updates (planned 8)" in first
    assert "42 updates of 8 on 32-token instances, then about 8 of 8" in first
    assert not (out / "calibration").exists()

    def last_step(run: str) -> int:
        rows = (out / run / "metrics.jsonl").read_text().splitlines()
        return max(json.loads(x)["step"] for x in rows)

    # phase 1's deadline (the job's, less phase 2's calibrated share) had passed before it
    # started: at its first log line (update 5) the deadline's guard ends it at the next update
    # (the first decision, two windows of 5 later, had ended it at 16)
    assert (last_step("run-phase1"), last_step("run")) == (6, 1)
    assert (
        '"type": "deadline", "step": 5, "total_steps": 6'
        in (out / "run-phase1" / "metrics.jsonl").read_text()
    )

    assert main(args) == 0  # rerun: no new calibration or fit, the finished runs are reused
    second = capsys.readouterr().out
    assert "calibration:" not in second and "phase 2:" not in second
    assert "42 updates of 8" in second and second.count("already finished") == 2


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

    from bertkit.recipes import quickstart_plan as Q
    from bertkit.recipes.quickstart_settings import QuickstartSettings

    def calibrate(opts, log):
        rows = [{"type": "train", "seconds_per_step": 0.01}] * 3
        Path(opts.output).mkdir(parents=True, exist_ok=True)
        (Path(opts.output) / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )

    monkeypatch.setattr(Q, "pretrain", calibrate)

    def steps(spent: float, out: str) -> int:
        s = QuickstartSettings(output=tmp_path / out, minutes=1.0)
        return Q.plan_steps(s, s.output, [tmp_path / "a", tmp_path / "b"], 1, lambda m: None, spent)

    fresh, late = steps(0.0, "fresh"), steps(30.0, "late")
    # (60 s - spent - the final steps' 5 s) x 0.97 / 0.01 s, less the stub's few milliseconds
    assert 5280 < fresh <= 5335 and 2370 < late <= 2425
    assert steps(59.0, "over") == 50  # nothing left: the floor


def test_phase2_is_fitted_once_to_the_time_phase1_leaves(tmp_path):
    """fit_phase2: the time left before the deadline at the first calibration's phase-2 rate,
    scaled by how far phase 1's logged windows (their median) drifted from its calibration,
    stored so that a rerun keeps it; --max-steps and an uncalibrated plan keep the planned
    share."""
    import time

    from bertkit.recipes import quickstart_plan as Q
    from bertkit.recipes.quickstart_settings import QuickstartSettings

    s = QuickstartSettings(output=tmp_path)
    plan = tmp_path / "plan.json"
    windows = tmp_path / "run-phase1" / "metrics.jsonl"

    def fit(left: float, settings=s) -> int:
        deadline = time.perf_counter() + left
        return Q.fit_phase2(settings, tmp_path, 1000, deadline, lambda m: None)

    def fresh_plan() -> None:
        plan.write_text(json.dumps({"max_steps": 4000, "seconds_per_update": [0.01, 0.04]}))

    fresh_plan()
    assert 2495 <= fit(100.0) <= 2500  # no phase-1 windows: 100 s / 0.04
    assert 2495 <= json.loads(plan.read_text())["phase2_steps"] <= 2500
    assert 2495 <= fit(5.0) <= 2500  # a rerun keeps the stored count
    windows.parent.mkdir()
    rows = [{"type": "train", "seconds_per_step": r} for r in (0.02, 0.0125, 0.0125, 0.011)]
    windows.write_text("".join(json.dumps(r) + "\n" for r in [*rows, {"type": "eval"}]))
    fresh_plan()
    assert 1995 <= fit(100.0) <= 2000  # phase 1 ran at 0.0125 (median), 25% slower
    fresh_plan()
    assert fit(-3.0) == 1  # over budget already
    fixed = QuickstartSettings(output=tmp_path, max_steps=4000)
    assert fit(100.0, fixed) == 1000


def test_bad_phase_fraction_or_nsp_weight_fails_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "qs"
    for flag, value, says in (
        ("--phase2-fraction", "0", "--phase2-fraction must be"),
        ("--phase2-fraction", "1.5", "--phase2-fraction must be"),
        ("--nsp-weight", "0", "--nsp-weight must be a positive number"),
        ("--minutes", "-1", "--minutes must be a positive number"),
    ):
        assert main(["quickstart", "--output", str(out), flag, value]) == 1
        assert says in capsys.readouterr().err
    assert not out.exists()
