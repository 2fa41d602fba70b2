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


def test_an_undefined_correlation_is_null_in_strict_json(tiny_model: Path, tmp_path: Path) -> None:
    """Constant gold scores leave Pearson and Spearman undefined (NaN): the metrics on stdout and
    in --output are JSON that strict parsers read (null), never ``NaN``."""
    data = tmp_path / "constant.csv"
    data.write_text("sentence1,sentence2,score\na cat,a dog,2.5\nrain,sun,2.5\nred,blue,2.5\n")
    out = evaluate(tiny_model, data, tmp_path, "--precision", "fp32")

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the JSON")

    text = (tmp_path / "eval.json").read_text()
    strict = json.loads(text, parse_constant=refuse)
    assert strict == out and strict["kind"] == "sts"
    assert strict["spearman_cosine"] is None and strict["metrics"]["pearson_cosine"] is None


def test_report_json_maps_only_non_finite_values_to_null() -> None:
    import numpy as np

    from bertkit.io import report_json

    value = {"a": float("nan"), "b": [np.float32(1.5), np.float64("inf"), 2], "c": "nan", "d": None}
    assert json.loads(report_json(value)) == {"a": None, "b": [1.5, None, 2], "c": "nan", "d": None}


def test_a_cross_encoder_on_a_beir_folder_is_refused_not_searched_with(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    """A sequence classifier's encoder is no retrieval model: one line naming --reranker, where
    it used to be mean-pooled and scored as a bi-encoder without a word."""
    from bertkit.cli.main import main

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "text": "the movie was good"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "good movie"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    regressor = _hf_regressor(tiny_model, tmp_path / "regressor")
    assert main(["evaluate", "--model", str(regressor), "--data", str(beir)]) != 0
    err = capsys.readouterr().err
    assert "a fine-tuned task model" in err and "--reranker" in err and "Traceback" not in err
    searched = evaluate(tiny_model, beir, tmp_path, "--precision", "fp32")
    assert searched["retrieval"]["queries"] == 1  # an encoder still searches


def test_an_encoder_without_a_task_on_a_tasks_data_names_the_model_as_the_likely_mistake(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    """A pre-training checkpoint (or any encoder) given where a fine-tuned folder was meant is
    read as an embedding model: the SST-2 folder, not a pair task's, used to be refused as if
    the data were wrong ("expected a GLUE task folder (STS-B, MRPC, QQP) ..."), never naming the
    model. The reader's line stays, and the model's missing bertkit_task.json is named."""
    from bertkit.cli.main import main
    from support.tiny_glue import write_sentiment

    glue = write_sentiment(tmp_path / "glue")
    for data in (glue / "SST-2", glue / "SST-2" / "dev.tsv"):
        assert main(["evaluate", "--model", str(tiny_model), "--data", str(data)]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"bertkit evaluate: error: {data}"), err
        assert f"({tiny_model} has no bertkit_task.json" in err and "`bertkit finetune`" in err
    # a file laid out as sentence pairs is the embedding user's own: its error, no hint
    bad = tmp_path / "pairs.csv"
    bad.write_text("sentence1,sentence2,score\na cat,a dog,high\n")
    assert main(["evaluate", "--model", str(tiny_model), "--data", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2: " in err and "bertkit_task.json" not in err


def test_split_of_a_single_file_is_refused_not_ignored(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    """A file has no splits: ``--split test`` on one is refused in one line (it was ignored,
    scoring the file as if it were the split asked for); ``--split dev``, the default, passes."""
    from bertkit.cli.main import main

    argv = ["evaluate", "--model", str(tiny_model), "--data", str(STS), "--precision", "fp32"]
    capsys.readouterr()
    assert main([*argv, "--split", "test"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--split test picks a split of a GLUE or BEIR folder" in err[0], err
    assert evaluate(tiny_model, STS, tmp_path, "--precision", "fp32", "--split", "dev")["kind"]


def test_graded_qrels_report_graded_ndcg_beside_the_binary_one(
    tiny_model: Path, tmp_path: Path
) -> None:
    """A BEIR folder whose qrels grade relevance (2 and 1) reports ``NDCG@10 (graded)`` (trec_eval's,
    as BEIR and MTEB publish) beside sentence-transformers' binary ``NDCG@10``; the same folder
    with binary qrels does not."""
    from bertkit.data.tasks.retrieval import RetrievalSet, write_beir

    corpus = {f"d{i}": t for i, t in enumerate(["a cat sat", "dogs run", "the sun", "rain fell"])}
    queries = {"q1": "a cat", "q2": "rain"}
    graded = {"q1": {"d0": 2, "d1": 1, "d2": 0}, "q2": {"d3": 1, "d2": 2}}
    write_beir(tmp_path / "graded", RetrievalSet(corpus, queries, graded))
    got = evaluate(tiny_model, tmp_path / "graded", tmp_path, "--precision", "fp32")["retrieval"]
    assert 0 < got["NDCG@10 (graded)"] <= 1 and 0 < got["NDCG@10"] <= 1, got
    binary = {q: {d: int(v > 0) for d, v in r.items()} for q, r in graded.items()}
    write_beir(tmp_path / "binary", RetrievalSet(corpus, queries, binary))
    ones = evaluate(tiny_model, tmp_path / "binary", tmp_path, "--precision", "fp32")["retrieval"]
    assert "NDCG@10 (graded)" not in ones and ones["NDCG@10"] == got["NDCG@10"], ones
