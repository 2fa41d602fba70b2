"""``bertkit finetune rerank --loss ranking --in-batch-negatives N`` and ``--loss listnet`` on a
listwise JSONL file, end to end on the tiny model: a few updates, and the saved folder scores in
sentence-transformers' CrossEncoder as bertkit scores it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main

QUERIES = ["good", "bad", "lovely", "cat", "dog", "mat", "plot", "film"]
RUN = ["--epochs", "1", "--batch-size", "4", "--learning-rate", "1e-3", "--precision", "fp32"]
RUN += ["--max-seq-length", "16", "--seed", "0"]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _files(tmp: Path) -> tuple[Path, Path, Path]:
    triples = [
        {"query": q, "positive": f"the {q} one", "negatives": [f"a {o}", f"the {o} mat"]}
        for q, o in zip(QUERIES, QUERIES[1:] + QUERIES[:1], strict=True)
    ]
    lists = [  # lists of 2 to 4 docs, graded labels
        {"query": q, "docs": [f"the {q} one", f"{q} is near", "a mat", "dog"][: 2 + i % 3]}
        for i, q in enumerate(QUERIES)
    ]
    for i, row in enumerate(lists):
        row["labels"] = [2, 1, 0, 0][: len(row["docs"])] if i % 2 else [1, 0, 0.5, 0][: 2 + i % 3]
    dev = [
        {"query": q, "passage": p, "label": y} for q in QUERIES[:3] for p, y in ((q, 1), ("a", 0))
    ]
    return (
        _write(tmp / "t.jsonl", triples),
        _write(tmp / "l.jsonl", lists),
        _write(tmp / "d.jsonl", dev),
    )


def _finetune(tiny_model: Path, train: Path, dev: Path, out: Path, *flags: str) -> float:
    argv = ["finetune", "rerank", "--model", str(tiny_model), "--train", str(train)]
    assert main([*argv, "--dev", str(dev), "--output", str(out), *flags, *RUN]) == 0
    return json.loads((out / "metrics.json").read_text())["runs"][0]["epochs"][0]["train_loss"]


def _same_scores(out: Path) -> None:
    st = pytest.importorskip("sentence_transformers")
    from bertkit.inference import Classifier

    pairs = [("good", "the good one"), ("bad", "a mat"), ("cat", "the dog is near")]
    logits = [p["score"] for p in Classifier.load(out, precision="fp32")(pairs)]
    theirs = st.CrossEncoder(str(out), device="cpu").predict(pairs)
    np.testing.assert_allclose(1 / (1 + np.exp(-np.array(logits))), theirs, rtol=0, atol=1e-5)


def test_ranking_with_in_batch_negatives(tiny_model: Path, tmp_path: Path) -> None:
    triples, _lists, dev = _files(tmp_path)
    drawn = _finetune(tiny_model, triples, dev, tmp_path / "a", "--loss", "ranking")  # ST's 4
    none = _finetune(
        tiny_model, triples, dev, tmp_path / "b", "--loss", "ranking", "--in-batch-negatives", "0"
    )
    # 1 + 2 + 4 candidates per query against 1 + 2: a harder pick, a higher loss at the start
    assert drawn > none
    _same_scores(tmp_path / "a")


@pytest.mark.parametrize("loss", ["listnet", "ranking"])
def test_a_listwise_file(tiny_model: Path, tmp_path: Path, loss: str) -> None:
    _triples, lists, dev = _files(tmp_path)
    assert np.isfinite(_finetune(tiny_model, lists, dev, tmp_path / "o", "--loss", loss))
    _same_scores(tmp_path / "o")


def _dev_of(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())["runs"][0]["epochs"][0]["dev"]["dev"]


def test_listwise_dev_scores_as_its_labelled_pairs(tiny_model: Path, tmp_path: Path) -> None:
    """A listwise --dev file (one query per list) gives the metrics of the same pairs written as
    labelled pairs; bce trains on a listwise file whose labels lie in [0, 1] as on its pairs."""
    triples, _lists, _dev = _files(tmp_path)
    lists = [
        {"query": q, "docs": [f"the {q} one", "a mat", f"{q} dog"], "labels": [1, 0, 0.5 * (i % 2)]}
        for i, q in enumerate(QUERIES[:5])
    ]
    pairs = [
        {"query": r["query"], "passage": d, "label": y}
        for r in lists
        for d, y in zip(r["docs"], r["labels"], strict=True)
    ]
    as_lists, as_pairs = _write(tmp_path / "dl.jsonl", lists), _write(tmp_path / "dp.jsonl", pairs)
    _finetune(tiny_model, triples, as_lists, tmp_path / "l", "--loss", "ranking")
    _finetune(tiny_model, triples, as_pairs, tmp_path / "p", "--loss", "ranking")
    got, want = _dev_of(tmp_path / "l"), _dev_of(tmp_path / "p")
    assert got["queries"] == want["queries"] == 5
    for name in ("MRR@10", "NDCG@10", "Recall@1", "accuracy"):
        assert got[name] == pytest.approx(want[name], abs=1e-9), name
    bce_lists = _finetune(tiny_model, as_lists, as_pairs, tmp_path / "bl")
    bce_pairs = _finetune(tiny_model, as_pairs, as_pairs, tmp_path / "bp")
    assert bce_lists == pytest.approx(bce_pairs, rel=1e-5)


def test_graded_lists_are_refused_for_bce(tiny_model: Path, tmp_path: Path, capsys) -> None:
    _triples, lists, dev = _files(tmp_path)  # its odd lines grade 2, 1, 0
    argv = ["finetune", "rerank", "--model", str(tiny_model), "--train", str(lists)]
    assert main([*argv, "--dev", str(dev), "--output", str(tmp_path / "o"), *RUN]) == 1
    err = capsys.readouterr().err
    assert f"{lists}:2: label 2 is outside [0, 1]: --loss bce" in err and "--loss listnet" in err
    assert not (tmp_path / "o").exists()


def test_graded_listwise_dev_adds_graded_ndcg(tiny_model: Path, tmp_path: Path) -> None:
    """A listwise dev file graded 0-3 keeps its grades for ``NDCG@10 (graded)`` (recomputed here
    from the dev predictions' logits, trec_eval's linear gains), while MRR@10 and NDCG@10 stay
    binary (any grade >= 1 relevant, as the same lists labelled 0/1 score)."""
    import math

    triples, _lists, _dev = _files(tmp_path)
    grades = [[3, 0, 1, 2], [0, 2, 1, 0], [1, 0, 0, 3]]
    lists = [
        {"query": q, "docs": [f"the {q} one", "a mat", f"{q} dog", f"{q} is near"], "labels": y}
        for q, y in zip(QUERIES[:3], grades, strict=True)
    ]
    binary = [{**r, "labels": [int(v > 0) for v in r["labels"]]} for r in lists]
    graded_dev, binary_dev = (
        _write(tmp_path / "g.jsonl", lists),
        _write(tmp_path / "b.jsonl", binary),
    )
    _finetune(tiny_model, triples, graded_dev, tmp_path / "g", "--loss", "ranking")
    _finetune(tiny_model, triples, binary_dev, tmp_path / "b", "--loss", "ranking")
    got, ones = _dev_of(tmp_path / "g"), _dev_of(tmp_path / "b")
    assert "NDCG@10 (graded)" not in ones
    for name in ("MRR@10", "NDCG@10", "Recall@1"):
        assert got[name] == pytest.approx(ones[name], abs=1e-9), name

    from bertkit.inference import Classifier

    model = Classifier.load(tmp_path / "g", precision="fp32")
    ndcg = []
    for r in lists:
        logits = [p["score"] for p in model([(r["query"], d) for d in r["docs"]])]
        order = sorted(range(4), key=lambda i: -logits[i])
        dcg = sum(r["labels"][i] / math.log2(n + 2) for n, i in enumerate(order))
        ideal = sum(v / math.log2(n + 2) for n, v in enumerate(sorted(r["labels"], reverse=True)))
        ndcg.append(dcg / ideal)
    assert got["NDCG@10 (graded)"] == pytest.approx(sum(ndcg) / 3, abs=1e-5)
