"""Cohere's caps on what a rerank reads of each document, through the app: ``max_tokens_per_doc``
(v2) cuts a document to its first N word pieces, ``max_chunks_per_doc`` (v1) reads a (query,
document) pair in its first N windows. The tiny CrossEncoder reads 64 positions and has a
whole-word vocabulary (one piece per word), so a document cut after N pieces is its first N
words; the 413 of --max-input-tokens checks the pairs as read. TEI's /rerank has no such fields."""

from __future__ import annotations

import math

import pytest

from .conftest import QUERY, serve

LIMIT = 160  # --max-input-tokens: LONG is under it, twice LONG over
FILLER = "the cat sat on the mat"  # 6 pieces, which the tiny model scores high
TAIL = " ".join(["good"] * 40)  # the query's last word, which it scores low
LONG = f"{' '.join([FILLER] * 12)} {TAIL}"  # 112 pieces; with the query 119 tokens


@pytest.fixture(scope="module")
def client(cross_encoder):
    folder, _ = cross_encoder
    with serve(models=[f"rr={folder}"], max_input_tokens=LIMIT) as c:
        yield c


def _rerank(client, documents: list[str], **caps) -> dict:
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": documents, **caps})
    assert r.status_code == 200, r.text
    return r.json()


def _score(client, document: str, **caps) -> float:
    return _rerank(client, [document], **caps)["results"][0]["relevance_score"]


def _logit(score: float) -> float:
    """The model's output behind a relevance score (a sigmoid): scores near 1 differ there."""
    return math.log(score / (1 - score))


def _first(n: int) -> str:
    """LONG cut after its n-th word piece (one per word)."""
    return " ".join(LONG.split()[:n])


def test_max_tokens_per_doc_scores_the_document_cut_after_that_many_pieces(client, cross_encoder):
    _, ce = cross_encoder
    assert len(ce.tokenizer(LONG, add_special_tokens=False)["input_ids"]) == 112
    assert len(ce.tokenizer(_first(30), add_special_tokens=False)["input_ids"]) == 30
    # the words that move the score lie beyond the cap
    whole = _score(client, LONG)
    capped = _rerank(client, [LONG], max_tokens_per_doc=30)
    (result,) = capped["results"]
    assert result["relevance_score"] == pytest.approx(_score(client, _first(30)), abs=1e-6)
    assert abs(_logit(result["relevance_score"]) - _logit(whole)) > 0.5
    # one window: CrossEncoder.predict of the cut text, and the usage of that pair
    want = float(ce.predict([(QUERY, _first(30))])[0])
    assert result["relevance_score"] == pytest.approx(want, abs=1e-5)
    assert capped["usage"]["total_tokens"] == len(ce.tokenizer(QUERY, _first(30))["input_ids"])
    assert result["document"] == {"text": LONG}  # the document as sent, not as read
    # /v2/rerank (Cohere v2's own field) reads it the same way
    v2 = client.post(
        "/v2/rerank", json={"query": QUERY, "documents": [LONG], "max_tokens_per_doc": 30}
    )
    assert v2.json()["results"] == capped["results"]


def test_max_tokens_per_doc_is_per_document_and_a_cap_above_the_length_changes_nothing(client):
    short = [FILLER, TAIL, _first(90)]
    plain = _rerank(client, short)["results"]
    assert _rerank(client, short, max_tokens_per_doc=90)["results"] == plain
    cut = _rerank(client, [*short, LONG], max_tokens_per_doc=90)["results"]
    by_index = {r["index"]: r["relevance_score"] for r in cut}
    alone = {r["index"]: r["relevance_score"] for r in plain}  # batched apart: 1e-6, not bits
    assert [by_index[i] for i in range(3)] == pytest.approx([alone[i] for i in range(3)], abs=1e-6)
    assert by_index[3] == pytest.approx(alone[2], abs=1e-6)  # LONG cut to 90 is _first(90)


