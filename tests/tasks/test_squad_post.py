"""SQuAD span search, v2.0 null decision and null-threshold tuning."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bertkit.data.tasks.squad import SquadAnswer, SquadExample, load_gold, read_squad
from bertkit.evaluation.squad import squad_scores
from bertkit.tasks.span_qa import SquadAdapter
from bertkit.tasks.squad_features import (
    SquadFeature,
    SquadFeatureConfig,
    convert_squad_examples,
)
from bertkit.tasks.squad_post import (
    SquadPostConfig,
    SquadPrediction,
    final_answers,
    find_best_null_threshold,
    null_answers,
    postprocess_squad,
)
from bertkit.tasks.windows import WindowConfig

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _oracle_logits(
    features: list[SquadFeature], null_for: set[str] = frozenset(), null_boost: float = 0.0
):
    """Logits that peak at each window's gold span (or at [CLS])."""
    starts, ends = [], []
    for f in features:
        s = np.zeros(len(f.input_ids) + 3)  # padded past the window: must be ignored
        e = np.zeros(len(f.input_ids) + 3)
        s[f.start_position] += 5.0
        e[f.end_position] += 5.0
        if f.qas_id in null_for:
            s[0] += null_boost
            e[0] += null_boost
        starts.append(s)
        ends.append(e)
    return starts, ends


def test_oracle_logits_recover_gold_text_from_original_context(bk_tok):
    examples = read_squad(FIXTURES / "task_squad_v1.json")
    cfg = SquadFeatureConfig(WindowConfig(doc_stride=4), max_query_length=12)
    feats = convert_squad_examples(bk_tok, examples, 24, cfg, is_training=True)
    s, e = _oracle_logits(feats)
    preds = postprocess_squad(examples, feats, s, e)
    answers = final_answers(preds, version_2=False)
    assert answers == {ex.qas_id: ex.answers[0].text for ex in examples}
    assert squad_scores(load_gold(examples), answers, "1.1") == {
        "exact": 100.0,
        "f1": 100.0,
        "total": 4,
    }
    p = preds["q1"]
    assert len(p.nbest) <= 20 and p.nbest[0].text == "Brazil"
    assert sum(c.probability for c in p.nbest) == pytest.approx(1.0)


def _feature(offsets, max_ctx=None) -> SquadFeature:
    n = len(offsets)
    return SquadFeature(
        0,
        "q",
        list(range(n)),
        [0] * n,
        [1] * n,
        offsets,
        max_ctx or [o is not None for o in offsets],
        0,
        0,
        1,
    )


def test_span_rules_start_le_end_max_length_context_only():
    from bertkit.data.tasks.squad import SquadExample

    ctx = "alpha beta gamma delta"
    ex = SquadExample("q", "?", ctx, ())
    offs = [None, None, (0, 5), (6, 10), (11, 16), (17, 22), None]
    f = _feature(offs)
    s = np.array([9.0, 0, 1, 2, 8, 0, 10])  # [CLS] and final [SEP] outside the context
    e = np.array([9.0, 10, 3, 1, 0, 7, 10])
    p = postprocess_squad(
        [ex], [f], [s], [e], SquadPostConfig(n_best_size=20, max_answer_length=30)
    )["q"]
    # best: start "gamma"(8) + end "delta"(7) = 15; "gamma".."beta" invalid (end < start)
    assert p.best_text == "gamma delta" and (p.nbest[0].start_char, p.nbest[0].end_char) == (11, 22)
    assert p.null_score == 18.0 and p.null_score_diff == pytest.approx(3.0)
    short = postprocess_squad([ex], [f], [s], [e], SquadPostConfig(max_answer_length=1))["q"]
    assert short.best_text == "gamma"  # one-token spans: gamma 8+0 beats delta 0+7, alpha 1+3
    assert p.answer(version_2=True, threshold=2.0) == "" and p.answer(True, 3.0) == "gamma delta"
    assert p.answer(version_2=False, threshold=-100) == "gamma delta"


