"""Long commands end with one summary line on stderr: what was done, how much, how long or how
fast, and where it went (the project rule "long work shows progress and ends with a summary").

One tiny fine-tuned classifier and one tiny masked LM serve every command; the figures (seconds,
rates) vary by machine, so the lines are matched with the figures as patterns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bertkit.cli.main import main
from support.cli_runs import FAST
from support.tiny_glue import FIXTURES
from support.tiny_mlm import tiny_mlm

SST2 = FIXTURES / "task_glue" / "SST-2"
SECONDS = r"\d+\.\ds"
RATE = r"\d+\.\d"


def _last_line(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def classifier(tiny_model: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("summaries") / "sst2"
    argv = ["finetune", "glue", "--task", "SST-2", "--data-dir", str(SST2.parent)]
    assert main([*argv, "--model", str(tiny_model), "--output", str(out), *FAST]) == 0
    return out


def test_finetune_ends_with_runs_examples_updates_time_and_folder(tiny_model, tmp_path, capsys):
    out = tmp_path / "ft"
    argv = ["finetune", "glue", "--task", "SST-2", "--data-dir", str(SST2.parent)]
    assert main([*argv, "--model", str(tiny_model), "--output", str(out), *FAST]) == 0
    assert re.fullmatch(
        rf"wrote the selected model and metrics\.json to {re.escape(str(out))} "
        rf"\(1 run\(s\) on 3 training examples, 1 updates, {SECONDS} in all\)",
        _last_line(capsys),
    )


def test_evaluate_ends_with_examples_rate_and_file(classifier, tmp_path, capsys):
    out = tmp_path / "eval.json"
    argv = ["evaluate", "--model", str(classifier), "--data", str(SST2), "--output", str(out)]
    assert main(argv) == 0
    assert re.fullmatch(
        rf"scored 2 examples of {re.escape(str(SST2))} in {SECONDS} \({RATE} examples/s\); "
        rf"wrote {re.escape(str(out))}",
        _last_line(capsys),
    )
    assert main(argv[:-2]) == 0  # metrics on stdout only: the line names no file
    assert _last_line(capsys).endswith("examples/s)")


def test_predict_to_a_file_ends_with_count_time_and_rate(classifier, tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    inp = SST2 / "test.tsv"
    assert (
        main(["predict", "--model", str(classifier), "--input", str(inp), "--output", str(out)])
        == 0
    )
    assert re.fullmatch(  # the precision --precision auto chose (it can be bf16 on a CPU)
        rf"wrote 2 predictions to {re.escape(str(out))} \((fp32|bf16)\) in {SECONDS} "
        rf"\({RATE} examples/s\)",
        _last_line(capsys),
    )
    argv = ["predict", "--model", str(classifier), "--input", str(inp), "--output", str(out)]
    assert main([*argv, "--precision", "fp32"]) == 0  # fp32 in every forced kernel path
    assert f"predictions to {out} (fp32) in " in _last_line(capsys)


def test_fill_mask_and_per_token_embed_end_with_time_and_rate(tmp_path, capsys, monkeypatch):
    model = tiny_mlm(tmp_path)
    (tmp_path / "in.txt").write_text("the cat [MASK] on the mat .\na dog ran\n")
    monkeypatch.setenv("BERTKIT_PROGRESS", "1")  # the bar, off when stderr is not a terminal
    assert main(["fill-mask", "--model", str(model), "--input", str(tmp_path / "in.txt")]) == 0
    err = capsys.readouterr().err
    assert "fill-mask: 100%" in err and "batch/s" in err  # a total: rate and ETA
    assert re.fullmatch(
        rf"filled masks in 1 of 2 texts \(1 had no \[MASK\]\), (fp32|bf16) in {SECONDS} "
        rf"\({RATE} texts/s\)",
        err.strip().splitlines()[-1],
    )
    argv = ["fill-mask", "--model", str(model), "--input", str(tmp_path / "in.txt")]
    assert main([*argv, "--precision", "fp32"]) == 0
    assert "(1 had no [MASK]), fp32 in " in capsys.readouterr().err
    out = tmp_path / "t.npy"
    argv = ["embed", "--model", str(model), "--input", str(tmp_path / "in.txt")]
    assert main([*argv, "--output", str(out), "--per-token"]) == 0
    assert re.match(
        rf"embedded 2 lines -> {re.escape(str(out))} \(\d+ pieces x 32\) and \S+t\.jsonl "
        rf"\({RATE} lines/s, {SECONDS}\); long inputs: 2 lines",
        _last_line(capsys).split("\r")[-1],
    )
