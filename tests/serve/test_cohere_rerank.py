"""/v1/rerank and /v2/rerank: the rerank shape of Cohere, Jina, vLLM and Infinity, which RAG
frameworks' clients speak, over the engine path of TEI's /rerank (the same scores), against a
real uvicorn server, with raw HTTP and with the ``cohere`` package's v1 and v2 clients."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from .conftest import QUERY, TEXTS, serve_http

LIMIT = 6  # --max-client-batch-size: one document more is the 413
MAX_TOKENS = 48  # --max-input-tokens (the tiny model reads 64 positions: windows below it)


@pytest.fixture(scope="module")
def url(cross_encoder, tiny_mlm: Path):
    """An encoder first (it cannot rerank: a request without ``model`` must skip it) and the
    CrossEncoder as ``rr``."""
    folder, _ = cross_encoder
    models = [f"enc={tiny_mlm}", f"rr={folder}"]
    with serve_http(
        models=models, max_client_batch_size=LIMIT, max_input_tokens=MAX_TOKENS
    ) as base:
        yield base


def _post(base: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base}{route}", json=body, timeout=60)


def _rerank(base: str, body: dict, route: str = "/v1/rerank") -> dict:
    r = _post(base, route, {"query": QUERY, "documents": TEXTS, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_scores_and_order_are_reranks_in_the_cohere_shape(url: str, cross_encoder) -> None:
    _, ce = cross_encoder
    tei = _post(url, "/rerank", {"query": QUERY, "texts": TEXTS, "model": "rr"}).json()
    got = _rerank(url, {"model": "rr"})
    assert set(got) == {"id", "model", "results", "usage"} and got["model"] == "rr"
    assert isinstance(got["id"], str) and got["id"]
    results = got["results"]
    assert [r["index"] for r in results] == [t["index"] for t in tei]  # best first, all four
    want = ce.predict([(QUERY, t) for t in TEXTS])  # sigmoid: CrossEncoder's one-output default
    assert np.ptp(want) > 0.05  # distinct scores: the order is not a tie-break
    for r, t in zip(results, tei):
        assert set(r) == {"index", "relevance_score", "document"}
        assert r["relevance_score"] == pytest.approx(t["score"], abs=1e-6)
        assert r["relevance_score"] == pytest.approx(float(want[r["index"]]), abs=1e-5)
        assert r["document"] == {"text": TEXTS[r["index"]]}  # returned unless told not to
    # without "model": the first served model that can rerank (enc, listed first, cannot)
    plain = _rerank(url, {})
    assert plain["model"] == "rr" and plain["results"] == results
    # Cohere v2's path takes the same body and gives the same answer
    v2 = _rerank(url, {"model": "rr"}, "/v2/rerank")
    assert v2["results"] == results and v2["usage"] == got["usage"]


def test_top_n_keeps_the_best(url: str) -> None:
    best = [r["index"] for r in _rerank(url, {})["results"]]
    assert [r["index"] for r in _rerank(url, {"top_n": 2})["results"]] == best[:2]
    assert [r["index"] for r in _rerank(url, {"top_n": 1})["results"]] == best[:1]
    for everything in (0, None, 10):  # vLLM's default 0 is "all"; more than there are: all
        assert [r["index"] for r in _rerank(url, {"top_n": everything})["results"]] == best


def test_return_documents(url: str) -> None:
    without = _rerank(url, {"return_documents": False})["results"]
    assert without and all(set(r) == {"index", "relevance_score"} for r in without)
    for flag in (True, None):
        with_text = _rerank(url, {"return_documents": flag})["results"]
        assert [r["document"]["text"] for r in with_text] == [TEXTS[r["index"]] for r in without]


def test_documents_as_objects(url: str) -> None:
    plain = _rerank(url, {})["results"]
    objects = [{"text": t} for t in TEXTS]
    assert _rerank(url, {"documents": objects})["results"] == plain
    # Cohere v1's documents may carry other fields: the text is ranked, as Cohere ranks it
    titled = [{"title": f"doc {i}", "text": t} for i, t in enumerate(TEXTS)]
    got = _rerank(url, {"documents": titled, "rank_fields": ["text"]})["results"]
    assert got == plain
    mixed = [TEXTS[0], *objects[1:]]
    assert _rerank(url, {"documents": mixed})["results"] == plain


def test_usage_counts_the_tokens_of_the_pairs(url: str, cross_encoder) -> None:
    _, ce = cross_encoder
    want = sum(len(ce.tokenizer(QUERY, t)["input_ids"]) for t in TEXTS)  # [CLS] q [SEP] t [SEP]
    assert want > 4 * len(TEXTS)
    assert _rerank(url, {})["usage"] == {"total_tokens": want}
    # top_n cuts the answer, not what was read
    assert _rerank(url, {"top_n": 1})["usage"] == {"total_tokens": want}
    one = len(ce.tokenizer(QUERY, TEXTS[1])["input_ids"])
    assert _rerank(url, {"documents": [TEXTS[1]]})["usage"] == {"total_tokens": one}


INT, BOOL, STR = "Input should be a valid integer", "Input should be a valid boolean", "string"
ERRORS = [
    ({"documents": TEXTS}, 422, "query: Field required"),
    ({"query": QUERY}, 422, "documents: Field required"),
    ({"query": 5, "documents": TEXTS}, 422, "query: Input should be a valid string"),
    ({"query": QUERY, "documents": "the cat"}, 422, "documents: Input should be a valid list"),
    ({"query": QUERY, "documents": [5]}, 422, "documents.0"),
    ({"query": QUERY, "documents": [{"txt": "a"}]}, 422, "text: Field required"),
    ({"query": QUERY, "documents": TEXTS, "top_n": "2"}, 422, f"top_n: {INT}"),
    ({"query": QUERY, "documents": TEXTS, "top_n": 2.0}, 422, f"top_n: {INT}"),
    ({"query": QUERY, "documents": TEXTS, "top_n": True}, 422, f"top_n: {INT}"),
    ({"query": QUERY, "documents": TEXTS, "top_n": -1}, 422, "top_n: Input should be greater"),
    ({"query": QUERY, "documents": TEXTS, "return_documents": 1}, 422, f"return_documents: {BOOL}"),
    ({"query": QUERY, "documents": TEXTS, "model": 1}, 422, "model: Input should be a valid str"),
    ({"query": QUERY, "documents": TEXTS, "rank_fields": ["title"]}, 422, 'ranks a document\'s "text"'),
    ({"query": "", "documents": ["a", ""]}, 400,
     "`documents` cannot be empty: input 1 is an empty text, and so is the query"),
    ({"query": QUERY, "documents": []}, 400, "`documents` cannot be empty"),
    ({"query": QUERY, "documents": ["a"] * (LIMIT + 1)}, 413,
     f"batch size {LIMIT + 1} > maximum allowed batch size {LIMIT}"),
    ({"query": QUERY, "documents": TEXTS, "model": "enc"}, 422, "model 'enc' (feature-extraction) cannot rerank"),
]  # fmt: skip


@pytest.mark.parametrize("route", ["/v1/rerank", "/v2/rerank"])
@pytest.mark.parametrize(("body", "status", "reason"), ERRORS)
def test_errors_in_openai_shape(url: str, route: str, body: dict, status: int, reason: str) -> None:
    r = _post(url, route, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert reason in error["message"]
    if status == 400:
        assert error["type"] == "empty"


def test_an_empty_query_with_text_is_no_empty_input(url: str) -> None:
    """TEI's rule, as /rerank: a pair is empty only when both texts are."""
    got = _rerank(url, {"query": "", "documents": ["a", "the cat"]})
    assert sorted(r["index"] for r in got["results"]) == [0, 1]
    assert _rerank(url, {"query": QUERY, "documents": ["", "a"]})["results"]