def test_max_chunks_per_doc_reads_the_first_windows(client):
    """64 positions less the query (4) and 3 specials leave 57 pieces a window; LONG's 112 are
    read in 3 windows (a third of 64 shared by neighbours: starting at 0, 36, 72)."""
    info = client.get("/info").json()
    room = info["models"][0]["max_input_length"] - 4 - 3
    one = _rerank(client, [LONG], max_chunks_per_doc=1)
    assert one["results"][0]["relevance_score"] == pytest.approx(
        _score(client, _first(room)), abs=1e-6
    )
    assert one["usage"]["total_tokens"] == 64
    two = _rerank(client, [LONG], max_chunks_per_doc=2)
    assert two["usage"]["total_tokens"] == 2 * 64
    assert two["results"][0]["relevance_score"] == pytest.approx(
        _score(client, _first(36 + room)), abs=1e-6
    )
    whole = _rerank(client, [LONG])
    for enough in (3, 4, 1000):
        assert _rerank(client, [LONG], max_chunks_per_doc=enough)["results"] == whole["results"]
    # each window more moves the score: the 2nd and 3rd read more of the tail
    logits = [_logit(x["results"][0]["relevance_score"]) for x in (one, two, whole)]
    assert abs(logits[0] - logits[1]) > 0.1 and abs(logits[1] - logits[2]) > 0.1


def test_both_caps_compose(client):
    """The token cap first, then the windows of what is left: 80 pieces are 2 windows."""
    both = _score(client, LONG, max_tokens_per_doc=80, max_chunks_per_doc=1)
    assert both == pytest.approx(_score(client, _first(80), max_chunks_per_doc=1), abs=1e-6)
    assert both == pytest.approx(_score(client, LONG, max_chunks_per_doc=1), abs=1e-6)


def test_the_413_checks_the_pairs_as_read(client):
    """Twice LONG: 224 pieces, 231 tokens with the query; cut to 153 pieces the pair is 160;
    its 3 first windows end at piece 129 (136 tokens), its 4 first at 165 (172)."""
    twice = f"{LONG} {LONG}"
    for caps, read in (
        ({}, 231),
        ({"max_tokens_per_doc": 154}, 161),
        ({"max_chunks_per_doc": 4}, 172),
    ):
        r = client.post("/v1/rerank", json={"query": QUERY, "documents": [twice], **caps})
        message = r.json()["error"]["message"]
        assert r.status_code == 413 and f"Input 0 has {read}" in message
        # the shape has no truncate field: the answer names the cap the client can send
        assert '"max_tokens_per_doc" to cut' in message and "truncate" not in message
    r = client.post("/rerank", json={"query": QUERY, "texts": [twice]})
    assert r.status_code == 413 and '"truncate": true to cut' in r.json()["error"]
    assert _rerank(client, [twice], max_tokens_per_doc=153)["results"]
    assert _rerank(client, [twice], max_chunks_per_doc=3)["results"]


@pytest.mark.parametrize("field", ["max_tokens_per_doc", "max_chunks_per_doc"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (0, "greater than or equal to 1"),
        (-3, "greater than or equal to 1"),
        (1.5, "valid integer"),
        (2.0, "valid integer"),
        ("2", "valid integer"),
        (True, "valid integer"),
        ([2], "valid integer"),
    ],
)
@pytest.mark.parametrize("route", ["/v1/rerank", "/v2/rerank"])
def test_a_cap_that_is_no_positive_integer_is_a_422_json(client, route, field, value, reason):
    r = client.post(route, json={"query": QUERY, "documents": [FILLER], field: value})
    assert r.status_code == 422, r.text
    message = r.json()["error"]["message"]
    assert message.startswith(f"{field}: ") and reason in message


def test_tei_rerank_is_unaffected(client):
    """/rerank reads the whole pair in windows, as before; the Cohere fields are not its own
    (a 422 naming the field, as any unknown field of a TEI body), at / too."""
    texts = [TAIL, _first(90)]
    tei = client.post("/rerank", json={"query": QUERY, "texts": texts}).json()
    cohere = _rerank(client, texts, max_tokens_per_doc=1000, max_chunks_per_doc=1000)["results"]
    assert [(t["index"], t["score"]) for t in tei] == [
        (c["index"], c["relevance_score"]) for c in cohere
    ]
    assert _score(client, _first(90), max_tokens_per_doc=20) != pytest.approx(
        next(t["score"] for t in tei if t["index"] == 1), abs=1e-4
    )
    for route in ("/rerank", "/"):
        body = {"query": QUERY, "texts": texts, "max_tokens_per_doc": 20}
        r = client.post(route, json=body)
        assert r.status_code == 422 and "max_tokens_per_doc" in r.json()["error"], r.text
