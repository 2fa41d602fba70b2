"""Every error the server sends is JSON with a reason, in text-embeddings-inference's shape:
``{"error": "...", "error_type": "..."}`` (under ``/v1/`` and ``/v2/``, OpenAI's: ``{"error":
{"message", "type", "param", "code"}}``, which the openai client reads into its exception's
message). Bad input is a 4xx, never a 500, never a traceback."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("bertkit.serve")

_TYPES = {
    400: "validation",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "validation",
    422: "validation",
    429: "overloaded",
    503: "unhealthy",
    504: "timeout",
}


EMPTY = "empty"
"""The error type of an empty input or batch: a 400, as TEI's router answers its
``ErrorType::Empty`` (under /v1/ too, where TEI and OpenAI answer 400 for ``""``)."""


class ServeError(Exception):
    """A request the server refuses or cannot answer: HTTP status, error type, reason."""

    def __init__(
        self,
        status: int,
        message: str,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.error_type = error_type or _TYPES.get(status, "validation")
        self.headers = headers


def error_response(
    status: int,
    message: str,
    error_type: str | None = None,
    headers: dict[str, str] | None = None,
    *,
    openai: bool = False,
) -> JSONResponse:
    kind = error_type or _TYPES.get(status, "backend")
    return JSONResponse(error_body(message, kind, openai), status_code=status, headers=headers)


def error_body(message: str, kind: str, openai: bool) -> dict:
    """TEI's error body, or OpenAI's (``openai``: under ``/v1/`` and ``/v2/``, see :func:`is_openai`)."""
    if openai:
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return {"error": message, "error_type": kind}


def is_openai(path: str) -> bool:
    """The routes whose errors take OpenAI's shape: ``/v1/``, and ``/v2/`` (``/v2/rerank``,
    Cohere v2's path for the body of ``/v1/rerank``: one shape for both, as vLLM answers)."""
    return path.startswith(("/v1/", "/v2/"))


def _openai(req: Request) -> bool:
    return is_openai(req.url.path)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def install(app: FastAPI, on_error=None) -> None:
    """Register the handlers; ``on_error(error_type)`` counts each failure (metrics)."""
    count = on_error or (lambda _t: None)

    @app.exception_handler(ServeError)
    async def _serve_error(req: Request, exc: ServeError) -> JSONResponse:
        count(exc.error_type)
        return error_response(
            exc.status, exc.message, exc.error_type, exc.headers, openai=_openai(req)
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(req: Request, exc: RequestValidationError) -> JSONResponse:
        count("validation")
        return error_response(422, _validation_message(exc), "validation", openai=_openai(req))

    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Request, exc: StarletteHTTPException) -> JSONResponse:
        count(_TYPES.get(exc.status_code, "validation"))
        return error_response(
            exc.status_code,
            str(exc.detail),
            None,
            getattr(exc, "headers", None),
            openai=_openai(req),
        )

    @app.exception_handler(Exception)
    async def _unexpected(req: Request, exc: Exception) -> JSONResponse:
        count("backend")
        log.error("internal error: %s: %s", type(exc).__name__, exc)
        return error_response(
            500, f"internal error ({type(exc).__name__})", "backend", openai=_openai(req)
        )
