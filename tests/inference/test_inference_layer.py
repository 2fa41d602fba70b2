"""The inference layer: pipeline() picks the class a folder serves, and the text-level calls give
what the file-level commands give for the same inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.errors import CheckpointError, ConfigError
from bertkit.inference import Classifier, Embedder, QuestionAnswerer, Tagger, pipeline, task_of
from support.cli_runs import finetune
from support.tiny_glue import FIXTURES


@pytest.fixture(scope="module")
def models(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inference_models")
    conll, squad = FIXTURES / "task_conll.txt", FIXTURES / "task_squad_v1.json"
    finetune(
        "glue", tiny_model, root / "rte", "--task", "RTE", "--data-dir", str(FIXTURES / "task_glue")
    )
    finetune("ner", tiny_model, root / "ner", "--train", str(conll), "--dev", str(conll))
    finetune(
        "squad",
        tiny_model,
        root / "squad",
        "--train",
        str(squad),
        "--dev",
        str(squad),
        "--max-seq-length",
        "64",
        "--doc-stride",
        "16",
        "--max-query-length",
        "16",
    )
    return {
        "rte": root / "rte",
        "ner": root / "ner",
        "squad": root / "squad",
        "encoder": tiny_model,
    }


def test_pipeline_picks_the_class_the_folder_serves(models: dict[str, Path]) -> None:
    assert task_of(models["rte"]) == "text-classification"
    assert task_of(models["ner"]) == "token-classification"
    assert task_of(models["squad"]) == "question-answering"
    assert task_of(models["encoder"]) == "feature-extraction"
    assert isinstance(pipeline(None, models["rte"], device="cpu"), Classifier)
    assert isinstance(pipeline(None, models["ner"], device="cpu"), Tagger)
    assert isinstance(pipeline(None, models["squad"], device="cpu"), QuestionAnswerer)
    assert isinstance(pipeline(None, models["encoder"], device="cpu"), Embedder)
    with pytest.raises(ConfigError, match="unknown pipeline task 'summarization'"):
        pipeline("summarization", models["rte"])
    with pytest.raises(CheckpointError, match="a ner model, not one for Classifier"):
        Classifier.load(models["ner"], device="cpu")
    with pytest.raises(CheckpointError, match="no masked-LM head weights"):
        pipeline("fill-mask", models["encoder"], device="cpu")


def test_classifier_call_equals_predict_on_a_file(models: dict[str, Path], tmp_path: Path) -> None:
    pairs = [("the cat sat on the mat", "a cat sat"), ("it rained all day", "the sun was out")]
    clf = pipeline("text-classification", models["rte"], device="cpu", precision="fp32")
    got = clf(pairs)
    assert [set(g) for g in got] == [{"label", "probabilities", "logits"}] * 2
    assert all(abs(sum(g["probabilities"]) - 1) < 1e-5 for g in got)
    for g in got:  # the probabilities are the softmax of the logits
        e = np.exp(np.asarray(g["logits"]) - max(g["logits"]))
        assert (e / e.sum()).tolist() == pytest.approx(g["probabilities"], abs=1e-6)
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text("".join(json.dumps({"sentence1": a, "sentence2": b}) + "\n" for a, b in pairs))
    out = tmp_path / "p.jsonl"
    argv = [
        "predict",
        "--model",
        str(models["rte"]),
        "--input",
        str(jsonl),
        "--output",
        str(out),
        "--precision",
        "fp32",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["label"] for r in rows] == [g["label"] for g in got]
    assert [r["probabilities"] for r in rows] == [g["probabilities"] for g in got]


def test_tagger_and_question_answerer_calls(models: dict[str, Path]) -> None:
    tagger = pipeline(None, models["ner"], device="cpu", precision="fp32")
    (one,) = tagger("EU rejects German call")
    assert one["tokens"] == ["EU", "rejects", "German", "call"] and len(one["tags"]) == 4
    assert tagger([["EU", "rejects", "German", "call"]]) == [one]  # words or text, same answer
    qa = pipeline(None, models["squad"], device="cpu", precision="fp32")
    context = "The Normans were the people who gave their name to Normandy."
    (ans,) = qa("Who gave their name to Normandy?", context)
    assert set(ans) == {"answer", "start", "end", "probability", "null_score_diff"}
    assert ans["answer"] and context[ans["start"] : ans["end"]] == ans["answer"]


def test_an_embedding_folder_given_to_a_task_model_says_what_it_is(
    tiny_model: Path, tmp_path: Path
) -> None:
    """A sentence-transformers folder (what `finetune embeddings` writes) as `predict --model` or
    `evaluate --reranker`: the error says it is an embedding model, not "is this a model written
    by `bertkit finetune`?" (it was); a plain encoder folder keeps that question."""
    emb = tmp_path / "emb"
    shutil.copytree(tiny_model, emb)
    (emb / "modules.json").write_text("[]", encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"emb: an embedding model \(modules.json"):
        Classifier.load(emb, device="cpu")
    with pytest.raises(CheckpointError, match="is this a model written by `bertkit finetune`"):
        Classifier.load(tiny_model, device="cpu")