def test_max_context_rule_blocks_starts():
    from bertkit.data.tasks.squad import SquadExample

    ex = SquadExample("q", "?", "alpha beta", ())
    f = _feature([None, (0, 5), (6, 10), None], max_ctx=[False, False, True, False])
    s, e = np.array([0, 9.0, 1, 0]), np.array([0, 0, 5.0, 0])
    assert postprocess_squad([ex], [f], [s], [e])["q"].best_text == "beta"
    off = SquadPostConfig(use_max_context=False)
    assert postprocess_squad([ex], [f], [s], [e], off)["q"].best_text == "alpha beta"


def test_no_valid_span_gives_empty_with_infinite_diff():
    from bertkit.data.tasks.squad import SquadExample

    ex = SquadExample("q", "?", "alpha", ())
    f = _feature([None, None])
    p = postprocess_squad([ex], [f], [np.zeros(2)], [np.zeros(2)])["q"]
    assert p.best_text == "" and math.isinf(p.null_score_diff) and p.nbest == []


def _pred(q, text, diff):
    return SquadPrediction(q, text, 0.0, diff, [])


def test_find_best_null_threshold_hand_computed():
    gold = {"h1": ["Paris"], "h2": ["1911"], "n1": [], "n2": []}
    preds = {
        "h1": _pred("h1", "Paris", -2.0),  # answered by any threshold >= -2
        "n1": _pred("n1", "Lyon", 0.5),
        "h2": _pred("h2", "1911", 1.0),
        "n2": _pred("n2", "1903", 3.0),
    }
    best = find_best_null_threshold(preds, gold)
    # thresholds: <-2: F1 2/4 ; -2: 3/4 ; 0.5: 2/4 ; 1.0: 3/4 (tie, not better) ; 3.0: 2/4
    assert (
        best.threshold == -2.0
        and best.f1 == pytest.approx(75.0)
        and best.exact == pytest.approx(75.0)
    )
    answers = final_answers(preds, version_2=True, threshold=best.threshold)
    assert answers == {"h1": "Paris", "n1": "", "h2": "", "n2": ""}
    assert squad_scores(gold, answers, "2.0")["f1"] == pytest.approx(best.f1)


def test_threshold_all_null_and_ties():
    gold = {"n1": [], "h1": ["x"]}
    preds = {"n1": _pred("n1", "y", 1.0), "h1": _pred("h1", "x", 1.0)}  # tie: cannot split them
    best = find_best_null_threshold(preds, gold)
    assert best.threshold == 0.0 and best.f1 == pytest.approx(50.0)  # all-null: just below 1.0
    gold2 = {"n1": [], "n2": []}
    preds2 = {"n1": _pred("n1", "a", 0.5), "n2": _pred("n2", "b", 2.0)}
    assert find_best_null_threshold(preds2, gold2).threshold == -0.5


def test_null_answer_on_a_question_whose_answers_normalise_to_nothing_scores_0():
    """The official v2.0 script at a threshold: a question with answers (raw list non-empty)
    whose null answer was chosen scores 0 (``apply_no_ans_threshold``), even when every answer
    normalises to "" (its raw "" vs [""] would score 1). The score reported at the tuned
    threshold is the one the tuning found."""
    gold = {"h": ["The", "."], "n": []}
    preds = {"h": _pred("h", "Paris", 1.0), "n": _pred("n", "Lyon", 2.0)}
    best = find_best_null_threshold(preds, gold)  # all null: h 0, n 1 -> 50
    assert best.threshold == 0.0 and best.f1 == pytest.approx(50.0)
    answers = final_answers(preds, True, best.threshold)
    assert answers == {"h": "", "n": ""} and null_answers(preds, True, best.threshold) == {"h", "n"}
    at = squad_scores(gold, answers, "2.0", no_answer=null_answers(preds, True, best.threshold))
    assert (at["exact"], at["f1"], at["HasAns_exact"], at["NoAns_exact"]) == (
        50.0,
        50.0,
        0.0,
        100.0,
    )
    assert squad_scores(gold, answers, "2.0")["HasAns_exact"] == 100.0  # raw, no threshold
    # the adapter's dev score at that threshold (what fine-tuning reports and keeps)
    examples = [
        SquadExample("h", "q?", "The.", (SquadAnswer("The", 0), SquadAnswer(".", 3))),
        SquadExample("n", "q?", "Lyon", (), is_impossible=True),
    ]
    scored = SquadAdapter("squad", "squad2", 128, version_2=True)._scored(
        examples, preds, best.threshold
    )
    assert scored.metrics["f1"] == pytest.approx(best.f1) and scored.metrics["HasAns_f1"] == 0.0


