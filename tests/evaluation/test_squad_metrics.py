"""Official SQuAD EM/F1: normalisation, max over gold answers, v2.0 empty answers and breakdown."""

from __future__ import annotations

import pytest

from bertkit.evaluation.squad import exact_match, f1, gold_answers, normalize_answer, squad_scores


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("The  Denver Broncos!", "denver broncos"),
        ("an apple, a pear", "apple pear"),
        ("Theatre", "theatre"),  # "the" only as a whole word
        ("A-team", "ateam"),  # punctuation removed before articles: "ateam" has no article left
        ("  ", ""),
        ("über café", "über café"),  # non-ASCII kept
    ],
)
def test_normalize(raw, norm):
    assert normalize_answer(raw) == norm


def test_em_and_f1_hand_computed():
    assert exact_match("the Broncos.", "Broncos") == 1.0
    assert exact_match("Denver Broncos", "Broncos") == 0.0
    # pred tokens: denver broncos ; gold: broncos -> P=1/2 R=1 F1=2/3
    assert f1("Denver Broncos", "Broncos") == pytest.approx(2 / 3)
    # repeated tokens count with multiplicity: pred "a b b", gold "b b c" -> common 2 -> P=2/3 R=2/3
    assert f1("x y y", "y y z") == pytest.approx(2 / 3)
    assert f1("cat", "dog") == 0.0
    assert f1("", "") == 1.0  # v2.0 rule
    assert f1("", "", version="1.1") == 0.0  # v1.1 script: no common token -> 0
    assert f1("", "dog") == 0.0 and f1("dog", "") == 0.0


def test_v11_max_over_golds_and_missing_prediction():
    gold = {"q1": ["Denver Broncos", "Broncos"], "q2": ["1911"], "q3": ["Paris"]}
    preds = {"q1": "the Denver Broncos", "q2": "in 1911"}
    s = squad_scores(gold, preds, "1.1")
    # q1 EM 1 F1 1 ; q2 EM 0 F1 2/3 ; q3 missing -> 0
    assert s["exact"] == pytest.approx(100 / 3)
    assert s["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert s["total"] == 3
    assert "HasAns_exact" not in s


def test_v2_breakdown_and_empty_answers():
    gold = {"a": ["Brazil"], "b": [], "c": ["1911", "in 1911"], "d": []}
    preds = {"a": "Brazil", "b": "", "c": "", "d": "Brazil"}
    s = squad_scores(gold, preds, "2.0")
    assert s["exact"] == pytest.approx(50.0) and s["f1"] == pytest.approx(50.0)
    assert (s["HasAns_exact"], s["HasAns_f1"], s["HasAns_total"]) == (50.0, 50.0, 2)
    assert (s["NoAns_exact"], s["NoAns_f1"], s["NoAns_total"]) == (50.0, 50.0, 2)


def test_v2_gold_answers_that_normalise_to_nothing_are_dropped():
    assert gold_answers(["the", "."], "2.0") == [""]
    assert gold_answers(["the", "Paris"], "2.0") == ["Paris"]
    assert gold_answers(["the"], "1.1") == ["the"]


def test_v2_has_answer_follows_the_raw_answer_list_as_the_official_script():
    """A question whose gold answers all normalise to "" (["the", "."]) is a HasAns question for
    the official evaluate-v2.0.py (``bool(qa["answers"])``), scored against [""]; its null answer
    counts 0 in ``find_best_thresh``. Hand-computed from the official script's rules."""
    from bertkit.tasks.squad_post import SquadPrediction, find_best_null_threshold

    gold = {"q1": ["the", "."], "q2": [], "q3": ["Denver"]}
    s = squad_scores(gold, {"q1": "", "q2": "", "q3": "Denver"}, "2.0")
    assert (s["exact"], s["HasAns_total"], s["NoAns_total"]) == (100.0, 2, 1)
    assert s["HasAns_exact"] == 100.0 and s["NoAns_exact"] == 100.0
    preds = {
        "q1": SquadPrediction("q1", "x", 0.0, 0.5, []),
        "q2": SquadPrediction("q2", "y", 0.0, 1.0, []),
        "q3": SquadPrediction("q3", "Denver", 0.0, -1.0, []),
    }
    # official: start at num_no_ans = 1; q3 (+1) -> 2 at -1.0; q1 (+0) -> 2; q2 (-1) -> 1
    best = find_best_null_threshold(preds, gold)
    assert (
        best.threshold == -1.0
        and best.f1 == pytest.approx(200 / 3)
        and best.exact == pytest.approx(200 / 3)
    )
