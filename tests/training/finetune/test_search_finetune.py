"""``bertkit finetune embeddings`` / ``rerank`` and ``bertkit evaluate`` on a BEIR folder, end to
end on the tiny model: training raises retrieval quality, the saved folders load in
sentence-transformers with the same vectors and scores, and evaluation agrees with training."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.retrieval import RetrievalSet, write_beir
from support.tiny_glue import FILLER, NEGATIVE, POSITIVE

KEYS = POSITIVE + NEGATIVE  # 12 words: a query is one word, its passage holds it among fillers


def _passage(rng: random.Random, word: str) -> str:
    fill = [rng.choice(FILLER) for _ in range(6)]
    fill.insert(rng.randrange(7), word)
    return " ".join(fill)


def _data(tmp: Path) -> tuple[Path, Path, Path]:
    rng = random.Random(0)
    train = [
        {
            "query": f"{w} {rng.choice(FILLER)}",
            "positive": _passage(rng, w),
            "negative": _passage(rng, rng.choice([k for k in KEYS if k != w])),
        }
        for _ in range(8)
        for w in KEYS
    ]
    rng.shuffle(train)
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train), encoding="utf-8")
    corpus = {f"d{i}": _passage(rng, w) for i, w in enumerate(KEYS)}
    queries = {f"q{i}": w for i, w in enumerate(KEYS)}
    write_beir(
        tmp / "beir",
        RetrievalSet(corpus, queries, {f"q{i}": {f"d{i}": 1} for i in range(len(KEYS))}),
        "dev",
    )
    pairs = [
        {"query": w, "passage": corpus[f"d{j}"], "label": int(i == j)}
        for i, w in enumerate(KEYS)
        for j in range(len(KEYS))
    ]
    (tmp / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs), encoding="utf-8")
    return tmp / "train.jsonl", tmp / "beir", tmp / "pairs.jsonl"


def _evaluate(model: Path, data: Path, out: Path, *args: str) -> dict:
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(model),
                "--data",
                str(data),
                "--output",
                str(out),
                "--precision",
                "fp32",
                *args,
            ]
        )
        == 0
    )
    return json.loads(out.read_text())


RUN = [
    "--epochs",
    "6",
    "--batch-size",
    "16",
    "--learning-rate",
    "1e-3",
    "--precision",
    "fp32",
    "--max-seq-length",
    "16",
]


def test_embeddings_learn_and_save_a_sentence_transformers_folder(
    tiny_model: Path, tmp_path: Path
) -> None:
    train, beir, _ = _data(tmp_path)
    before = _evaluate(tiny_model, beir, tmp_path / "before.json")["retrieval"]
    out = tmp_path / "emb"
    assert (
        main(
            [
                "finetune",
                "embeddings",
                "--model",
                str(tiny_model),
                "--train",
                str(train),
                "--dev",
                str(beir),
                "--output",
                str(out),
                "--matryoshka-dims",
                "16",
                "--symmetric",
                *RUN,
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    selected = metrics["selected"]["dev"]["dev"]
    after = _evaluate(out, beir, tmp_path / "after.json")["retrieval"]
    assert after["MRR@10"] == pytest.approx(
        selected["MRR@10"], abs=1e-6
    )  # training's scorer = evaluate's
    assert after["MRR@10"] > before["MRR@10"] + 0.25, (before, after)
    assert not (out / "bertkit_task.json").exists()
    assert json.loads((out / "bertkit_embedding.json").read_text()) == {"matryoshka_dims": [16]}
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert kinds == ["Transformer", "Pooling", "Normalize"]

    st = pytest.importorskip("sentence_transformers")
    from bertkit.inference import Embedder

    texts = ["good movie", "the plot was very dull really"]
    ours = Embedder.load(out, precision="fp32")(texts)
    theirs = st.SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(ours, theirs, atol=2e-6)
    assert np.linalg.norm(ours, axis=1) == pytest.approx([1.0, 1.0], abs=1e-6)


def _rerank_data(tmp: Path) -> tuple[Path, Path]:
    """Relevant passages hold the query's (positive) word; the others a negative word only, which
    a tiny cross-encoder learns to tell apart (matching the very word is beyond it)."""
    rng = random.Random(1)
    train = [
        {"query": w, "positive": _passage(rng, w), "negative": _passage(rng, rng.choice(NEGATIVE))}
        for _ in range(16)
        for w in POSITIVE
    ]
    dev = [
        {"query": w, "passage": _passage(rng, v), "label": int(v == w)}
        for w in POSITIVE
        for v in [w, *NEGATIVE[:5]]
    ]
    for name, rows in (("triples.jsonl", train), ("dev.jsonl", dev)):
        (tmp / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return tmp / "triples.jsonl", tmp / "dev.jsonl"


def test_rerank_learns_saves_a_cross_encoder_and_reranks(tiny_model: Path, tmp_path: Path) -> None:
    train, dev = _rerank_data(tmp_path)
    out = tmp_path / "ce"
    assert (
        main(
            [
                "finetune",
                "rerank",
                "--model",
                str(tiny_model),
                "--train",
                str(train),
                "--dev",
                str(dev),
                "--output",
                str(out),
                *RUN,
            ]
        )
        == 0
    )
    runs = json.loads((out / "metrics.json").read_text())["runs"][0]
    assert runs["score"] > 0.9, runs["epochs"]  # chance: about 0.41 (one relevant among six)
    config = json.loads((out / "config.json").read_text())
    assert config["num_labels"] == 1 and config["sentence_transformers"]["activation_fn"].endswith(
        "Sigmoid"
    )
    assert not (out / "bertkit_task.json").exists()  # a plain CrossEncoder folder

    st = pytest.importorskip("sentence_transformers")
    from bertkit.inference import Classifier

    pairs_in = [("good", "the movie was good"), ("bad", "the film was lovely")]
    ours = 1 / (
        1
        + np.exp(-np.array([p["score"] for p in Classifier.load(out, precision="fp32")(pairs_in)]))
    )
    theirs = st.CrossEncoder(str(out), device="cpu").predict(pairs_in)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


@pytest.mark.parametrize("loss", ["ranking", "listnet"])
def test_rerank_group_losses_learn(tiny_model: Path, tmp_path: Path, loss: str) -> None:
    """--loss ranking / listnet on the triples (groups of a positive and its negative), dev as
    for bce: each learns, and the folder stays a sigmoid CrossEncoder folder."""
    train, dev = _rerank_data(tmp_path)
    out = tmp_path / "ce"
    argv = ["finetune", "rerank", "--model", str(tiny_model), "--loss", loss]
    argv += ["--train", str(train), "--dev", str(dev), "--output", str(out), *RUN]
    argv += ["--batch-size", "8"]  # as many updates as bce: a group is two of its pairs
    assert main(argv) == 0
    runs = json.loads((out / "metrics.json").read_text())["runs"][0]
    assert runs["score"] > 0.9, runs["epochs"]  # chance: about 0.41 (one relevant among six)
    config = json.loads((out / "config.json").read_text())
    assert config["sentence_transformers"]["activation_fn"].endswith("Sigmoid")


def test_evaluate_reranks_the_head_of_each_ranking(tiny_model: Path, tmp_path: Path) -> None:
    from bertkit.data.tasks.retrieval import read_beir
    from bertkit.inference import Classifier, Embedder
    from bertkit.inference.retrieval import rerank, search

    _, beir, pairs = _data(tmp_path)
    ce = tmp_path / "ce"
    assert (
        main(
            [
                "finetune",
                "rerank",
                "--model",
                str(tiny_model),
                "--train",
                str(pairs),
                "--dev",
                str(pairs),
                "--output",
                str(ce),
                "--max-steps",
                "3",
                *RUN,
            ]
        )
        == 0
    )
    got = _evaluate(
        tiny_model, beir, tmp_path / "rr.json", "--reranker", str(ce), "--rerank-top-k", "5"
    )
    assert got["reranked"]["top_k"] == 5 and got["seconds"]["pairs"] == 5 * len(KEYS)
    assert 0 <= got["seconds"]["rerank"] < 600  # a duration, not a clock reading
    # reranking the top 5 reorders within it: Recall@10 and @100 cannot change
    assert got["reranked"]["Recall@10"] == got["retrieval"]["Recall@10"]

    data = read_beir(beir, "dev")
    first = search(Embedder.load(tiny_model, precision="fp32"), data)
    scorer = Classifier.load(ce, precision="fp32")
    second = rerank(scorer, data, first, 5)
    for q, ranking in second.rankings.items():
        head = first.rankings[q][:5]
        assert sorted(ranking[:5]) == sorted(head) and ranking[5:] == first.rankings[q][5:]
        scores = [scorer([(data.queries[q], data.corpus[d])])[0]["score"] for d in ranking[:5]]
        assert scores == sorted(scores, reverse=True)


def _torchrun(tiny_model: Path, train: Path, beir: Path, out: Path, *extra: str) -> str:
    """``bertkit finetune embeddings`` as 2 gloo processes under torchrun; returns its stderr."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "BERTKIT_PROGRESS": "0",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "bertkit",
            "finetune",
            "embeddings",
            "--model",
            str(tiny_model),
            "--train",
            str(train),
            "--dev",
            str(beir),
            "--output",
            str(out),
            "--device",
            "cpu",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stderr


