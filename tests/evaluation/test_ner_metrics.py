"""Entity-level scores against seqeval (default, conlleval-like mode) and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from seqeval import metrics as sq

from bertkit.evaluation.ner import entity_scores


def test_hand_computed():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-MISC"]]
    s = entity_scores(gold, pred)
    # gold: PER, LOC, ORG ; pred: PER, ORG(wrong span type), ORG, MISC ; correct: PER, ORG
    assert (s.overall.num_gold, s.overall.num_pred, s.overall.num_correct) == (3, 4, 2)
    assert s.overall.precision == pytest.approx(0.5)
    assert s.overall.recall == pytest.approx(2 / 3)
    assert s.overall.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert s.per_type["LOC"].recall == 0.0 and s.per_type["MISC"].precision == 0.0
    assert s.per_type["PER"].f1 == 1.0
    assert s.token_accuracy == pytest.approx(4 / 6)
    assert s.to_dict()["per_type"]["ORG"]["support"] == 1


def test_i_after_o_starts_chunk_and_boundary_splits():
    # conlleval: I-PER after O is a chunk; a sentence boundary closes a chunk
    gold = [["O", "I-PER", "I-PER"], ["I-PER"]]
    pred = [["O", "B-PER", "I-PER"], ["B-PER"]]
    assert entity_scores(gold, pred).overall.f1 == 1.0


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="sentence 0: expected 2 predicted tags, got 1"):
        entity_scores([["O", "O"]], [["O"]])


def _random_tags(rng, n, scheme_tags):
    return [str(rng.choice(scheme_tags)) for _ in range(n)]


@pytest.mark.parametrize("seed", range(30))
def test_matches_seqeval_on_random_iob_tags(seed):
    rng = np.random.default_rng(seed)
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "I-MISC"]
    if seed % 3 == 0:
        tags += ["E-PER", "S-LOC"]  # IOBES mixed in
    gold, pred = [], []
    for _ in range(int(rng.integers(1, 12))):
        n = int(rng.integers(1, 15))
        g = _random_tags(rng, n, tags)
        p = [t if rng.random() < 0.6 else str(rng.choice(tags)) for t in g]
        gold.append(g)
        pred.append(p)
    s = entity_scores(gold, pred)
    assert s.overall.precision == pytest.approx(
        sq.precision_score(gold, pred, zero_division=0), abs=1e-12
    )
    assert s.overall.recall == pytest.approx(
        sq.recall_score(gold, pred, zero_division=0), abs=1e-12
    )
    assert s.overall.f1 == pytest.approx(sq.f1_score(gold, pred, zero_division=0), abs=1e-12)
    report = sq.classification_report(gold, pred, output_dict=True, zero_division=0)
    for kind, prf in s.per_type.items():
        if kind in report:
            assert prf.f1 == pytest.approx(report[kind]["f1-score"], abs=1e-12)
            assert prf.num_gold == report[kind]["support"]
