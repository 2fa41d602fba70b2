"""Prometheus metrics (``GET /metrics``), named like text-embeddings-inference's, prefix ``bertkit_``.

Each app has its own registry, so several apps in one process (tests) do not collide. With
``--workers N`` each process counts what it serves; ``run.serve`` points prometheus_client's
multiprocess mode at one folder for them all (``$PROMETHEUS_MULTIPROC_DIR``, read when the
worker imports prometheus_client), and ``/metrics`` answers the sum over the processes, whichever
of them the scrape reaches.
"""

from __future__ import annotations

import os
import time
from contextvars import ContextVar
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""Where the worker processes of one server write their values (set by ``run.serve``)."""

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKENS = (16, 64, 256, 1024, 4096, 16384, 65536)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("bertkit_request_count", "Requests received", ["route"], registry=r)
        self.successes = Counter(
            "bertkit_request_success", "Requests answered 2xx", ["route"], registry=r
        )
        self.failures = Counter(
            "bertkit_request_failure", "Failed requests", ["error_type"], registry=r
        )
        self.duration = Histogram(
            "bertkit_request_duration_seconds",
            "Request duration",
            ["route"],
            buckets=_SECONDS,
            registry=r,
        )
        self.tokenization = Histogram(
            "bertkit_tokenization_duration_seconds",
            "Tokenization time",
            buckets=_SECONDS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "bertkit_queue_duration_seconds",
            "Time from queued to answered",
            buckets=_SECONDS,
            registry=r,
        )
        self.inference = Histogram(
            "bertkit_inference_duration_seconds", "Forward pass time", buckets=_SECONDS, registry=r
        )
        self.batch_size = Histogram(
            "bertkit_batch_size", "Inputs per forward pass", buckets=_SIZES, registry=r
        )
        self.batch_tokens = Histogram(
            "bertkit_batch_tokens", "Tokens per forward pass", buckets=_TOKENS, registry=r
        )
        self.input_length = Histogram(
            "bertkit_input_length", "Tokens per input", buckets=_TOKENS, registry=r
        )
        # livesum: with several workers, the sum over the processes alive
        self.in_flight = Gauge(
            "bertkit_requests_in_flight",
            "Requests being served",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.queue_size = Gauge(
            "bertkit_queue_size",
            "Jobs waiting per model",
            ["model"],
            registry=r,
            multiprocess_mode="livesum",
        )

    def exposition(self) -> bytes:
        """The text ``/metrics`` answers: this app's registry, or with several worker processes
        (``$PROMETHEUS_MULTIPROC_DIR``) every process's values summed."""
        if not os.environ.get(MULTIPROC_ENV):
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged)
        return generate_latest(merged)

    def batch(self, size: int, tokens: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_tokens.observe(tokens)
        self.inference.observe(seconds)


TIMING: ContextVar[dict[str, float] | None] = ContextVar("bertkit_timing", default=None)
"""The running request's timings (seconds by header name), filled by the routes' waits and sent
as text-embeddings-inference's ``x-*-time`` headers (milliseconds) by :class:`Observe`."""


def record_time(name: str, seconds: float) -> None:
    """Add ``seconds`` to the running request's ``name`` timing (no-op outside a request)."""
    timing = TIMING.get()
    if timing is not None:
        timing[name] = timing.get(name, 0.0) + seconds


class Observe:
    """ASGI middleware: counts every request by route, its duration, and its 2xx answers.

    Plain ASGI rather than Starlette's ``BaseHTTPMiddleware``, whose stream wrapping took a fifth
    of the event loop's time per request at concurrency 64 (py-spy, benchmarks/serve_load.py).
    Paths that are not routes count as ``other``: a client sending random paths cannot grow the
    metrics without bound.

    Every answer carries TEI's timing headers: ``x-compute-type`` (the models' device type),
    ``x-total-time`` (the whole request) and, where the request ran a model,
    ``x-compute-time`` (waiting for and running it), in milliseconds."""

    def __init__(
        self, app: Any, *, metrics: Metrics, routes: frozenset[str], compute_type: str = "cpu"
    ) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes
        self.compute_type = compute_type.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.routes else "other"
        self.metrics.requests.labels(route).inc()
        status, t0 = 500, time.perf_counter()
        timing: dict[str, float] = {}
        TIMING.set(timing)

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                timing["x-total-time"] = time.perf_counter() - t0
                extra = [(k.encode(), f"{v * 1000:.0f}".encode()) for k, v in timing.items()]
                message = {
                    **message,
                    "headers": [
                        *message.get("headers", []),
                        (b"x-compute-type", self.compute_type),
                        *extra,
                    ],
                }
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.duration.labels(route).observe(time.perf_counter() - t0)
            if status < 300:
                self.metrics.successes.labels(route).inc()
