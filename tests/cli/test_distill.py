"""Distillation end to end on the tiny model: ``bertkit mine --cross-encoder --output-scores``
writes the teacher's scores (sentence-transformers' ``scores`` column), ``finetune embeddings
--loss margin-mse`` and ``--loss distill-kl`` train on them (with gradient accumulation and with
``--mini-batch-size``), and rows without scores are refused naming the file and line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.pairs_writer import write_pairs
from bertkit.data.tasks.retrieval import TrainingPair, read_pairs
from bertkit.errors import InputError
from support.cli_runs import evaluate, finetune

PAIRS = Path(__file__).parents[1] / "fixtures" / "retrieval_pairs.jsonl"
LABELLED = Path(__file__).parents[1] / "fixtures" / "rerank_pairs.jsonl"  # 1 and 0 per query


@pytest.fixture(scope="module")
def reranker(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cross-encoder fine-tuned 2 steps from the tiny model (``finetune rerank``)."""
    out = tmp_path_factory.mktemp("distill") / "rerank"
    finetune("rerank", tiny_model, out, "--train", str(LABELLED), "--dev", str(LABELLED))
    return out


def _mine(model: Path, reranker: Path, out: Path, *args: str) -> int:
    argv = ["mine", "--model", str(model), "--cross-encoder", str(reranker)]
    return main([*argv, "--precision", "fp32", "--input", str(PAIRS), "--output", str(out), *args])


def test_mined_teacher_scores_train_a_student(
    tiny_model: Path, reranker: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "teacher.jsonl"
    assert _mine(tiny_model, reranker, out, "--num-negatives", "2", "--output-scores") == 0
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cross-encoder" in summary and "pairs rescored" in summary
    first = json.loads(out.read_text().splitlines()[0])
    assert list(first) == ["query", "positive", "negative_1", "negative_2", "scores"]
    rows = read_pairs(out)
    assert rows and all(len(r.scores) == 3 for r in rows)
    # sigmoid scores of the reranker (its folder names the activation), best negative first
    assert all(0 < s < 1 and math.isfinite(s) for r in rows for s in r.scores)
    assert all(r.scores[1] >= r.scores[2] for r in rows)
    for extra in (["--grad-accum", "2"], ["--mini-batch-size", "3"]):
        name = extra[0].strip("-")
        metrics = finetune(
            "embeddings",
            tiny_model,
            tmp_path / name,
            "--train",
            str(out),
            "--dev",
            str(PAIRS),
            "--loss",
            "margin-mse",
            "--no-normalize",
            *extra,
        )
        assert metrics["selected"]


def test_mined_teacher_scores_train_a_student_by_kl(
    tiny_model: Path, reranker: Path, tmp_path: Path
) -> None:
    out = tmp_path / "teacher.jsonl"
    assert _mine(tiny_model, reranker, out, "--num-negatives", "2", "--output-scores") == 0
    runs = {
        "accum": ["--no-normalize", "--grad-accum", "2"],
        "cached": ["--mini-batch-size", "3", "--temperature", "0.05"],
        "t1": ["--mini-batch-size", "3"],
        # each side set on its own: the same run as the shared 0.05, then the teacher at 2
        "sides": [
            *("--mini-batch-size", "3"),
            *("--student-temperature", "0.05", "--teacher-temperature", "0.05"),
        ],
        "teacher2": [
            *("--mini-batch-size", "3", "--temperature", "0.05"),
            *("--teacher-temperature", "2"),
        ],
    }
    losses = {}
    for name, extra in runs.items():
        metrics = finetune(
            "embeddings",
            tiny_model,
            tmp_path / name,
            "--train",
            str(out),
            "--dev",
            str(PAIRS),
            "--loss",
            "distill-kl",
            *extra,
        )
        assert metrics["selected"]
        losses[name] = metrics["runs"][0]["epochs"][0]["train_loss"]
    assert all(math.isfinite(x) and x > 0 for x in losses.values())
    # --temperature reaches the loss (the same run at temperature 1 trains on another number)
    assert losses["cached"] != pytest.approx(losses["t1"])
    # --student-temperature and --teacher-temperature reach the loss, each its own side
    assert losses["sides"] == losses["cached"]
    assert losses["teacher2"] != pytest.approx(losses["cached"])


def test_triplets_and_labelled_pairs_carry_scores(
    tiny_model: Path, reranker: Path, tmp_path: Path
) -> None:
    triplets = tmp_path / "t.csv"
    assert (
        _mine(tiny_model, reranker, triplets, "--output-format", "triplet", "--output-scores") == 0
    )
    rows = read_pairs(triplets)
    assert rows and {len(r.scores) for r in rows} == {2}
    labelled = tmp_path / "l.jsonl"
    args = ["--output-format", "labeled-pair", "--output-scores", "--num-negatives", "1"]
    assert _mine(tiny_model, reranker, labelled, *args) == 0
    first = json.loads(labelled.read_text().splitlines()[0])
    assert list(first) == ["query", "passage", "score"] and 0 < first["score"] < 1


@pytest.mark.parametrize("loss", ["margin-mse", "distill-kl"])
def test_teacher_losses_refuse_rows_without_scores(
    loss: str, tiny_model: Path, tmp_path: Path, capsys
) -> None:
    train = tmp_path / "plain.jsonl"
    write_pairs(train, [TrainingPair("q", "p", ("n",)), TrainingPair("r", "s", ("t",))])
    argv = ["finetune", "embeddings", "--model", str(tiny_model), "--output", str(tmp_path / "o")]
    argv += ["--train", str(train), "--dev", str(PAIRS), "--loss", loss]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert f"{train}:1" in err and f"--loss {loss}" in err and "bertkit mine --cross-encoder" in err
    assert main([*argv, "--symmetric"]) != 0
    assert f"symmetric is a ranking-loss option; {loss}" in capsys.readouterr().err
    if loss == "distill-kl":
        assert main([*argv, "--temperature", "0"]) != 0
        assert "temperature must be positive" in capsys.readouterr().err
        assert main([*argv, "--teacher-temperature", "inf"]) != 0
        assert "--teacher-temperature must be positive and finite" in capsys.readouterr().err
    else:  # an option this loss ignores is refused, not ignored
        assert main([*argv, "--temperature", "0.05"]) != 0
        err = capsys.readouterr().err
        assert f"temperature is a distill-kl loss option; the {loss} loss does not use it" in err
    assert main([*argv, "--scale", "10"]) != 0
    err = capsys.readouterr().err
    assert f"scale is a ranking loss option; the {loss} loss does not use it (got 10.0)" in err


def test_scores_round_trip_and_bad_scores(tmp_path: Path) -> None:
    rows = [TrainingPair("q", "p", ("n1", "n2"), (0.9, 0.25, -1.5))]
    for name in ("a.jsonl", "a.csv", "a.tsv"):
        write_pairs(tmp_path / name, rows)
        assert read_pairs(tmp_path / name) == rows
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"query": "q", "positive": "p", "negative": "n", "scores": [1.0, 0.5]})
        + "\n"
        + json.dumps({"query": "q", "positive": "p", "negative": "n", "scores": [1.0]})
        + "\n"
    )
    with pytest.raises(InputError, match=r"bad.jsonl:2.*1 scores for 1 positive and 1 negatives"):
        read_pairs(bad)


