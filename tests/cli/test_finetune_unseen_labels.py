"""A dev set with gold tags that no training example holds gets a warning line: the model cannot
learn to predict them, so the dev score counts each as a miss (easy to hit with a small
``--max-train-examples``)."""

from __future__ import annotations

from pathlib import Path

from support.cli_runs import finetune

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_dev_tags_missing_from_training_are_named(tiny_model: Path, tmp_path: Path, capsys) -> None:
    conll = str(FIXTURES / "task_conll.txt")
    base = ["--train", conll, "--dev", conll, "--max-steps", "1", "--epochs", "1"]
    finetune("ner", tiny_model, tmp_path / "one", *base, "--max-train-examples", "1")
    err = capsys.readouterr().err
    # the first sentence (Anna Berg visited New York) has PER and LOC tags only
    assert "warning: dev holds B-MISC, B-ORG, I-ORG, which no training example has" in err
    finetune("ner", tiny_model, tmp_path / "all", *base)
    assert "which no training example has" not in capsys.readouterr().err