def test_v2_end_to_end_threshold_tuned_then_used(bk_tok):
    examples = read_squad(FIXTURES / "task_squad_v2.json")
    cfg = SquadFeatureConfig(WindowConfig(doc_stride=8), max_query_length=16)
    feats = convert_squad_examples(bk_tok, examples, 32, cfg, is_training=True)
    impossible = {e.qas_id for e in examples if e.is_impossible}
    s, e = _oracle_logits(feats, null_for=impossible, null_boost=1.0)
    preds = postprocess_squad(examples, feats, s, e)
    gold = load_gold(examples)
    at_zero = squad_scores(gold, final_answers(preds, True, 0.0), "2.0")
    best = find_best_null_threshold(preds, gold)
    tuned = squad_scores(gold, final_answers(preds, True, best.threshold), "2.0")
    assert tuned["f1"] == pytest.approx(best.f1) == pytest.approx(100.0)
    assert tuned["NoAns_total"] == 2 and tuned["HasAns_exact"] == 100.0
    assert at_zero["f1"] <= tuned["f1"]


def _windows_of_one_example(bk_tok):
    """The first fixture question in windows of 24 tokens with stride 4 (several per context)."""
    examples = read_squad(FIXTURES / "task_squad_v1.json")[:1]
    cfg = SquadFeatureConfig(WindowConfig(doc_stride=4), max_query_length=12)
    feats = convert_squad_examples(bk_tok, examples, 24, cfg, is_training=False)
    assert len(feats) >= 2, "the test needs several windows per context"
    return examples, feats


def test_null_score_is_the_minimum_over_windows(bk_tok):
    """google-research/bert keeps the smallest [CLS] score over the windows (the window most
    sure there is an answer); the largest would call answerable questions unanswerable."""
    examples, feats = _windows_of_one_example(bk_tok)
    starts = [np.zeros(len(f.input_ids)) for f in feats]
    ends = [np.zeros(len(f.input_ids)) for f in feats]
    for k, (s, e) in enumerate(zip(starts, ends)):
        s[0] = e[0] = float(k + 1)  # window k: null score 2 (k + 1)
    pred = postprocess_squad(examples, feats, starts, ends)[examples[0].qas_id]
    assert pred.null_score == 2.0  # min over windows, not 2 * len(feats)