@pytest.mark.parametrize(
    ("normalize", "similarity"), [("--no-normalize", "dot"), ("--normalize", "cosine")]
)
def test_a_distilled_folder_declares_the_similarity_it_was_trained_on(
    tiny_model: Path, reranker: Path, tmp_path: Path, normalize: str, similarity: str
) -> None:
    """Trained on dot products (a teacher loss, no normalising), the saved folder says
    ``similarity_fn_name: dot``, as sentence-transformers' msmarco -dot models do; dev selection
    searched by it, and ``bertkit evaluate`` of the folder on the same BEIR dev finds the
    selected MRR@10 again. Normalised, it stays a cosine model."""
    from bertkit.data.tasks.retrieval import pairs_as_retrieval, write_beir

    mined = tmp_path / "teacher.jsonl"
    assert _mine(tiny_model, reranker, mined, "--num-negatives", "2", "--output-scores") == 0
    dev = tmp_path / "dev_beir"
    write_beir(dev, pairs_as_retrieval(read_pairs(PAIRS)), split="dev")
    out = tmp_path / "student"
    args = ["--train", str(mined), "--dev", str(dev), "--loss", "margin-mse", normalize]
    metrics = finetune("embeddings", tiny_model, out, *args, "--learning-rate", "1e-3")
    config = json.loads((out / "config_sentence_transformers.json").read_text())
    assert config["similarity_fn_name"] == similarity
    ours = evaluate(out, dev, tmp_path, "--precision", "fp32", "--split", "dev")["retrieval"]
    assert ours["MRR@10"] == pytest.approx(metrics["selected"]["dev"]["dev"]["MRR@10"], abs=1e-6)


def test_saving_an_embedder_keeps_its_folders_similarity(tiny_model: Path, tmp_path: Path) -> None:
    """Embedder.save of a dot-product folder writes it as one again (not the default cosine)."""
    import shutil

    from bertkit.inference import Embedder

    dot = tmp_path / "dot"
    shutil.copytree(tiny_model, dot)
    (dot / "config_sentence_transformers.json").write_text('{"similarity_fn_name": "dot"}')
    Embedder.load(dot, precision="fp32").save(tmp_path / "again")
    again = json.loads((tmp_path / "again" / "config_sentence_transformers.json").read_text())
    assert again["similarity_fn_name"] == "dot"