def test_a_pair_over_the_token_limit_is_a_413_offering_no_truncate(url: str) -> None:
    """The shape has no ``truncate``: the 413 (as /rerank's) does not tell the client to send one
    (it would be ignored); /rerank's own 413 does."""
    long = " ".join(["the cat sat"] * 20)  # 60 words: over 48 tokens with the query
    r = _post(url, "/v1/rerank", {"query": QUERY, "documents": ["good", long]})
    assert r.status_code == 413, r.text
    reason = r.json()["error"]["message"]
    assert "at most 48 tokens" in reason and "Input 1 has" in reason
    assert "truncate" not in reason
    tei = _post(url, "/rerank", {"query": QUERY, "texts": ["good", long]})
    assert tei.status_code == 413 and 'send "truncate": true' in tei.json()["error"]


def test_clients_extra_fields_are_ignored(url: str) -> None:
    """What clients send besides: Cohere v1's nulls (the SDK sends None for rank_fields and
    max_chunks_per_doc through LangChain), v2's priority, vLLM's own; and v2's
    max_tokens_per_doc at its default, over these documents' lengths (the caps themselves:
    test_rerank_caps.py)."""
    plain = _rerank(url, {})["results"]
    extra = {
        "rank_fields": None,
        "max_chunks_per_doc": None,
        "max_tokens_per_doc": 4096,
        "priority": 0,
        "truncate_prompt_tokens": None,
        "model": None,
    }
    assert _rerank(url, extra)["results"] == plain


