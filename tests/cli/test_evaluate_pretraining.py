"""``bertkit evaluate --data PREPARED``: a tiny pre-trained model scored on tiny prepared data end
to end (metrics JSON on stdout and in --output, the summary line), and the no-MLM-head error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from training.helpers import prepare_tiny_corpus


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """(prepared data, the model/ of a 4-step `bertkit pretrain` on it)."""
    root = tmp_path_factory.mktemp("pretrained")
    data = prepare_tiny_corpus(root, holdout=0.25)
    args = ["--max-steps", "4", "--batch-size", "8", "--warmup-steps", "1", "--peak-tflops", "1"]
    assert main(["pretrain", "--data", str(data), "--output", str(root / "run"), *args]) == 0
    return data, root / "run" / "model"


def test_scores_a_pretrained_model_on_prepared_data(run, tmp_path, capsys) -> None:
    data, model = run
    capsys.readouterr()
    out = tmp_path / "metrics.json"
    argv = ["evaluate", "--model", str(model), "--data", str(data), "--output", str(out)]
    assert main([*argv, "--eval-examples", "5", "--batch-size", "2", "--device", "cpu"]) == 0
    got = capsys.readouterr()
    metrics = json.loads(out.read_text())
    assert json.loads(got.out) == metrics
    assert set(metrics) == {
        "mlm_loss",
        "mlm_acc",
        "mlm_perplexity",
        "nsp_loss",
        "nsp_acc",
        "loss",
        "objective",
        "split",
        "examples",
        "masked_tokens",
        "notes",
    }
    assert (metrics["objective"], metrics["split"], metrics["examples"]) == ("mlm+nsp", "eval", 5)
    assert 0 <= metrics["mlm_acc"] <= 1 and 0 <= metrics["nsp_acc"] <= 1
    last = got.err.strip().splitlines()[-1]
    assert last.startswith(f"scored 5 instances ({metrics['masked_tokens']} masked tokens) of ")
    assert "instances/s)" in last and last.endswith(f"wrote {out}")


def test_a_model_without_an_mlm_head_is_one_line(run, tiny_model, capsys) -> None:
    data, _ = run
    assert main(["evaluate", "--model", str(tiny_model), "--data", str(data)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has no masked-LM head (BertModel" in err and "needs one" in err