@pytest.mark.slow
def test_embeddings_under_torchrun(tiny_model: Path, tmp_path: Path) -> None:
    """2 gloo processes: each scores its share of the batch (in-batch negatives per rank), every
    pair is used once per epoch, rank 0 alone saves, and the model learns."""
    train, beir, _ = _data(tmp_path)
    before = _evaluate(tiny_model, beir, tmp_path / "before.json")["retrieval"]["MRR@10"]
    out = tmp_path / "two"
    stderr = _torchrun(tiny_model, train, beir, out, *RUN)
    assert "2 process(es) on cpu" in stderr and stderr.count("wrote the selected") == 1
    metrics = json.loads((out / "metrics.json").read_text())
    for epoch in metrics["runs"][0]["epochs"]:
        assert epoch["seen"]["examples"] == 8 * len(KEYS)
        assert epoch["seen"]["index_sum"] == sum(range(8 * len(KEYS)))
    after = _evaluate(out, beir, tmp_path / "after.json")["retrieval"]["MRR@10"]
    assert after == pytest.approx(metrics["selected"]["score"], abs=1e-6)
    assert after > before + 0.2, (before, after)


def test_embeddings_in_mini_batches_train_and_save(tiny_model: Path, tmp_path: Path) -> None:
    """``--mini-batch-size`` (GradCache) runs the CLI end to end and saves the folder."""
    train, beir, _ = _data(tmp_path)
    out = tmp_path / "cached"
    run = ["--mini-batch-size", "4", "--max-steps", "2", *RUN]
    args = ["--model", str(tiny_model), "--train", str(train), "--dev", str(beir)]
    assert main(["finetune", "embeddings", *args, "--output", str(out), *run]) == 0
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert kinds == ["Transformer", "Pooling", "Normalize"]
    assert json.loads((out / "metrics.json").read_text())["selected"]["score"] > 0


@pytest.mark.slow
def test_embeddings_in_mini_batches_under_torchrun(tiny_model: Path, tmp_path: Path) -> None:
    """2 gloo processes with ``--mini-batch-size`` train as the same 2 processes without it:
    the same training losses and dev scores, epoch by epoch (dropout 0: the one pass and the
    chunked first pass would draw different masks)."""
    train, beir, _ = _data(tmp_path)
    run = [*RUN, "--epochs", "2", "--dropout", "0"]  # the last --epochs counts
    metrics = {}
    for name, extra in (("one-pass", []), ("cached", ["--mini-batch-size", "3"])):
        _torchrun(tiny_model, train, beir, tmp_path / name, *run, *extra)
        metrics[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    want, got = metrics["one-pass"]["runs"][0], metrics["cached"]["runs"][0]
    assert len(got["epochs"]) == len(want["epochs"]) == 2
    for a, b in zip(got["epochs"], want["epochs"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
        assert a["dev"].keys() == b["dev"].keys()
        for name, scores in b["dev"].items():
            assert a["dev"][name] == pytest.approx(scores, abs=1e-5), name
    assert got["epochs"][-1]["train_loss"] < got["epochs"][0]["train_loss"]  # it trains
