"""Every route tokenizes a request's texts once: the length limits are checked on the
tokenization the model then runs (``TaskModel.prepare``), not on a second one. And the limits
themselves at their boundaries: exactly the limit passes, one token more is a 413 naming it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from bertkit.tokenizer import BertTokenizer

from .conftest import serve


@contextmanager
def counted_tokens() -> Iterator[list[int]]:
    """Counts the word pieces every entry into the tokenizer produces (specials left out), in
    any thread; a call made inside another (``encode_ids`` inside ``encode_batch``) is not
    counted again."""
    produced = [0]
    depth = threading.local()
    originals = {
        name: getattr(BertTokenizer, name) for name in ("encode", "encode_ids", "encode_batch")
    }

    def counting(name: str):
        original = originals[name]

        def wrapper(self, *args, **kwargs):
            outer = getattr(depth, "n", 0) == 0
            depth.n = getattr(depth, "n", 0) + 1
            try:
                out = original(self, *args, **kwargs)
            finally:
                depth.n -= 1
            if outer:
                results = out if name == "encode_batch" else [out]
                for r in results:
                    produced[0] += (
                        len(r)
                        if name == "encode_ids"
                        else sum(1 for s in r.special_tokens_mask if not s)
                    )
            return out

        return wrapper

    for name in originals:
        setattr(BertTokenizer, name, counting(name))
    try:
        yield produced
    finally:
        for name, original in originals.items():
            setattr(BertTokenizer, name, original)


def pieces(folder: Path, *texts: str) -> int:
    tok = BertTokenizer.from_pretrained(folder)
    return sum(len(tok.encode_ids(t)) for t in texts)


def test_every_route_tokenizes_each_text_once(
    tiny_mlm: Path, tiny_classifier: Path, task_models: dict[str, Path]
) -> None:
    models = [
        f"mlm={tiny_mlm}",
        f"sst={tiny_classifier}",
        f"ner={task_models['ner']}",
        f"qa={task_models['qa']}",
        f"rr={task_models['rerank']}",
    ]
    texts = ["the movie was good", "a very bad film , the plot was awful"]
    pair = ("the cat sat", "on the mat")
    question, context = "who sat ?", "the cat sat on the mat . the dog was good ."
    query, docs = "the cat", ["the cat sat on the mat", "a bad film", "the dog"]
    masked = ["the cat sat on the [MASK] .", "a [MASK] film"]
    # route, body, the texts it holds (a rerank pair reads the query once per text)
    cases = [
        ("/embed", {"inputs": texts, "model": "mlm"}, texts),
        ("/embed_all", {"inputs": texts, "model": "mlm"}, texts),
        ("/fill-mask", {"inputs": masked, "model": "mlm"}, masked),
        ("/predict", {"inputs": [texts[0], list(pair)], "model": "sst"}, [texts[0], *pair]),
        ("/predict", {"inputs": texts, "model": "sst", "truncate": True}, texts),
        ("/ner", {"inputs": texts, "model": "ner"}, texts),
        (
            "/qa",
            {"inputs": {"question": question, "context": context}, "model": "qa"},
            [question, context],
        ),
        ("/rerank", {"query": query, "texts": docs, "model": "rr"}, [query] * len(docs) + docs),
        (
            "/rerank",
            {"query": query, "texts": docs, "model": "rr", "truncate": True},
            [query] * len(docs) + docs,
        ),
    ]
    with serve(models=models) as client:
        for route, body, holds in cases:
            want = pieces(tiny_mlm, *holds)
            with counted_tokens() as produced:
                r = client.post(route, json=body)
            assert r.status_code == 200, (route, r.text)
            assert produced[0] == want, (
                f"{route} {body}: {produced[0]} pieces for {want} in the request"
            )


def test_length_limits_at_their_boundaries(tiny_mlm: Path, tiny_classifier: Path) -> None:
    """--max-input-tokens 12: a 12-token input passes, 13 is a 413 (a pair counts both texts
    and its three specials), ``truncate`` cuts instead; fill-mask's limit is the model's 64
    positions, exactly 64 passes."""
    ten = " ".join(["the"] * 10)  # 10 pieces + [CLS] [SEP] = 12
    with serve(models=[f"mlm={tiny_mlm}", f"sst={tiny_classifier}"], max_input_tokens=12) as client:
        assert client.post("/predict", json={"inputs": ten, "model": "sst"}).status_code == 200
        over = client.post("/predict", json={"inputs": ten + " cat", "model": "sst"})
        assert over.status_code == 413 and "Input 0 has 13" in over.json()["error"]
        cut = client.post(
            "/predict", json={"inputs": ten + " cat", "model": "sst", "truncate": True}
        )
        assert cut.status_code == 200
        # each text of the pair fits alone: with [CLS] [SEP] [SEP], 5 + 4 are 12, 5 + 5 are 13
        pair = [" ".join(["the"] * 5), " ".join(["cat"] * 4)]
        assert client.post("/predict", json={"inputs": [pair], "model": "sst"}).status_code == 200
        pair[1] += " dog"
        over = client.post("/predict", json={"inputs": ["a", pair], "model": "sst"})
        assert over.status_code == 413 and "Input 1 has 13" in over.json()["error"]
    with serve(models=[f"mlm={tiny_mlm}"]) as client:
        fits = " ".join(["the"] * 61 + ["[MASK]"])  # 62 pieces + 2 specials = 64 positions
        ok = client.post("/fill-mask", json={"inputs": fits, "top_k": 2})
        assert ok.status_code == 200 and len(ok.json()) == 1
        over = client.post("/fill-mask", json={"inputs": "the " + fits, "top_k": 2})
        assert over.status_code == 413 and "Input 0 has 65" in over.json()["error"]
        cut = client.post(
            "/fill-mask", json={"inputs": fits + " the", "top_k": 2, "truncate": True}
        )
        assert cut.status_code == 200  # the [MASK] is the 63rd piece: still inside


def test_raw_scores_are_the_logits(tiny_classifier: Path) -> None:
    """/predict's ``raw_scores`` are the model's logits (softmax of them gives the
    probabilities), ranked the same way."""
    import numpy as np

    from bertkit.inference import Classifier

    clf = Classifier.load(tiny_classifier, device="cpu", precision="fp32")
    (want,) = clf(["the movie was good"])
    with serve(models=[f"sst={tiny_classifier}"]) as client:
        raw = client.post(
            "/predict", json={"inputs": "the movie was good", "raw_scores": True}
        ).json()
        probs = client.post("/predict", json={"inputs": "the movie was good"}).json()
    by_label = {x["label"]: x["score"] for x in raw}
    logits = np.array([by_label[label] for label in ("0", "1")])
    assert logits == pytest.approx(np.array(want["logits"]), abs=1e-5)
    assert [x["label"] for x in raw] == [x["label"] for x in probs]
    soft = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert {x["label"]: x["score"] for x in probs} == pytest.approx(
        dict(zip(("0", "1"), soft)), abs=1e-5
    )


def test_the_413_of_ner_and_qa_offers_no_truncate(task_models: dict[str, Path]) -> None:
    """/ner and /qa have no ``truncate`` field (sending one is a 422), so their 413 over
    --max-input-tokens must not tell the client to send it, as /predict's does."""
    models = [f"ner={task_models['ner']}", f"qa={task_models['qa']}"]
    long = " ".join(["the"] * 20)
    with serve(models=models, max_input_tokens=12) as client:
        for route, body in (
            ("/ner", {"inputs": long}),
            ("/qa", {"inputs": {"question": "the cat", "context": long}}),
        ):
            over = client.post(route, json=body)
            reason = over.json()["error"]
            assert over.status_code == 413 and "--max-input-tokens" in reason, (route, reason)
            assert "truncate" not in reason, (route, reason)
            refused = client.post(route, json={**body, "truncate": True})
            assert refused.status_code == 422 and "truncate" in refused.json()["error"]


