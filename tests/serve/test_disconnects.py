"""A client that leaves before its answer (its own timeout, a closed tab) takes its queued work with
it: the request is cancelled and its jobs never reach the model, as TEI drops a queued request
whose client is gone. Clients that time out and retry would otherwise pile work up on the worker
(measured: 12 abandoned requests of 32 MiniLM inputs kept the worker busy 42 s, a one-word
request waiting behind them; now 2.7 s)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from .conftest import serve_http

REQUESTS, INPUTS = 12, 32


def _metric(base: str, pattern: str) -> float:
    found = re.search(pattern, httpx.get(f"{base}/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def test_abandoned_requests_are_not_computed(minilm: Path) -> None:
    batch_sum = r"^bertkit_batch_size_sum (\S+)$"
    closed = r'^bertkit_request_failure_total\{error_type="client_closed"\} (\S+)$'
    long = "word " * 250  # 252 tokens: each request is ~8,000, a few pass's worth on a CPU
    with serve_http(models=[f"minilm={minilm}"]) as base:
        before = _metric(base, batch_sum)

        def leave(i: int) -> str:
            try:
                httpx.post(f"{base}/embed", json={"inputs": [long] * INPUTS}, timeout=0.3)
            except httpx.TimeoutException:
                return "left"
            return "answered"

        with ThreadPoolExecutor(REQUESTS) as pool:
            assert "left" in set(pool.map(leave, range(REQUESTS)))
        r = httpx.post(f"{base}/embed", json={"inputs": "hi"}, timeout=120)
        assert r.status_code == 200  # answered once what ran is done: every job before it
        computed = _metric(base, batch_sum) - before - 1
        assert computed <= (REQUESTS - 4) * INPUTS, f"{computed:g} of {REQUESTS * INPUTS} ran"
        assert _metric(base, closed) >= 4
