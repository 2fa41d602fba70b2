"""Request limits as one ASGI middleware, before any body is parsed: API key (401), concurrency
(429 with Retry-After), payload size (413, by Content-Length and by the bytes actually read); a
request whose client disconnects before its answer is cancelled, with the jobs it queued."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from typing import Any

from starlette.exceptions import HTTPException

from bertkit.serve.errors import error_body, is_openai
from bertkit.serve.metrics import Metrics

OPEN_PATHS = ("/health", "/")  # the page holds no data; its requests carry the key


async def _send_error(
    scope: dict,
    send: Any,
    status: int,
    message: str,
    error_type: str,
    headers: dict[str, str] | None = None,
) -> None:
    """The error as the app's handlers write it (OpenAI's shape under ``/v1/`` and ``/v2/``, else TEI's)."""
    body = json.dumps(error_body(message, error_type, is_openai(scope["path"]))).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class _TooLarge(HTTPException):
    """Raised while the body is read: FastAPI passes HTTP exceptions through to the handlers."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is over the {limit}-byte limit")


class Limits:
    def __init__(
        self,
        app: Any,
        *,
        api_key: str | None,
        max_concurrent: int,
        payload_limit: int,
        metrics: Metrics,
    ) -> None:
        self.app, self.api_key, self.max_concurrent = app, api_key, max_concurrent
        self.payload_limit, self.metrics = payload_limit, metrics
        self.in_flight = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.api_key and scope["path"] not in OPEN_PATHS:
            given = headers.get("authorization", "")
            token = given[7:] if given.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), self.api_key.encode()):
                self.metrics.failures.labels("unauthorized").inc()
                return await _send_error(
                    scope,
                    send,
                    401,
                    "missing or wrong API key (send 'Authorization: Bearer KEY')",
                    "unauthorized",
                )
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.payload_limit:
            self.metrics.failures.labels("payload_too_large").inc()
            return await _send_error(
                scope,
                send,
                413,
                f"request body of {length} bytes is over the {self.payload_limit}-byte limit",
                "payload_too_large",
            )
        if self.in_flight >= self.max_concurrent:
            self.metrics.failures.labels("overloaded").inc()
            return await _send_error(
                scope,
                send,
                429,
                f"{self.in_flight} requests in flight (limit {self.max_concurrent}); retry later",
                "overloaded",
                {"Retry-After": "1"},
            )
        read, body_read, answering = 0, asyncio.Event(), False

        async def counted() -> dict:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > self.payload_limit:
                    raise _TooLarge(self.payload_limit)
                if not message.get("more_body", False):
                    body_read.set()
            return message

        async def sending(message: dict) -> None:
            nonlocal answering
            answering = True
            await send(message)

        self.in_flight += 1
        self.metrics.in_flight.set(self.in_flight)
        handler = asyncio.ensure_future(self.app(scope, counted, sending))
        watcher = asyncio.ensure_future(_disconnected(receive, body_read))
        try:
            await asyncio.wait((handler, watcher), return_when=asyncio.FIRST_COMPLETED)
            if not handler.done() and not answering:  # the client left before its answer
                handler.cancel()  # its queued jobs are cancelled with it: never computed
                self.metrics.failures.labels("client_closed").inc()
            with contextlib.suppress(asyncio.CancelledError):
                await handler
        finally:
            watcher.cancel()
            if not handler.done():
                handler.cancel()
            self.in_flight -= 1
            self.metrics.in_flight.set(self.in_flight)


async def _disconnected(receive: Any, body_read: asyncio.Event) -> None:
    """Returns once the client has closed the connection: after the body is read, the server's
    only message is ``http.disconnect`` (TEI drops a queued request whose client left)."""
    await body_read.wait()
    while (await receive())["type"] != "http.disconnect":
        pass
