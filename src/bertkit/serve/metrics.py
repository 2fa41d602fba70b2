"""Prometheus metrics (``GET /metrics``), named like text-embeddings-inference's, prefix ``bertkit_``.

Each app has its own registry, so several apps in one process (tests) do not collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
        self.duration = Histogram("bertkit_request_duration_seconds", "Request duration", ["route"],
                                  buckets=_SECONDS, registry=r)  # fmt: skip
        self.tokenization = Histogram("bertkit_tokenization_duration_seconds", "Tokenization time",
                                      buckets=_SECONDS, registry=r)  # fmt: skip
        self.queue_wait = Histogram("bertkit_queue_duration_seconds", "Time from queued to answered",
                                    buckets=_SECONDS, registry=r)  # fmt: skip
        self.inference = Histogram("bertkit_inference_duration_seconds", "Forward pass time",
                                   buckets=_SECONDS, registry=r)  # fmt: skip
        self.batch_size = Histogram("bertkit_batch_size", "Inputs per forward pass",
                                    buckets=_SIZES, registry=r)  # fmt: skip
        self.batch_tokens = Histogram("bertkit_batch_tokens", "Tokens per forward pass",
                                      buckets=_TOKENS, registry=r)  # fmt: skip
        self.input_length = Histogram("bertkit_input_length", "Tokens per input",
                                      buckets=_TOKENS, registry=r)  # fmt: skip
        self.in_flight = Gauge("bertkit_requests_in_flight", "Requests being served", registry=r)
        self.queue_size = Gauge(
            "bertkit_queue_size", "Jobs waiting per model", ["model"], registry=r
        )

    def batch(self, size: int, tokens: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_tokens.observe(tokens)
        self.inference.observe(seconds)