def test_counted_in_metrics_by_route(url: str) -> None:
    _rerank(url, {})
    _rerank(url, {}, "/v2/rerank")
    text = httpx.get(f"{url}/metrics").text
    for route in ("/v1/rerank", "/v2/rerank"):
        assert f'bertkit_request_count_total{{route="{route}"}}' in text
        assert f'bertkit_request_success_total{{route="{route}"}}' in text


def test_cohere_clients(url: str, cross_encoder) -> None:
    """The ``cohere`` package (what LangChain's and LlamaIndex's CohereRerank call): its v1
    client posts to /v1/rerank (documents as strings or objects), its v2 client to /v2/rerank."""
    cohere = pytest.importorskip("cohere")
    _, ce = cross_encoder
    want = ce.predict([(QUERY, t) for t in TEXTS])
    best = list(np.argsort(-want, kind="stable"))

    v1 = cohere.Client(api_key="unused", base_url=url, timeout=60)
    res = v1.rerank(model="rr", query=QUERY, documents=TEXTS, top_n=2, return_documents=True)
    assert [r.index for r in res.results] == best[:2]
    for r in res.results:
        assert r.relevance_score == pytest.approx(float(want[r.index]), abs=1e-5)
        assert r.document.text == TEXTS[r.index]
    objects = v1.rerank(model="rr", query=QUERY, documents=[{"text": t} for t in TEXTS])
    assert [r.index for r in objects.results] == best

    v2 = cohere.ClientV2(api_key="unused", base_url=url, timeout=60)
    res2 = v2.rerank(model="rr", query=QUERY, documents=TEXTS, top_n=3, max_tokens_per_doc=512)
    assert [r.index for r in res2.results] == best[:3]
    for r in res2.results:
        assert r.relevance_score == pytest.approx(float(want[r.index]), abs=1e-5)
    hosted = v2.rerank(model="rerank-v3.5", query=QUERY, documents=TEXTS)  # not served: the default
    assert [r.index for r in hosted.results] == best
    with pytest.raises(cohere.errors.BadRequestError, match="cannot be empty"):
        v2.rerank(model="rr", query=QUERY, documents=[])


@pytest.mark.parametrize("route", ["/v1/rerank", "/v2/rerank"])
def test_a_model_name_not_served_picks_the_default_reranker(url: str, route: str) -> None:
    """As /v1/embeddings: clients send their hosted model's name (LangChain's CohereRerank:
    rerank-english-v3.0); the answer names the model that ranked."""
    asked = _post(url, route, {"query": QUERY, "documents": TEXTS, "model": "rerank-english-v3.0"})
    named = _post(url, route, {"query": QUERY, "documents": TEXTS, "model": "rr"})
    assert asked.status_code == 200, asked.text
    assert asked.json()["model"] == "rr"
    assert asked.json()["results"] == named.json()["results"]
