"""Which scoring ``bertkit evaluate`` picks for a model folder and a labelled file: a fine-tuned
folder scores its task, a Hugging Face sequence classifier without ``bertkit_task.json`` (a
sentence-transformers CrossEncoder, a Hub classifier) too, and only an encoder with no task head
is scored as an embedding model on sentence pairs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.cli_runs import evaluate

STS = Path(__file__).resolve().parents[1] / "fixtures" / "sts_pairs.csv"


def _hf_regressor(tiny_model: Path, out: Path) -> Path:
    """The tiny encoder under a one-output BertForSequenceClassification head, saved as
    transformers saves it (config.json naming the class, no bertkit_task.json)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(tiny_model, num_labels=1)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    model.save_pretrained(out)
    shutil.copy(tiny_model / "vocab.txt", out / "vocab.txt")
    return out


def test_a_hf_classifier_scores_its_task_and_an_encoder_its_embeddings(
    tiny_model: Path, tmp_path: Path
) -> None:
    regressor = _hf_regressor(tiny_model, tmp_path / "regressor")
    assert not (regressor / "bertkit_task.json").exists()
    assert json.loads((regressor / "config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"
    ]
    task = evaluate(regressor, STS, tmp_path, "--precision", "fp32")
    assert "kind" not in task and {"pearson", "spearman", "corr"} == set(task), task

    pairs = evaluate(tiny_model, STS, tmp_path, "--precision", "fp32")
    assert pairs["kind"] == "sts" and pairs["main_metric"] == "spearman_cosine"
