"""The HTTP app: routes over the engines, limits, metrics, the web page.

``create_app(settings)`` returns a FastAPI app; models load in a background thread when it
starts, so ``/health`` answers 503 until every model has run a real forward pass, then 200.
Every route but ``/health`` needs the API key when one is set. OpenAPI (Swagger) is at ``/docs``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST

from bertkit import __version__, hardware
from bertkit.serve import errors
from bertkit.serve.errors import EMPTY, ServeError
from bertkit.serve.limits import Limits
from bertkit.serve.metrics import Metrics, Observe
from bertkit.serve.rerank_routes import add_rerank_routes
from bertkit.serve.schemas import (
    EmbedRequest,
    FillMaskRequest,
    JSONBodyRoute,
    OpenAIEmbeddingRequest,
    PredictRequest,
    QARequest,
    RerankRequest,
    SimilarityRequest,
    SparseVectorsRequest,
    TagRequest,
    TokenizeRequest,
    inputs_of,
    read_json,
    refuse_blank_qa,
    refuse_empty,
)
from bertkit.serve.server import Server, _all_finite, _finite  # noqa: F401 (_all_finite: tests)
from bertkit.serve.settings import ServeSettings
from bertkit.serve.token_routes import add_token_routes

log = logging.getLogger("bertkit.serve")
SETTINGS_ENV = "BERTKIT_SERVE_SETTINGS"


def _cut_end_only(direction: str | None) -> None:
    """422 for what bertkit does not do: cutting the start of a long input."""
    if direction is not None and direction.lower() == "left":
        raise ServeError(
            422,
            'truncation_direction: bertkit cuts the end of a long input ("right"), not its start',
        )


def _validated(schema: type, body: Any) -> Any:
    """``body`` as ``schema`` (a pydantic model); a 422 naming the fields otherwise."""
    from fastapi.exceptions import RequestValidationError
    from pydantic import ValidationError

    try:
        return schema.model_validate(body)
    except ValidationError as e:
        raise RequestValidationError(e.errors()) from None


def _texts(inputs: str | list[str]) -> list[str]:
    return [inputs] if isinstance(inputs, str) else list(inputs)


def create_app(settings: ServeSettings) -> FastAPI:
    metrics = Metrics()
    server = Server(settings, metrics)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        server.start()
        yield
        server.stop()

    app = FastAPI(
        title="bertkit",
        version=__version__,
        lifespan=lifespan,
        description="BERT over HTTP: embeddings (TEI and OpenAI shapes), classification, tagging, QA, fill-mask.",
    )
    app.router.route_class = JSONBodyRoute  # before any route: every POST body is JSON
    app.state.server = server
    errors.install(app, lambda t: metrics.failures.labels(t).inc())

    app.add_middleware(
        Limits,
        api_key=settings.api_key,
        max_concurrent=settings.max_concurrent_requests,
        payload_limit=settings.payload_limit,
        metrics=metrics,
    )

    @app.get("/health", summary="200 once every model has run a real forward pass, else 503")
    async def health() -> Response:
        models = {
            e.name: ("ready" if e.ready.is_set() else e.error or "loading")
            for e in server.engines.values()
        }
        if server.ready:
            return Response(
                json.dumps({"status": "ok", "models": models}), media_type="application/json"
            )
        failed = any(e.error for e in server.engines.values())
        raise ServeError(
            503, f"{'a model failed to load' if failed else 'loading'}: {models}", "unhealthy"
        )

    @app.get("/info", summary="models, tasks and limits")
    async def info() -> dict:
        s = settings
        return {
            "version": __version__,
            "models": [e.info() for e in server.engines.values()],
            "limits": {
                "max_batch_tokens": s.max_batch_tokens,
                "max_client_batch_size": s.max_client_batch_size,
                "max_input_tokens": s.max_input_tokens,
                "max_concurrent_requests": s.max_concurrent_requests,
                "payload_limit": s.payload_limit,
                "request_timeout": s.request_timeout,
            },
            "auth": bool(s.api_key),
        }

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        for e in server.engines.values():
            metrics.queue_size.labels(e.name).set(e.worker.queued() if e.worker else 0)
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/embed", summary="embeddings (text-embeddings-inference shapes)")
    async def embed(req: EmbedRequest) -> Response:
        _cut_end_only(req.truncation_direction)
        engine = server.engine("embed", req.model)
        engine.check_dimensions(req.dimensions)
        inputs = engine.prompted(inputs_of(req.inputs), req.prompt_name)
        v, _ = await server.vectors(
            engine, inputs, req.truncate, req.normalize, req.dimensions, task=req.task
        )
        return _json(v)

    @app.post("/v1/embeddings", summary="embeddings (OpenAI shapes)")
    async def openai_embeddings(req: OpenAIEmbeddingRequest) -> Response:
        engine = server.engine("embed", req.model if req.model in server.engines else None)
        engine.check_dimensions(req.dimensions)
        inputs = engine.prompted(inputs_of(req.input, "input"), None)
        # OpenAI's shape has no truncate field (None): long texts are read in windows, as
        # /embed does, and a 413 does not tell the client to send one
        v, tokens = await server.vectors(engine, inputs, None, True, req.dimensions, field="input")
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(row.astype("<f4").tobytes()).decode()
                if req.encoding_format == "base64"
                else row,
            }
            for i, row in enumerate(v)
        ]
        return _json(
            {
                "object": "list",
                "data": data,
                "model": req.model or engine.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    @app.post("/similarity", summary="cosine similarity of a source sentence to each sentence")
    async def similarity(req: SimilarityRequest) -> Response:
        params = req.parameters
        truncate, prompt_name = req.truncate, None
        if params is not None:
            _cut_end_only(params.truncation_direction)
            truncate = params.truncate if params.truncate is not None else truncate
            prompt_name = params.prompt_name
        engine = server.engine("similarity", req.model)
        server.check_count(len(req.inputs.sentences), "inputs.sentences")
        refuse_empty(req.inputs.sentences, "inputs.sentences")
        if not req.inputs.source_sentence:
            raise ServeError(
                400, "Input validation error: `inputs.source_sentence` cannot be empty", EMPTY
            )
        texts = engine.prompted([req.inputs.source_sentence, *req.inputs.sentences], prompt_name)
        # the limit counts the sentences (the list the client sizes), not the source sentence
        counted = len(req.inputs.sentences)
        v, _ = await server.vectors(engine, texts, truncate, normalize=True, counted=counted)
        return _json([float(x) for x in v[1:] @ v[0]])

    @app.post("/tokenize", summary="word pieces with ids and character offsets")
    async def tokenize(req: TokenizeRequest) -> Response:
        engine = server.engine("tokenize", req.model)
        texts = _texts(req.inputs)
        server.check_count(len(texts))
        refuse_empty(texts)
        return _json(await asyncio.to_thread(engine.tokenize, texts, req.add_special_tokens))

    @app.post("/predict", summary="sequence classification or regression (text or text pairs)")
    async def predict(req: PredictRequest) -> Response:
        out = await classify(req)
        return _json(out[0] if isinstance(req.inputs, str) else out)

    async def classify(req: PredictRequest) -> list[list[dict]]:
        """The ranked labels of every input of ``req`` (a list per input)."""
        _cut_end_only(req.truncation_direction)
        engine = server.engine("predict", req.model)
        items: list[Any] = []
        for x in [req.inputs] if isinstance(req.inputs, str) else req.inputs:
            if isinstance(x, list):
                if len(x) != 2:
                    raise ServeError(422, f"a pair is [text, text_pair]; got a list of {len(x)}")
                items.append((x[0], x[1]))
            else:
                items.append(x)
        server.check_count(len(items))
        refuse_empty(items)
        out = await server.run(engine, lambda: engine.predict(items, req.raw_scores, req.truncate))
        top_k = req.parameters.top_k if req.parameters is not None else None
        return out if top_k is None else [ranked[:top_k] for ranked in out]

    rerank = add_rerank_routes(app, server, _json, _cut_end_only)
    embed_sparse = add_token_routes(app, server, _json, _cut_end_only)

    @app.post("/", summary="TEI's default route: the served model's own task")
    async def default_route(request: Request) -> Response:
        """What text-embeddings-inference answers at its base URL, and where huggingface_hub's
        InferenceClient(model=URL) sends every call: a rerank body ({query, texts}) or a
        similarity body ({inputs: {source_sentence, sentences}}) by its shape, else the named
        (or first) model's task: embed, embed_sparse (SPLADE), predict (classifiers), ner or qa. Classification answers
        in the Inference API's shape, a list of labels per input even for one input (what
        InferenceClient.text_classification reads), where /predict answers one input unwrapped."""
        body = await read_json(request)  # read once already, by the route (JSONBodyRoute)
        if not isinstance(body, dict):
            raise ServeError(422, "the body must be a JSON object")
        if not isinstance(body.get("model"), str | None):  # looked up by name below
            raise ServeError(422, "model: Input should be a valid string")
        if "query" in body and "texts" in body:
            return await rerank(_validated(RerankRequest, body))
        inputs = body.get("inputs")
        if isinstance(inputs, dict) and "source_sentence" in inputs:
            return await similarity(_validated(SimilarityRequest, body))
        name = body.get("model")
        if name not in server.engines:
            if len(server.engines) > 1:
                raise ServeError(
                    400,
                    f"{'no model named ' + repr(name) if name else 'several models are served'}: "
                    f'name one in the "model" field ({", ".join(server.engines)})',
                )
            name = next(iter(server.engines))
        engine = server.engines[name]
        if not engine.ready.is_set():
            raise ServeError(
                503, engine.error or f"model {engine.name!r} is still loading", "unhealthy"
            )
        caps = engine.capabilities
        body = {**body, "model": engine.name}
        if "embed" in caps:
            return await embed(_validated(EmbedRequest, body))
        if "embed_sparse" in caps:  # a SparseEncoder folder, as TEI serves a SPLADE model
            return await embed_sparse(_validated(SparseVectorsRequest, body))
        if "predict" in caps:  # the Inference API's shape: a list per input, one input too
            return _json(await classify(_validated(PredictRequest, body)))
        if "tag" in caps:
            return await ner(_validated(TagRequest, body))
        if "qa" in caps:
            return await qa(_validated(QARequest, body))
        raise ServeError(
            422,
            f"model {engine.name!r} ({engine.task}) has no default task; "
            f"use one of its routes: {', '.join(caps)}",
        )

    @app.post(
        "/ner", summary="token tagging: tags per word and entity spans with character offsets"
    )
    async def ner(req: TagRequest) -> Response:
        engine = server.engine("tag", req.model)
        texts = _texts(req.inputs)
        server.check_count(len(texts))
        out = await server.run(engine, lambda: engine.tag(texts))
        return _json(out[0] if isinstance(req.inputs, str) else out)

    @app.post("/qa", summary="extractive question answering: the answer span in the context")
    async def qa(req: QARequest) -> Response:
        engine = server.engine("qa", req.model)
        items = [req.inputs] if not isinstance(req.inputs, list) else req.inputs
        server.check_count(len(items))
        pairs = [(x.question, x.context) for x in items]
        refuse_blank_qa(pairs)
        out = await server.run(engine, lambda: engine.qa(pairs))
        return _json(out if isinstance(req.inputs, list) else out[0])

    @app.post("/fill-mask", summary="top-k tokens for every [MASK]")
    async def fill_mask(req: FillMaskRequest) -> Response:
        engine = server.engine("fill-mask", req.model)
        texts = _texts(req.inputs)
        server.check_count(len(texts))
        out = await server.run(engine, lambda: engine.fill_mask(texts, req.top_k, req.truncate))
        return _json(out[0] if isinstance(req.inputs, str) else out)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        html = resources.files("bertkit.serve").joinpath("static/index.html")
        return HTMLResponse(
            html.read_text(encoding="utf-8") if html.is_file() else "<p>bertkit</p>"
        )

    _answer_head(app)
    # outermost: the requests the limits turn away are counted and timed too
    routes = frozenset(getattr(r, "path", "") for r in app.routes)
    device = hardware.resolve_device(settings.device) if settings.backend == "torch" else "cpu"
    app.add_middleware(
        Observe, metrics=metrics, routes=routes, compute_type=str(device).split(":")[0]
    )
    return app


def _answer_head(app: FastAPI) -> None:
    """HEAD on every GET route (/health, /info, /metrics, the page), as Starlette's own routes
    answer it and FastAPI's do not: load balancers probe /health with HEAD (the server leaves
    the body out). Kept out of the OpenAPI schema, which would list each operation twice."""
    for route in list(app.routes):
        if isinstance(route, APIRoute) and route.methods == {"GET"}:
            app.add_api_route(
                route.path,
                route.endpoint,
                methods=["HEAD"],
                response_class=route.response_class,
                include_in_schema=False,
            )


def _json(obj: Any) -> Response:
    """orjson writes numpy arrays directly, float32 as the shortest text that reads back exactly
    (32 x 384 floats: 0.44 ms, 131 kB, against 11.6 ms and 249 kB for json.dumps of a list)."""
    return Response(
        orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )


def app_from_env() -> FastAPI:
    """The app for ``uvicorn --factory`` worker processes: settings from ``$BERTKIT_SERVE_SETTINGS``."""
    return create_app(ServeSettings(**json.loads(os.environ[SETTINGS_ENV])))
