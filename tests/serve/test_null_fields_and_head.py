"""``null`` for an optional field is "not given", as TEI's ``Option<bool>`` ``truncate`` and
OpenAI's optional ``encoding_format`` / ``dimensions`` read it (a wrong type stays a 422), and
the GET-only routes answer HEAD, as load balancers probe them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import serve


@pytest.fixture(scope="module")
def client(tiny_mlm: Path, tiny_classifier: Path, task_models: dict[str, Path]) -> Iterator:
    models = [f"enc={tiny_mlm}", f"sst={tiny_classifier}", f"rr={task_models['rerank']}"]
    with serve(models=models) as c:
        yield c


NULLS = [  # (route, body with a null, the same body without the field)
    ("/embed", {"inputs": ["the cat"], "truncate": None}),
    ("/embed_all", {"inputs": ["the cat"], "truncate": None}),
    ("/embed_sparse", {"inputs": ["the cat"], "truncate": None}),
    ("/predict", {"inputs": ["the movie"], "truncate": None, "model": "sst"}),
    ("/rerank", {"query": "the cat", "texts": ["a", "b"], "truncate": None, "model": "rr"}),
    (
        "/similarity",
        {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "truncate": None},
    ),
    ("/v1/embeddings", {"input": ["the cat"], "encoding_format": None, "model": "enc"}),
    ("/v1/embeddings", {"input": ["the cat"], "dimensions": None, "model": "enc"}),
]


@pytest.mark.parametrize(("route", "body"), NULLS)
def test_null_is_the_default(client, route: str, body: dict) -> None:
    given = client.post(route, json=body)
    assert given.status_code == 200, given.text
    field = next(k for k, v in body.items() if v is None)
    absent = client.post(route, json={k: v for k, v in body.items() if k != field})
    assert given.json() == absent.json()


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/embed", {"inputs": "the cat", "truncate": "no"}, "truncate"),
        ("/v1/embeddings", {"input": "the cat", "encoding_format": 1}, "encoding_format"),
        ("/v1/embeddings", {"input": "the cat", "dimensions": "8"}, "dimensions"),
    ],
)
def test_a_wrong_type_is_still_a_422_naming_the_field(client, route, body, field) -> None:
    r = client.post(route, json=body)
    assert r.status_code == 422 and r.headers["content-type"] == "application/json"
    assert field in r.text


@pytest.mark.parametrize("path", ["/health", "/info", "/metrics", "/"])
def test_get_routes_answer_head_without_a_body(client, path: str) -> None:
    get, head = client.get(path), client.head(path)
    assert get.status_code == head.status_code == 200
    assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
    paths = client.get("/openapi.json").json()["paths"]
    assert all(set(ops) != {"get", "head"} for ops in paths.values())  # one operation each
