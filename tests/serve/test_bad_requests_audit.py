"""Every field of every route given wrong values: a 4xx with a JSON reason in the shape of the
route (OpenAI's under /v1/, TEI's elsewhere), never a 500, and the route still answers a valid
request afterwards. test_fuzz_and_shutdown.py sends malformed whole bodies; this goes field by
field, with the models of every task served (the base URL's task included)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bertkit.serve.errors import is_openai

from .conftest import serve

LONG = " ".join(["cat"] * 300)  # over the 64 positions of the tiny models, under the token cap
BATCH = 4  # --max-client-batch-size
LIMIT = 100_000  # --payload-limit
JSON = {"content-type": "application/json"}

# a valid body per route; "route#name" is the base URL with the named model's task
VALID: dict[str, dict] = {
    "/embed": {
        "inputs": ["the cat sat"],
        "normalize": True,
        "truncate": False,
        "truncation_direction": "right",
        "dimensions": 32,
        "prompt_name": None,
        "model": "enc",
    },
    "/v1/embeddings": {
        "input": ["the cat"],
        "model": "enc",
        "encoding_format": "float",
        "user": "u",
        "dimensions": 32,
    },
    "/similarity": {
        "inputs": {"source_sentence": "the cat", "sentences": ["a dog"]},
        "truncate": False,
        "parameters": {"truncate": False, "truncation_direction": "right", "prompt_name": None},
        "model": "enc",
    },
    "/tokenize": {"inputs": ["the cat"], "add_special_tokens": True, "model": "enc"},
    "/predict": {
        "inputs": ["the movie", ["a", "b"]],
        "raw_scores": False,
        "truncate": False,
        "truncation_direction": "right",
        "parameters": {"top_k": 1, "function_to_apply": "softmax"},
        "model": "sst",
    },
    "/rerank": {
        "query": "the cat",
        "texts": ["a", "b"],
        "truncate": False,
        "truncation_direction": "right",
        "raw_scores": False,
        "return_text": True,
        "top_n": 1,
        "model": "rr",
    },
    "/v1/rerank": {
        "query": "the cat",
        "documents": ["a", {"text": "b"}],
        "top_n": 1,
        "return_documents": True,
        "rank_fields": ["text"],
        "max_tokens_per_doc": 512,
        "max_chunks_per_doc": 1,
        "model": "rr",
    },
    "/v2/rerank": {"query": "the cat", "documents": ["a", "b"], "top_n": 1, "model": "rr"},
    "/ner": {"inputs": ["the cat sat"], "model": "ner"},
    "/qa": {"inputs": [{"question": "what", "context": "the cat sat"}], "model": "qa"},
    "/fill-mask": {"inputs": ["the [MASK] sat"], "top_k": 2, "truncate": False, "model": "enc"},
    "/embed_all": {"inputs": ["the cat"], "truncate": False, "prompt_name": None, "model": "enc"},
    "/embed_sparse": {"inputs": ["the cat"], "truncate": False, "model": "enc"},
    "/decode": {"ids": [2, 5, 3], "skip_special_tokens": True, "model": "enc"},
    "/#embed": {"inputs": ["the cat sat"], "truncate": False, "model": "enc"},
    "/#predict": {"inputs": ["the movie"], "model": "sst"},
    "/#ner": {"inputs": ["the cat sat"], "model": "ner"},
    "/#qa": {"inputs": {"question": "what", "context": "the cat"}, "model": "qa"},
    "/#rerank": {"query": "q", "texts": ["a"], "model": "rr"},
    "/#similarity": {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "model": "enc"},
}
# wrong types, empty and blank values, nesting, control characters, numbers out of any range,
# long texts, more inputs than the batch limit; then JSON literals Python's json reads as numbers
# and a lone surrogate escape (JSON text: written into the body as they are)
VALUES = [
    None, True, 0, -1, 5, 1.5, 10**30, "", " \t\n", "x", "\u0000", "a\u0000b", "\u200b\ufeff",
    [], [None], [1], [[]], [["a"]], [[["a"]]], {}, {"a": 1}, LONG, [LONG], ["a"] * (BATCH + 1),
]  # fmt: skip
LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", '"\\ud800"', '["a", "\\udfff"]']


@pytest.fixture(scope="module")
def client(tiny_mlm: Path, tiny_classifier: Path, task_models: dict[str, Path]) -> Iterator:
    models = [f"enc={tiny_mlm}", f"sst={tiny_classifier}"]
    models += [f"{n}={task_models[k]}" for n, k in (("ner", "ner"), ("qa", "qa"), ("rr", "rerank"))]
    with serve(
        models=models, max_client_batch_size=BATCH, max_input_tokens=256, payload_limit=LIMIT
    ) as c:
        yield c


def refused(r: httpx.Response, route: str) -> str:
    """The reason of a 4xx in the shape of ``route`` (OpenAI's under /v1/, else TEI's)."""
    assert 400 <= r.status_code < 500, f"{route}: {r.status_code} {r.text[:300]}"
    assert r.headers["content-type"] == "application/json", r.headers
    body = r.json()
    if is_openai(route):
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        reason, kind = body["error"]["message"], body["error"]["type"]
    else:
        assert set(body) == {"error", "error_type"}, body
        reason, kind = body["error"], body["error_type"]
    assert isinstance(reason, str) and reason and isinstance(kind, str) and kind, body
    return reason


def variants(base: dict) -> Iterator[tuple[str, str]]:
    """(what, JSON text) for every field of ``base`` (and of its objects) given every bad value."""

    def put(path: tuple, value_json: str) -> str:
        marker = "\u0001BAD\u0001"
        body = json.loads(json.dumps(base))
        at = body
        for key in path[:-1]:
            at = at[key]
        at[path[-1]] = marker
        return json.dumps(body).replace(json.dumps(marker), value_json)

    paths: list[tuple] = []
    for key, value in base.items():
        paths.append((key,))
        if isinstance(value, dict):
            paths += [(key, sub) for sub in value]
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            paths += [(key, 0, sub) for sub in value[0]]
    for path in paths:
        where = ".".join(map(str, path))
        for v in VALUES:
            yield f"{where}={json.dumps(v)[:20]}", put(path, json.dumps(v))
        for lit in LITERALS:
            yield f"{where}={lit}", put(path, lit)
    yield "unknown field", json.dumps({**base, "nonsense": 1})
    if "truncate" in base:  # long texts are served when cut
        for key in ("inputs", "input", "texts", "query"):
            if key in base and isinstance(base[key], (str, list)):
                value = LONG if isinstance(base[key], str) else [LONG]
                yield f"{key}=long, truncate", json.dumps({**base, key: value, "truncate": True})


@pytest.mark.parametrize("name", list(VALID))
def test_every_field_given_bad_values_is_a_4xx_with_a_reason(client, name: str) -> None:
    route = name.split("#")[0]
    valid = json.dumps(VALID[name])
    assert client.post(route, content=valid, headers=JSON).status_code == 200
    seen: dict[int, int] = {}
    for what, body in variants(VALID[name]):
        r = client.post(route, content=body, headers=JSON)
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        if r.status_code != 200:
            refused(r, f"{route} {what}")
        elif "truncate" in what:
            assert r.json(), what
    assert 500 not in seen and 422 in seen, seen
    assert client.post(route, content=valid, headers=JSON).status_code == 200  # still serving


S, PAIR = "\\ud800", "\\ud83d\\ude00"  # a lone surrogate escape; a pair (one character, valid)
SURROGATES = [  # (route, JSON body, the field the 422 names)
    ("/embed", f'{{"inputs": "{S}"}}', "inputs"),
    ("/embed", f'{{"inputs": ["ok", "a {S} b"]}}', "inputs"),
    ("/embed", f'{{"inputs": "ok", "prompt_name": "{S}"}}', "prompt_name"),
    ("/v1/embeddings", f'{{"input": ["{S}"]}}', "input"),
    ("/v1/embeddings", f'{{"input": "ok", "model": "{S}"}}', "model"),  # was a 500 (echoed)
    ("/v1/embeddings", f'{{"input": "ok", "user": "{S}"}}', "user"),
    ("/similarity", f'{{"inputs": {{"source_sentence": "{S}", "sentences": ["a"]}}}}', "source"),
    ("/similarity", f'{{"inputs": {{"source_sentence": "a", "sentences": ["{S}"]}}}}', "sentences"),
    ("/tokenize", f'{{"inputs": "{S} cat"}}', "inputs"),
    ("/predict", f'{{"inputs": [["a", "{S}"]], "model": "sst"}}', "inputs"),
    ("/rerank", f'{{"query": "{S}", "texts": ["a"], "model": "rr"}}', "query"),
    ("/rerank", f'{{"query": "a", "texts": ["{S}"], "return_text": true}}', "texts"),  # was a 500
    ("/v1/rerank", f'{{"query": "{S}", "documents": ["a"]}}', "query"),
    ("/v1/rerank", f'{{"query": "a", "documents": ["{S}"]}}', "documents"),
    ("/v2/rerank", f'{{"query": "a", "documents": [{{"text": "{S}"}}]}}', "text"),
    ("/ner", f'{{"inputs": "{S} cat", "model": "ner"}}', "inputs"),  # was a 500 (tokens echoed)
    ("/qa", f'{{"inputs": {{"question": "{S}", "context": "c"}}, "model": "qa"}}', "question"),
    ("/qa", f'{{"inputs": [{{"question": "q", "context": "{S}"}}], "model": "qa"}}', "context"),
    ("/fill-mask", f'{{"inputs": "{S} [MASK]"}}', "inputs"),
    ("/embed_all", f'{{"inputs": "{S}"}}', "inputs"),
    ("/embed_sparse", f'{{"inputs": ["{S}"]}}', "inputs"),
    ("/", f'{{"inputs": "{S} cat", "model": "ner"}}', "inputs"),  # was a 500
    ("/", f'{{"query": "a", "texts": ["{S}"], "return_text": true}}', "texts"),  # was a 500
]


@pytest.mark.parametrize(("route", "body", "field"), SURROGATES)
def test_a_lone_surrogate_is_a_422_naming_the_field(client, route, body, field) -> None:
    """JSON lets "\\ud800" through, but it is no character: the routes that quote request text
    back (NER tokens, rerank's texts, the OpenAI model name) could not write their answer."""
    reason = refused(client.post(route, content=body, headers=JSON), route)
    assert "lone surrogate" in reason and field in reason, reason
    paired = client.post(route, content=body.replace(S, PAIR), headers=JSON)
    assert paired.status_code == 200 or field == "prompt_name", paired.text  # no such prompt


@pytest.mark.parametrize("model", ["[1]", '["enc"]', "{}", '{"enc": 1}', "5", "true", "[[[]]]"])
def test_base_url_model_that_is_no_string_is_a_422(client, model: str) -> None:
    """POST / looks the model up by name before validating the body (a list was a 500)."""
    r = client.post("/", content=f'{{"inputs": "the cat", "model": {model}}}', headers=JSON)
    assert r.status_code == 422 and "model" in refused(r, "/"), r.text


def _chunks(body: bytes) -> Iterator[bytes]:
    for i in range(0, len(body), 4096):
        yield body[i : i + 4096]


def test_v1_errors_are_in_openai_shape_whoever_answers(client, tiny_mlm: Path) -> None:
    """Not only the route's own errors: the router's 404/405, the body parser's 400 and the
    limits' 413 and 401 (written before any route runs) too, as docs/serve.md promises."""
    big = json.dumps({"input": "x" * LIMIT}).encode()
    answers = {
        "405 GET": client.get("/v1/embeddings"),
        "404 no route": client.post("/v1/models", json={}),
        "400 not UTF-8": client.post("/v1/embeddings", content=b'{"input": "\xff"}', headers=JSON),
        "400 nested too deep": client.post(
            "/v1/embeddings", content=b"[" * 40_000 + b"]" * 40_000, headers=JSON
        ),
        "413 declared": client.post("/v1/embeddings", content=big, headers=JSON),
        "413 read": client.post("/v1/embeddings", content=_chunks(big), headers=JSON),
    }
    for what, r in answers.items():
        assert r.status_code == int(what.split()[0]), (what, r.text)
        refused(r, "/v1/embeddings")
    assert refused(client.post("/embed", content=big, headers=JSON), "/embed")  # TEI's there
    with serve(models=[str(tiny_mlm)], api_key="k") as keyed:
        r = keyed.post("/v1/embeddings", json={"input": "x"})
        assert r.status_code == 401 and "API key" in refused(r, "/v1/embeddings")
        assert keyed.post("/embed", json={"inputs": "x"}).json()["error_type"] == "unauthorized"
    assert client.post("/v1/embeddings", json={"input": "x"}).status_code == 200


@pytest.mark.parametrize(
    ("path", "model"), [("/similarity", None), ("/", "enc"), ("/rerank", None)]
)
def test_the_batch_limit_counts_the_inputs_the_client_lists(client, path, model) -> None:
    """--max-client-batch-size sentences pass /similarity (its source sentence is not counted,
    as /rerank's query is not), and one more is refused naming that count: it refused the
    limit itself as "batch size 5" (the source counted) while a list of 4 texts passed /rerank."""

    def body(n: int) -> dict:
        items = ["the cat"] * n
        if path == "/rerank":
            return {"query": "q", "texts": items}
        out = {"inputs": {"source_sentence": "a dog", "sentences": items}}
        return {**out, "model": model} if model else out

    at = client.post(path, json=body(BATCH))
    assert at.status_code == 200 and len(at.json()) == BATCH, at.text
    over = client.post(path, json=body(BATCH + 1))
    assert over.status_code == 413, over.text
    assert refused(over, path) == f"batch size {BATCH + 1} > maximum allowed batch size {BATCH}"


def _with(base: dict, path: tuple, value: object) -> dict:
    """``base`` (copied) with ``value`` at ``path`` (keys and list indices)."""
    body = json.loads(json.dumps(base))
    at = body
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return body


BOOL, INT = "Input should be a valid boolean", "Input should be a valid integer"
COERCED = [  # (VALID's name, where, a value pydantic's lax mode read as another, the reason)
    ("/embed", ("truncate",), 0, f"truncate: {BOOL}"),  # was read as false
    ("/embed", ("normalize",), "yes", f"normalize: {BOOL}"),
    ("/embed", ("dimensions",), "32", f"dimensions: {INT}"),
    ("/embed", ("dimensions",), 32.0, f"dimensions: {INT}"),
    ("/v1/embeddings", ("dimensions",), 32.0, f"dimensions: {INT}"),
    ("/similarity", ("truncate",), 1, f"truncate: {BOOL}"),
    ("/similarity", ("parameters", "truncate"), "false", f"parameters.truncate: {BOOL}"),
    ("/tokenize", ("add_special_tokens",), 0, f"add_special_tokens: {BOOL}"),
    ("/predict", ("raw_scores",), "true", f"raw_scores: {BOOL}"),
    ("/predict", ("parameters", "top_k"), 1.0, f"parameters.top_k: {INT}"),
    ("/rerank", ("top_n",), True, f"top_n: {INT}"),  # was read as 1
    ("/rerank", ("return_text",), 1, f"return_text: {BOOL}"),
    ("/v1/rerank", ("top_n",), True, f"top_n: {INT}"),
    ("/v1/rerank", ("return_documents",), "false", f"return_documents: {BOOL}"),
    ("/v2/rerank", ("top_n",), 1.0, f"top_n: {INT}"),
    ("/fill-mask", ("top_k",), "2", f"top_k: {INT}"),
    ("/fill-mask", ("top_k",), 2.0, f"top_k: {INT}"),
    ("/embed_all", ("truncate",), 0, f"truncate: {BOOL}"),
    ("/embed_sparse", ("truncate",), "false", f"truncate: {BOOL}"),
    ("/decode", ("ids", 1), True, f"ids.list[int].1: {INT}"),
    ("/decode", ("skip_special_tokens",), 1, f"skip_special_tokens: {BOOL}"),
    ("/#embed", ("truncate",), 0, f"truncate: {BOOL}"),
    ("/#predict", ("raw_scores",), 0, f"raw_scores: {BOOL}"),
    ("/#rerank", ("top_n",), 1.0, f"top_n: {INT}"),
    ("/#similarity", ("truncate",), "no", f"truncate: {BOOL}"),
]


@pytest.mark.parametrize(("name", "path", "value", "reason"), COERCED)
def test_types_are_strict_as_in_tei(client, name, path, value, reason) -> None:
    """A bool is true/false and an integer a JSON integer, as TEI's serde reads them: 0, "yes",
    "5", 2.0 and true were read as false, true, 5, 2 and 1 (a 200 that answered another
    question than the client asked)."""
    route = name.split("#")[0]
    r = client.post(route, json=_with(VALID[name], path, value))
    assert r.status_code == 422, r.text
    assert refused(r, route).startswith(reason), r.text
    assert client.post(route, json=VALID[name]).status_code == 200  # the typed value passes


def test_a_mask_the_cut_drops_is_a_422_naming_the_input(client) -> None:
    """With ``truncate`` a text is cut to the model's 64 positions; a [MASK] past them got no
    candidates: a 200 with [] for that text (or one list for two [MASK]s), not what was asked."""
    the = ["the"] * 61
    kept = " ".join([*the, "[MASK]", "cat"])  # the 62nd piece: inside [CLS] 62 pieces [SEP]
    past = " ".join([*the, "cat", "[MASK]"])  # the 63rd: cut
    r = client.post("/fill-mask", json={"inputs": [kept, past], "truncate": True})
    assert r.status_code == 422, r.text
    assert refused(r, "/fill-mask") == (
        "input 1: its [MASK] lies beyond the model's maximum length (64 tokens, [CLS] and [SEP] "
        "included): put it earlier or shorten the text"
    )
    both = client.post("/fill-mask", json={"inputs": "[MASK] " + past, "truncate": True})
    assert both.status_code == 422 and refused(both, "/fill-mask").startswith("input 0: its [MASK]")
    two = " ".join(["[MASK]", *the[1:], "[MASK]", "cat"])  # the 1st and 62nd: both kept
    ok = client.post("/fill-mask", json={"inputs": [kept, two], "truncate": True})
    assert ok.status_code == 200 and [len(x) for x in ok.json()] == [1, 2], ok.text
    none = client.post("/fill-mask", json={"inputs": ["the [MASK]", "the cat"]})
    assert none.status_code == 422 and refused(none, "/fill-mask") == "input 1 has no [MASK] token"


def test_every_post_route_reads_json_only(client) -> None:
    """Another Content-Type, or none, is a 415 (as TEI's axum), a body that is not JSON a 400 and
    JSON of the wrong shape a 422, on every POST route of the app (POST / read text/plain and
    no Content-Type as JSON; the others gave "body: Input should be a valid dictionary", a 422,
    and a 422 for a body that is not JSON)."""
    posts = {r.path for r in client.app.routes if "POST" in getattr(r, "methods", ())}
    assert posts == {name.split("#")[0] for name in VALID}, "a POST route without a VALID body"
    send_json = "send the body as JSON, with Content-Type: application/json"
    for name, valid in VALID.items():
        route, body = name.split("#")[0], json.dumps(valid)
        answers = {  # (status, reason) for (body, Content-Type)
            (body, "text/plain"): (415, f"Content-Type 'text/plain' is not JSON: {send_json}"),
            (body, "application/x-www-form-urlencoded"): (
                415,
                f"Content-Type 'application/x-www-form-urlencoded' is not JSON: {send_json}",
            ),
            (body, None): (415, f"the request has no Content-Type: {send_json}"),
            ("{not json", None): (415, f"the request has no Content-Type: {send_json}"),
            ("{not json", "application/json"): (
                400,
                "the body is not JSON: Expecting property name enclosed in double quotes at "
                "line 1 column 2",
            ),
            ("", "application/json"): (400, "the body is empty: send a JSON object"),
            ('{"inputs": "x",\n  }', "application/json"): (
                400,
                "the body is not JSON: Expecting property name enclosed in double quotes at "
                "line 2 column 3",
            ),
        }
        for (content, ctype), (status, reason) in answers.items():
            r = client.post(
                route, content=content, headers={"content-type": ctype} if ctype else {}
            )
            assert r.status_code == status, (name, ctype, content, r.text)
            assert refused(r, route) == reason, (name, r.text)
        for ctype in ("application/json; charset=utf-8", "application/vnd.api+json"):
            r = client.post(route, content=body, headers={"content-type": ctype})
            assert r.status_code == 200, (name, ctype, r.text)