def test_spans_repeated_by_overlapping_windows_appear_once(bk_tok):
    """Without the max-context filter every window that holds a span proposes it; the n-best
    list keeps each character span once (its best-scoring copy)."""
    examples, feats = _windows_of_one_example(bk_tok)
    starts, ends = [], []
    for f in feats:  # every window scores its own first context token as a one-token answer
        s, e = np.full(len(f.input_ids), -10.0), np.full(len(f.input_ids), -10.0)
        first = next(i for i, o in enumerate(f.offsets) if o is not None)
        s[first] = e[first] = 3.0
        starts.append(s)
        ends.append(e)
    # a token shared by two windows: make both propose the same span with different scores
    shared = [
        (k, i)
        for k, f in enumerate(feats)
        for i, o in enumerate(f.offsets)
        if o == feats[1].offsets[next(i for i, o in enumerate(feats[1].offsets) if o is not None)]
    ]
    assert len(shared) >= 2, "the windows must overlap"
    for rank, (k, i) in enumerate(shared):
        starts[k][i] = ends[k][i] = 5.0 - rank
    config = SquadPostConfig(n_best_size=20, use_max_context=False)
    pred = postprocess_squad(examples, feats, starts, ends, config)[examples[0].qas_id]
    spans = [(c.start_char, c.end_char) for c in pred.nbest]
    assert len(spans) == len(set(spans))  # no span twice
    top = pred.nbest[0]
    assert (top.start_logit, top.end_logit) == (5.0, 5.0)  # the best-scoring copy is kept
    assert pytest.approx(sum(c.probability for c in pred.nbest)) == 1.0


def test_the_best_thresholds_exact_match_counts_a_no_answer_question_answered():
    """EM at the chosen threshold: the no-answer question answered first (diff -1) loses its
    null point, then two has-answer questions gain theirs; best at 0.5 with 2 of 3."""
    gold = {"n1": [], "h1": ["x"], "h2": ["z"]}
    preds = {"n1": _pred("n1", "y", -1.0), "h1": _pred("h1", "x", 0.0), "h2": _pred("h2", "z", 0.5)}
    best = find_best_null_threshold(preds, gold)
    assert best.threshold == 0.5
    assert best.f1 == pytest.approx(200 / 3) and best.exact == pytest.approx(200 / 3)


def test_the_adapter_tunes_a_v2_threshold_on_dev_and_reads_starts_and_ends_apart(bk_tok):
    """SquadAdapter.fit_dev on oracle rows (start logits != end logits): the v2.0 threshold is
    the tuned one (not the saved 0.0) and every answer is found."""
    examples = read_squad(FIXTURES / "task_squad_v2.json")
    cfg = SquadFeatureConfig(WindowConfig(doc_stride=8), max_query_length=16)
    feats = convert_squad_examples(bk_tok, examples, 32, cfg, is_training=True)
    impossible = {e.qas_id for e in examples if e.is_impossible}
    s, e = _oracle_logits(feats, null_for=impossible, null_boost=1.0)
    best = find_best_null_threshold(postprocess_squad(examples, feats, s, e), load_gold(examples))
    assert best.threshold != 0.0, "the test needs a tuned threshold away from the default"
    v2 = SquadAdapter("squad", "squad2", 32, version_2=True, windows=cfg)
    scored = v2.fit_dev(examples, feats, list(zip(s, e, strict=True)))
    assert scored.metrics["null_threshold"] == best.threshold
    assert scored.metrics["f1"] == pytest.approx(100.0)


def test_the_adapter_reads_a_rows_start_and_end_logits_apart(bk_tok):
    """A row is (start logits, end logits): a three-token span comes back whole."""
    examples = read_squad(FIXTURES / "task_squad_v1.json")[:1]
    cfg = SquadFeatureConfig(WindowConfig(doc_stride=8), max_query_length=16)
    feats = convert_squad_examples(bk_tok, examples, 64, cfg, is_training=False)
    rows = []
    for f in feats:
        s, e = np.zeros(len(f.input_ids)), np.zeros(len(f.input_ids))
        if f is feats[0]:
            s[f.doc_offset], e[f.doc_offset + 2] = 9.0, 9.0
        rows.append((s, e))
    (pred,) = (
        SquadAdapter("squad", "squad1", 64, windows=cfg).score(examples, feats, rows).predictions
    )
    first = feats[0]
    start, end = first.offsets[first.doc_offset][0], first.offsets[first.doc_offset + 2][1]
    assert pred["answer"] == examples[0].context[start:end] and len(pred["answer"].split()) >= 2
