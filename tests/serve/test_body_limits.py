"""The payload limit at its edge, by the declared Content-Length and by the bytes actually read: a
body of exactly the limit is served, one byte more is a 413 JSON, however the body is sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import serve, serve_http

LIMIT = 64
COMPACT = b'{"inputs": "the cat"}'
JSON = {"content-type": "application/json"}


def _body(size: int) -> bytes:
    """A valid /embed request of exactly ``size`` bytes (JSON allows trailing spaces)."""
    assert size >= len(COMPACT)
    return COMPACT + b" " * (size - len(COMPACT))


def _chunks(body: bytes, size: int = 10) -> Iterator[bytes]:
    """The body as a generator: httpx sends it chunked, with no Content-Length."""
    for i in range(0, len(body), size):
        yield body[i : i + size]


def _refused(r: httpx.Response) -> str:
    assert r.status_code == 413, f"expected 413, got {r.status_code}: {r.text[:200]}"
    body = r.json()
    assert body["error_type"] == "payload_too_large" and set(body) == {"error", "error_type"}
    return body["error"]


@pytest.fixture(scope="module")
def client(tiny_mlm: Path):
    with serve(models=[str(tiny_mlm)], payload_limit=LIMIT) as c:
        yield c


@pytest.fixture(scope="module")
def expected(client) -> list:
    r = client.post("/embed", content=COMPACT, headers=JSON)
    assert r.status_code == 200
    return r.json()


def test_declared_length_of_exactly_the_limit_is_served_one_more_is_413(client, expected):
    r = client.post("/embed", content=_body(LIMIT), headers=JSON)
    assert r.request.headers["content-length"] == str(LIMIT)
    assert r.status_code == 200 and r.json() == expected, r.text
    over = client.post("/embed", content=_body(LIMIT + 1), headers=JSON)
    assert _refused(over) == f"request body of {LIMIT + 1} bytes is over the {LIMIT}-byte limit"


def test_a_compressed_body_is_a_415_naming_the_coding(client, expected):
    """A gzip body is refused as such (it read as "the body is not JSON: invalid UTF-8 at byte
    1", a 400 that hides the cause); ``identity`` is the body as it is."""
    import gzip

    for route in ("/embed", "/v1/embeddings"):
        body = COMPACT if route == "/embed" else b'{"input": "the cat"}'
        r = client.post(
            route, content=gzip.compress(body), headers={**JSON, "content-encoding": "gzip"}
        )
        reason = r.json()["error"]
        reason = reason["message"] if isinstance(reason, dict) else reason
        assert r.status_code == 415, r.text
        assert reason == "Content-Encoding 'gzip' is not supported: send the body uncompressed"
    r = client.post("/embed", content=COMPACT, headers={**JSON, "content-encoding": "identity"})
    assert r.status_code == 200 and r.json() == expected


def test_chunked_body_is_counted_as_read(client, expected):
    """No Content-Length: the bytes read decide (exactly the limit passes, one more is a 413)."""
    r = client.post("/embed", content=_chunks(_body(LIMIT)), headers=JSON)
    assert "content-length" not in r.request.headers
    assert r.status_code == 200 and r.json() == expected, r.text
    over = client.post("/embed", content=_chunks(_body(LIMIT + 1)), headers=JSON)
    assert "content-length" not in over.request.headers
    assert _refused(over) == f"request body is over the {LIMIT}-byte limit"


def test_body_longer_than_its_declared_length_is_counted_as_read(client):
    """A Content-Length under the limit does not let a longer body through."""
    headers = {**JSON, "content-length": str(len(COMPACT))}
    r = client.post("/embed", content=_body(4 * LIMIT), headers=headers)
    assert r.request.headers["content-length"] == str(len(COMPACT))
    assert _refused(r) == f"request body is over the {LIMIT}-byte limit"


def test_chunks_over_http_are_summed_across_messages(tiny_mlm: Path):
    """Under uvicorn each chunk is its own ASGI message: their sum is what is limited."""
    with serve_http(models=[str(tiny_mlm)], payload_limit=LIMIT) as base:
        ok = httpx.post(f"{base}/embed", content=_chunks(_body(LIMIT), 7), headers=JSON)
        assert ok.status_code == 200 and len(ok.json()) == 1, ok.text
        over = httpx.post(f"{base}/embed", content=_chunks(_body(LIMIT + 1), 7), headers=JSON)
        assert _refused(over) == f"request body is over the {LIMIT}-byte limit"
