"""Official SQuAD v1.1 / v2.0 exact match and F1.

Answers are normalised as in the official scripts: lowercase, drop ASCII punctuation, drop the
articles a/an/the, collapse whitespace. A prediction scores the max over the gold answers. In
v2.0 an unanswerable question has the single gold answer "" and the prediction "" means "no
answer"; an empty-vs-empty comparison scores 1 for both EM and F1, and the result carries the
HasAns/NoAns breakdown. Questions with no prediction score 0 (v1.1 script behaviour).

At a no-answer threshold (``squad_scores(..., no_answer=...)``) a question whose null answer was
chosen scores as the official v2.0 script's ``apply_no_ans_threshold``: 1 when it has no answer,
0 when it has one, "has one" read from the raw answer list (:func:`has_answer`).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """Lowercase, remove punctuation, articles and extra whitespace (official order)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str, version: str = "2.0") -> float:
    """Token-overlap F1 of the normalised strings.

    v2.0: if either is empty, 1.0 only if both are. v1.1 (its script): no common token -> 0.
    """
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if (not p or not g) and not version.startswith("1"):
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str], version: str = "2.0") -> list[str]:
    """The gold list a question is scored against.

    v2.0 drops answers that normalise to nothing and uses [""] when none remain (unanswerable);
    v1.1 keeps the list as it is.
    """
    if version.startswith("1"):
        return list(answers)
    kept = [a for a in answers if normalize_answer(a)]
    return kept or [""]


def has_answer(answers: Sequence[str]) -> bool:
    """The official v2.0 script's has-answer test, ``bool(qa["answers"])``: the raw list, so a
    question whose every answer normalises to "" has one (its raw scores still compare against
    [""], see :func:`gold_answers`)."""
    return len(answers) > 0


def null_answer_score(answers: Sequence[str]) -> float:
    """EM and F1 of a question whose null answer was chosen at a no-answer threshold: the
    official ``apply_no_ans_threshold``'s ``float(not qid_to_has_ans[qid])``."""
    return float(not has_answer(answers))


def squad_scores(
    gold: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    version: str = "1.1",
    no_answer: Collection[str] = (),
) -> dict[str, float]:
    """EM/F1 (percent) of ``predictions`` (qas_id -> text, "" = no answer) against ``gold``.

    ``gold`` maps every question id to its gold texts (empty for unanswerable). ``no_answer``
    (v2.0) names the questions whose null answer a no-answer threshold chose (the official
    script's ``na_prob > thresh``): each scores :func:`null_answer_score`, not its text's score.
    Returns ``exact``, ``f1``, ``total`` and, for version "2.0", ``HasAns_*``/``NoAns_*``
    entries with the official names (each present only when that group is non-empty).
    """
    em_raw, f1_raw = raw_scores(gold, predictions, version)
    for q in no_answer:
        if q in gold:
            em_raw[q] = f1_raw[q] = null_answer_score(gold[q])
    out = _summary(list(gold), em_raw, f1_raw)
    if version.startswith("2"):
        has = [q for q, a in gold.items() if has_answer(a)]
        no = [q for q in gold if q not in set(has)]
        for name, ids in (("HasAns", has), ("NoAns", no)):
            if ids:
                part = _summary(ids, em_raw, f1_raw)
                out.update(
                    {
                        f"{name}_exact": part["exact"],
                        f"{name}_f1": part["f1"],
                        f"{name}_total": part["total"],
                    }
                )
    return out


def raw_scores(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str], version: str = "1.1"
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-question EM and F1 in [0, 1] (max over gold answers; 0 when no prediction)."""
    em_raw: dict[str, float] = {}
    f1_raw: dict[str, float] = {}
    for qid, answers in gold.items():
        golds = gold_answers(answers, version)
        if qid not in predictions:
            em_raw[qid] = f1_raw[qid] = 0.0
            continue
        pred = predictions[qid]
        em_raw[qid] = max(exact_match(pred, a) for a in golds) if golds else 0.0
        f1_raw[qid] = max(f1(pred, a, version) for a in golds) if golds else 0.0
    return em_raw, f1_raw


def _summary(
    ids: Sequence[str], em_raw: Mapping[str, float], f1_raw: Mapping[str, float]
) -> dict[str, float]:
    n = len(ids)
    if n == 0:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    return {
        "exact": 100.0 * sum(em_raw[q] for q in ids) / n,
        "f1": 100.0 * sum(f1_raw[q] for q in ids) / n,
        "total": n,
    }
