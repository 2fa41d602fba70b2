"""End-to-end: `bertkit finetune` on every family, then `evaluate`/`predict` on the saved model.

Each run trains a tiny random model a few steps, so scores mean nothing; what is checked is the
plumbing: metrics.json, the kept checkpoint (evaluate must reproduce the selected dev metrics
exactly, which fails if a later, worse epoch overwrote it), and prediction formats.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from support.cli_runs import FAST, evaluate, finetune, predict
from support.tiny_glue import FIXTURES, write_sentiment


def test_glue_official_layout_evaluate_and_predict(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "rte"
    m = finetune(
        "glue", tiny_model, out, "--task", "RTE", "--data-dir", str(FIXTURES / "task_glue")
    )
    # memorised: dev is the training rows, so evaluate's figure is 1.0, not a 0.0 = 0.0 match
    glue = tmp_path / "glue"
    (glue / "RTE").mkdir(parents=True)
    train_rows = (FIXTURES / "task_glue" / "RTE" / "train.tsv").read_text(encoding="utf-8")
    for split in ("train", "dev"):
        (glue / "RTE" / f"{split}.tsv").write_text(train_rows, encoding="utf-8")
    fit = finetune(
        "glue",
        tiny_model,
        tmp_path / "fit",
        "--task",
        "RTE",
        "--data-dir",
        str(glue),
        "--max-steps",
        "40",
        "--epochs",
        "40",
        "--learning-rate",
        "3e-3",
        "--dropout",
        "0",
    )
    assert fit["selected"]["dev"]["dev"]["accuracy"] == 1.0
    assert evaluate(tmp_path / "fit", glue, tmp_path) == {"accuracy": 1.0}
    gold = [line.split("\t")[-1] for line in train_rows.splitlines()[1:]]
    assert [
        p["label"]
        for p in predict(tmp_path / "fit", glue / "RTE" / "dev.tsv", tmp_path / "d.jsonl")
    ] == gold
    assert m["task"] == {"family": "glue", "name": "RTE"}
    assert [(r["lr"], r["seed"]) for r in m["runs"]] == [(1e-3, 3)]
    assert set(m["selected"]["dev"]["dev"]) == {"accuracy"}
    for name in ("config.json", "model.safetensors", "vocab.txt", "bertkit_task.json"):
        assert (out / name).is_file()
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"
    ]
    # evaluate on the GLUE folder (dev split) reproduces the selected run's dev metrics
    assert evaluate(out, FIXTURES / "task_glue", tmp_path) == pytest.approx(
        m["selected"]["dev"]["dev"]
    )
    preds = predict(out, FIXTURES / "task_glue" / "RTE" / "test.tsv", tmp_path / "p.jsonl")
    assert len(preds) == 1 and preds[0]["label"] in ("entailment", "not_entailment")
    assert sum(preds[0]["probabilities"]) == pytest.approx(1.0, abs=1e-5)


def test_glue_regression_and_two_dev_sets(tiny_model: Path, tmp_path: Path) -> None:
    m = finetune(
        "glue",
        tiny_model,
        tmp_path / "stsb",
        "--task",
        "STS-B",
        "--data-dir",
        str(FIXTURES / "task_glue"),
    )
    assert json.loads((tmp_path / "stsb" / "config.json").read_text())["num_labels"] == 1
    assert set(m["selected"]["dev"]["dev"]) == {"pearson", "spearman", "corr"}
    assert m["metric"] == "spearman"
    m = finetune(
        "glue",
        tiny_model,
        tmp_path / "mnli",
        "--task",
        "MNLI",
        "--data-dir",
        str(FIXTURES / "task_glue"),
    )
    assert set(m["selected"]["dev"]) == {"dev_matched", "dev_mismatched"}
    mm = evaluate(tmp_path / "mnli", FIXTURES / "task_glue", tmp_path, "--split", "dev_mismatched")
    assert mm == pytest.approx(m["selected"]["dev"]["dev_mismatched"])


def test_selection_records_every_run_and_keeps_the_max(tiny_model: Path, tmp_path: Path) -> None:
    data = write_sentiment(tmp_path / "glue")
    out = tmp_path / "sel"
    args = [
        "--task",
        "SST-2",
        "--data-dir",
        str(data),
        "--restarts",
        "2",
        "--epochs",
        "8",
        "--batch-size",
        "8",
        "--dropout",
        "0",
        "--learning-rate",
        "5e-3",
        "1e-5",
        "--seed",
        "10",
    ]
    assert main(["finetune", "glue", "--model", str(tiny_model), "--output", str(out), *args]) == 0
    m = json.loads((out / "metrics.json").read_text())
    runs = m["runs"]
    assert [(r["lr"], r["seed"]) for r in runs] == [(5e-3, 10), (5e-3, 11), (1e-5, 10), (1e-5, 11)]
    scores = [r["score"] for r in runs]
    assert len(set(scores)) > 1, scores  # the runs differ, so picking the max is a real choice
    for r in runs:  # a run's score is its best epoch's dev accuracy
        assert r["score"] == max(e["dev"]["dev"]["accuracy"] for e in r["epochs"])
    best = max(range(4), key=lambda i: scores[i])  # first maximum wins, as in the loop
    assert m["selected"]["score"] == max(scores)
    assert (m["selected"]["lr"], m["selected"]["seed"]) == (runs[best]["lr"], runs[best]["seed"])
    assert m["summary"]["mean"] == pytest.approx(sum(scores) / 4)
    assert m["summary"]["by_lr"]["0.005"]["n"] == 2
    # the folder holds the selected model, not the last one trained
    assert evaluate(out, data, tmp_path)["accuracy"] == pytest.approx(max(scores))


def test_ner_end_to_end(tiny_model: Path, tmp_path: Path) -> None:
    conll = FIXTURES / "task_conll.txt"
    out = tmp_path / "ner"
    # long enough to memorise the 3 sentences, so the scores compared below are not 0 = 0
    m = finetune(
        "ner",
        tiny_model,
        out,
        "--train",
        str(conll),
        "--dev",
        str(conll),
        "--max-steps",
        "60",
        "--epochs",
        "60",
        "--learning-rate",
        "3e-3",
        "--dropout",
        "0",
    )
    assert {"precision", "recall", "f1"} <= set(m["selected"]["dev"]["dev"])
    assert m["selected"]["dev"]["dev"]["f1"] >= 0.8
    labels = json.loads((out / "bertkit_task.json").read_text())["labels"]
    assert labels[0] == "O" and all(t == "O" or t[:2] in ("B-", "I-") for t in labels)
    assert evaluate(out, conll, tmp_path)["f1"] == pytest.approx(m["selected"]["dev"]["dev"]["f1"])
    preds = predict(out, conll, tmp_path / "p.jsonl")
    assert all(len(p["tokens"]) == len(p["tags"]) and set(p["tags"]) <= set(labels) for p in preds)
    tokens_only = tmp_path / "raw.txt"
    tokens_only.write_text("Anna\nBerg\nvisited\n\nParis\n", encoding="utf-8")
    raw = predict(out, tokens_only, tmp_path / "raw.jsonl")
    assert [p["tokens"] for p in raw] == [["Anna", "Berg", "visited"], ["Paris"]]
    assert [len(p["tags"]) for p in raw] == [3, 1]


def test_bf16_autocast(tiny_model: Path, tmp_path: Path, bf16_path: str) -> None:
    m = finetune(
        "glue",
        tiny_model,
        tmp_path / "bf16",
        "--task",
        "RTE",
        "--data-dir",
        str(FIXTURES / "task_glue"),
        "--precision",
        "bf16",
    )
    assert m["config"]["precision"] == "bf16"
    assert m["precision_run"] == "bf16" and m["hardware"]["bf16"] == bf16_path
    loss = m["runs"][0]["epochs"][0]["train_loss"]
    assert 0.0 < loss < 10.0  # finite, a real cross-entropy


def test_bf16_without_native_support_runs_fp32(tiny_model: Path, tmp_path: Path, caplog) -> None:
    from bertkit import hardware, precision

    precision._noticed.discard("bf16")
    with hardware.forced("bf16", "fp32"), caplog.at_level("WARNING", "bertkit.hardware"):
        m = finetune(
            "glue",
            tiny_model,
            tmp_path / "fb",
            "--task",
            "RTE",
            "--data-dir",
            str(FIXTURES / "task_glue"),
            "--precision",
            "bf16",
        )
        ref = finetune(
            "glue",
            tiny_model,
            tmp_path / "fp32",
            "--task",
            "RTE",
            "--data-dir",
            str(FIXTURES / "task_glue"),
            "--precision",
            "fp32",
        )
    assert m["precision_run"] == "fp32"
    notices = [r.getMessage() for r in caplog.records if "bf16 requested" in r.getMessage()]
    assert len(notices) == 1 and "running fp32 instead" in notices[0]
    # the fallback really is fp32: the same losses as an fp32 run, to the last bit
    assert m["runs"][0]["epochs"][0]["train_loss"] == ref["runs"][0]["epochs"][0]["train_loss"]


def test_swag_multiple_choice_end_to_end(tiny_model: Path, tmp_path: Path, capsys) -> None:
    swag = FIXTURES / "task_swag.csv"
    out = tmp_path / "swag"
    m = finetune("swag", tiny_model, out, "--train", str(swag), "--dev", str(swag))
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "BertForMultipleChoice"
    ]
    assert evaluate(out, swag, tmp_path)["accuracy"] == pytest.approx(m["selected"]["score"])
    preds = predict(out, swag, tmp_path / "p.jsonl")
    assert len(preds) == 3 and all(
        p["label"] in range(4) and len(p["probabilities"]) == 4 for p in preds
    )
    argv = [
        "predict",
        "--model",
        str(out),
        "--input",
        str(swag),
        "--output",
        str(tmp_path / "q.jsonl"),
    ]
    capsys.readouterr()
    assert main([*argv, "--doc-stride", "4"]) == 1  # never silently dropped
    assert capsys.readouterr().err.strip() == (
        "bertkit predict: error: --doc-stride: a swag model truncates each (context, ending) pair; "
        "no window flag applies"
    )


def test_classify_and_tag_with_named_columns(tiny_model: Path, tmp_path: Path) -> None:
    csv = tmp_path / "reviews.csv"
    csv.write_text(
        'review,other,stars\n"good movie, really",x,pos\nbad film,y,neg\n"the acting was superb",z,pos\n'
        "dull plot,w,neg\n",
        encoding="utf-8",
    )
    out = tmp_path / "cls"
    m = finetune(
        "classify",
        tiny_model,
        out,
        "--train",
        str(csv),
        "--dev",
        str(csv),
        "--text-column",
        "review",
        "--label-column",
        "stars",
    )
    assert set(m["selected"]["dev"]["dev"]) == {"accuracy", "f1", "acc_and_f1"}
    unlabelled = tmp_path / "new.csv"
    unlabelled.write_text("review\ngreat film\n", encoding="utf-8")
    assert predict(out, unlabelled, tmp_path / "p.jsonl")[0]["label"] in ("neg", "pos")
    jsonl = tmp_path / "tags.jsonl"
    rows = [
        {"words": ["anna", "berg", "visited", "paris"], "ner": ["B-PER", "I-PER", "O", "B-LOC"]},
        {"words": ["the", "movie"], "ner": ["O", "O"]},
    ]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "tag"
    m = finetune(
        "tag",
        tiny_model,
        out,
        "--train",
        str(jsonl),
        "--dev",
        str(jsonl),
        "--tokens-field",
        "words",
        "--tags-field",
        "ner",
    )
    assert "f1" in m["selected"]["dev"]["dev"]
    assert [len(p["tags"]) for p in predict(out, jsonl, tmp_path / "t.jsonl")] == [4, 2]


def test_bad_input_is_one_line_with_file_and_line(tiny_model: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "SST-2"
    bad.mkdir()
    (bad / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t7\n", encoding="utf-8")
    (bad / "dev.tsv").write_text("sentence\tlabel\ngood\t1\n", encoding="utf-8")
    rc = main(
        [
            "finetune",
            "glue",
            "--task",
            "SST-2",
            "--data-dir",
            str(tmp_path),
            "--model",
            str(tiny_model),
            "--output",
            str(tmp_path / "o"),
            *FAST,
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "train.tsv:3:" in err and "'7'" in err


def test_max_seq_length_over_the_position_limit_is_a_one_line_error(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    argv = [
        "finetune",
        "glue",
        "--task",
        "RTE",
        "--data-dir",
        str(FIXTURES / "task_glue"),
        "--model",
        str(tiny_model),
        "--output",
        str(tmp_path / "o"),
        "--max-seq-length",
        "512",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        "bertkit finetune: error: --max-seq-length 512 is longer than the model's limit of 128 "
        f"positions ({tiny_model / 'config.json'}: max_position_embeddings)"
    )
    assert not (tmp_path / "o").exists()


def test_a_glue_regression_model_scores_plain_pairs(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    """STS-B trained from the GLUE TSVs also reads {"sentence1", "sentence2"} JSONL, and
    text/text_pair CSV, for predict and (with a score) evaluate."""
    out = tmp_path / "stsb"
    finetune("glue", tiny_model, out, "--task", "STS-B", "--data-dir", str(FIXTURES / "task_glue"))
    pairs = [
        ("a man is playing a guitar", "a man plays the guitar", 4.2),
        ("the cat sleeps", "stocks fell sharply", 0.2),
    ]
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"sentence1": a, "sentence2": b}) + "\n" for a, b, _ in pairs)
    )
    csv = tmp_path / "pairs.csv"
    csv.write_text("text,text_pair,score\n" + "".join(f"{a},{b},{y}\n" for a, b, y in pairs))
    rows = predict(out, jsonl, tmp_path / "p.jsonl")
    assert [r["guid"] for r in rows] == ["1", "2"]
    assert all(isinstance(r["score"], float) for r in rows)
    again = predict(out, csv, tmp_path / "q.jsonl")
    assert [r["score"] for r in again] == pytest.approx([r["score"] for r in rows], abs=1e-5)
    assert set(evaluate(out, csv, tmp_path)) >= {"pearson", "spearman"}
    # a file with neither the model's fields nor common ones: a one-line error
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"left": "a", "right": "b"}) + "\n")
    argv = ["predict", "--model", str(out), "--input", str(bad), "--output", str(tmp_path / "x")]
    assert main(argv) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"bertkit predict: error: {bad}:1: expected text fields ")
    assert "sentence1+sentence2" in last and "['left', 'right']" in last


def test_a_reused_folder_never_holds_the_last_jobs_metrics_beside_a_new_model(
    tiny_model: Path, tmp_path: Path, monkeypatch
) -> None:
    """metrics.json is written when the selection ends, after the model: a job that fails in
    between leaves its model without metrics.json, not beside the previous job's; a job that
    fails before its first save leaves the previous set whole."""
    import bertkit.recipes.finetune as recipe
    from bertkit.errors import BertkitError

    out = tmp_path / "sst"
    data = ["--task", "SST-2", "--data-dir", str(write_sentiment(tmp_path / "glue"))]
    finetune("glue", tiny_model, out, *data, "--seed", "1")
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    data.append("--overwrite")  # each job below replaces the one before

    def full(path, text) -> None:
        raise BertkitError(f"{path}: write failed (No space left on device)")

    def killed(*args) -> None:
        raise BertkitError("killed before the first save")

    monkeypatch.setattr(recipe, "atomic_write_text", full)
    assert main(["finetune", "glue", "--model", str(tiny_model), "--output", str(out),
                 *FAST, *data, "--seed", "2"]) != 0  # fmt: skip
    assert not (out / "metrics.json").exists()
    assert (out / "model.safetensors").read_bytes() != old["model.safetensors"]  # the new model

    monkeypatch.undo()
    finetune("glue", tiny_model, out, *data, "--seed", "1")
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr("bertkit.training.selection.save_model_dir", killed)
    assert main(["finetune", "glue", "--model", str(tiny_model), "--output", str(out),
                 *FAST, *data, "--seed", "2"]) != 0  # fmt: skip
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old