def test_one_output_classifier_predict_is_teis(cross_encoder, task_models) -> None:
    """/predict on a one-output classifier that is no regression model (a CrossEncoder folder,
    a ``finetune rerank`` one) answers as TEI and transformers' pipeline: its ``id2label`` name
    and the sigmoid of the logit, the logit itself with ``raw_scores``; the same score /rerank
    gives. (It answered the logit, labelled "score", and ignored ``raw_scores``.)"""
    import numpy as np

    folder, ce = cross_encoder
    pairs = [["the movie was good", "a great film"], ["the movie was good", "the cat sat"]]
    logits = ce.predict([tuple(p) for p in pairs], activation_fn=torch.nn.Identity())
    with serve(models=[f"ce={folder}", f"rr={task_models['rerank']}"]) as client:
        probs = client.post("/predict", json={"inputs": pairs, "model": "ce"}).json()
        raw = client.post(
            "/predict", json={"inputs": pairs, "model": "ce", "raw_scores": True}
        ).json()
        rr = client.post("/rerank", json={"query": pairs[0][0], "texts": ["a great film"]})
        rr_predict = client.post("/predict", json={"inputs": [pairs[0]], "model": "rr"}).json()
        rr_rerank = client.post(
            "/rerank", json={"model": "rr", "query": pairs[0][0], "texts": [pairs[0][1]]}
        ).json()
    assert [[x["label"] for x in p] for p in probs] == [["LABEL_0"], ["LABEL_0"]]
    got_raw = np.array([p[0]["score"] for p in raw])
    assert got_raw == pytest.approx(np.asarray(logits), abs=1e-4)  # as test_tei_compat
    got = np.array([p[0]["score"] for p in probs])
    assert got == pytest.approx(1 / (1 + np.exp(-got_raw)), abs=1e-9)
    # /rerank ran one pair, /predict two: batches of other shapes round differently (7e-6 on the
    # forced AVX2 path)
    assert got[0] == pytest.approx(rr.json()[0]["score"], abs=1e-4)
    assert rr_predict[0][0]["score"] == pytest.approx(rr_rerank[0]["score"], abs=1e-9)
