"""Long inputs through the commands: finetune/evaluate/predict window by default, --truncate cuts
and says how many, the saved settings travel with the model, ner --document-context."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli_runs import evaluate, finetune, predict
from support.tiny_glue import FIXTURES, NEGATIVE, POSITIVE


def _long_reviews(path: Path) -> Path:
    """The deciding word comes after 30 filler words: beyond a 16-token window."""
    filler = " ".join(["the movie was really quite"] * 6)
    rows = [
        {"text": f"{filler} {w}", "label": lab}
        for w, lab in [*((w, "pos") for w in POSITIVE), *((w, "neg") for w in NEGATIVE)]
    ]
    rows.append({"text": "good", "label": "pos"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_classify_windows_by_default_and_truncate_counts(
    tiny_model: Path, tmp_path: Path, capsys
) -> None:
    data = _long_reviews(tmp_path / "long.jsonl")
    common = [
        "--train",
        str(data),
        "--dev",
        str(data),
        "--text-column",
        "text",
        "--max-seq-length",
        "16",
    ]
    m = finetune("classify", tiny_model, tmp_path / "win", *common, "--doc-stride", "4")
    w = m["windows"]
    assert (
        w["train"]["inputs"] == 13 and w["train"]["windowed"] == 12 and w["train"]["truncated"] == 0
    )
    assert w["train"]["windows"] > 13 and w["dev"] == w["train"]
    assert "long inputs: train 13 inputs: 12 windowed into" in capsys.readouterr().err
    saved = json.loads((tmp_path / "win" / "bertkit_task.json").read_text())["windows"]
    assert saved == {
        "doc_stride": 4,
        "truncate": False,
        "window_pooling": "mean",
        "stride_mode": "overlap",
    }
    mean = evaluate(tmp_path / "win", data, tmp_path)
    assert "12 windowed into" in capsys.readouterr().err
    assert (
        mean["accuracy"] == m["selected"]["dev"]["dev"]["accuracy"]
    )  # same settings as at training
    evaluate(tmp_path / "win", data, tmp_path, "--truncate")
    assert (
        "13 inputs: 0 windowed into 0 windows (13 in all), 12 truncated" in capsys.readouterr().err
    )
    preds = predict(tmp_path / "win", data, tmp_path / "p.jsonl", "--window-pooling", "max")
    assert len(preds) == 13 and all(p["label"] in ("neg", "pos") for p in preds)
    means = predict(tmp_path / "win", data, tmp_path / "m.jsonl")
    # the flag reaches the adapter: the single-window input agrees, the windowed ones differ
    assert preds[-1] == means[-1] and sum(a != b for a, b in zip(preds[:-1], means[:-1])) >= 6

    cut = finetune("classify", tiny_model, tmp_path / "cut", *common, "--truncate")
    assert cut["windows"]["train"] == {"inputs": 13, "windowed": 0, "windows": 13, "truncated": 12}
    assert (
        json.loads((tmp_path / "cut" / "bertkit_task.json").read_text())["windows"]["truncate"]
        is True
    )


def test_ner_document_context_end_to_end(tiny_model: Path, tmp_path: Path, capsys) -> None:
    conll = FIXTURES / "task_conll.txt"
    out = tmp_path / "doc"
    m = finetune(
        "ner",
        tiny_model,
        out,
        "--train",
        str(conll),
        "--dev",
        str(conll),
        "--document-context",
        "--max-seq-length",
        "6",
        "--doc-stride",
        "2",
    )
    assert m["windows"]["train"]["inputs"] == 2 and m["windows"]["train"]["windowed"] == 2
    assert json.loads((out / "bertkit_task.json").read_text())["document_context"] is True
    assert "long inputs: train 2 inputs: 2 windowed into" in capsys.readouterr().err
    scores = evaluate(out, conll, tmp_path)
    assert scores["f1"] == m["selected"]["dev"]["dev"]["f1"]
    preds = predict(out, conll, tmp_path / "p.jsonl")
    assert [len(p["tags"]) for p in preds] == [6, 5, 6]  # one row per original sentence


def test_swag_says_how_many_inputs_it_cut(tiny_model: Path, tmp_path: Path, capsys) -> None:
    swag = FIXTURES / "task_swag.csv"
    m = finetune(
        "swag",
        tiny_model,
        tmp_path / "swag",
        "--train",
        str(swag),
        "--dev",
        str(swag),
        "--max-seq-length",
        "12",
    )
    assert m["windows"]["train"]["truncated"] == 3 and m["windows"]["train"]["windowed"] == 0
    assert "3 truncated" in capsys.readouterr().err


def test_windows_learn_what_truncation_cannot_see(tiny_model: Path, tmp_path: Path) -> None:
    """The label word sits after 30 filler words (beyond a 16-token window): trained and read in
    windows the tiny model memorises the set; truncated, it sees only filler (a constant guess)."""
    data = _long_reviews(tmp_path / "long.jsonl")
    common = [
        "--train",
        str(data),
        "--dev",
        str(data),
        "--text-column",
        "text",
        "--max-seq-length",
        "16",
        "--max-steps",
        "300",
        "--epochs",
        "300",
        "--learning-rate",
        "3e-3",
        "--dropout",
        "0",
    ]
    windows = finetune("classify", tiny_model, tmp_path / "win", *common)
    cut = finetune("classify", tiny_model, tmp_path / "cut", *common, "--truncate")
    assert windows["selected"]["dev"]["dev"]["accuracy"] >= 0.9
    assert cut["selected"]["dev"]["dev"]["accuracy"] <= 8 / 13  # 12 of 13 look the same cut
