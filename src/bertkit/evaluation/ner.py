"""Entity-level precision, recall and F1 with conlleval semantics, overall and per type.

A predicted entity counts as correct only when its type, first token and last token all equal
those of a gold entity. Chunks are read with the conlleval rules (see
:func:`bertkit.evaluation.chunks.tag_spans`): ``I-X`` after ``O`` or after another type starts a
chunk, so IOB1 and IOB2 files score the same; IOBES is understood as well. Sentences are scored
separately, so no entity crosses a sentence boundary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from bertkit.evaluation.chunks import tag_spans


@dataclass(frozen=True)
class PRF:
    """Precision, recall, F1 (fractions) with the counts they come from."""

    precision: float
    recall: float
    f1: float
    num_gold: int
    num_pred: int
    num_correct: int

    @classmethod
    def from_counts(cls, correct: int, pred: int, gold: int) -> PRF:
        p = correct / pred if pred else 0.0
        r = correct / gold if gold else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        return cls(p, r, f, gold, pred, correct)


@dataclass(frozen=True)
class EntityScores:
    """Micro-averaged scores over all entities, ``per_type`` breakdown and token accuracy."""

    overall: PRF
    per_type: dict[str, PRF] = field(default_factory=dict)
    token_accuracy: float = 0.0

    def to_dict(self) -> dict[str, float | int | dict]:
        """Flat JSON-friendly form: precision/recall/f1 plus ``per_type`` and counts."""
        o = self.overall
        return {
            "precision": o.precision,
            "recall": o.recall,
            "f1": o.f1,
            "token_accuracy": self.token_accuracy,
            "num_gold": o.num_gold,
            "num_pred": o.num_pred,
            "per_type": {
                k: {"precision": v.precision, "recall": v.recall, "f1": v.f1, "support": v.num_gold}
                for k, v in self.per_type.items()
            },
        }


def entity_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> EntityScores:
    """Score predicted tag sequences against gold ones (one sequence per sentence).

    Raises ValueError when the sentence counts or any sentence lengths differ.
    """
    if len(gold) != len(pred):
        raise ValueError(
            f"expected as many predicted sentences as gold ones, got {len(pred)} vs {len(gold)}"
        )
    n_gold: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    n_ok: Counter[str] = Counter()
    tokens = tokens_ok = 0
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: expected {len(g)} predicted tags, got {len(p)}")
        gs, ps = set(tag_spans(g)), set(tag_spans(p))
        n_gold.update(k for k, _, _ in gs)
        n_pred.update(k for k, _, _ in ps)
        n_ok.update(k for k, _, _ in gs & ps)
        tokens += len(g)
        tokens_ok += sum(a == b for a, b in zip(g, p))
    types = sorted(set(n_gold) | set(n_pred))
    per_type = {k: PRF.from_counts(n_ok[k], n_pred[k], n_gold[k]) for k in types}
    overall = PRF.from_counts(sum(n_ok.values()), sum(n_pred.values()), sum(n_gold.values()))
    return EntityScores(overall, per_type, tokens_ok / tokens if tokens else 0.0)
