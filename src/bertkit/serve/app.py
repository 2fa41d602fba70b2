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
import math
import os
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bertkit import __version__, hardware
from bertkit.evaluation.retrieval import rerank_order, unit_rows
from bertkit.serve import errors
from bertkit.serve.engine import Engine
from bertkit.serve.errors import ServeError
from bertkit.serve.limits import Limits
from bertkit.serve.metrics import Metrics, Observe, record_time
from bertkit.serve.schemas import (
    EmbedRequest,
    FillMaskRequest,
    OpenAIEmbeddingRequest,
    PredictRequest,
    QARequest,
    RerankRequest,
    SimilarityRequest,
    TagRequest,
    TokenizeRequest,
)
from bertkit.serve.settings import ServeSettings
from bertkit.serve.token_routes import add_token_routes

log = logging.getLogger("bertkit.serve")
SETTINGS_ENV = "BERTKIT_SERVE_SETTINGS"
# Requests of up to this many characters are tokenized on the event loop (about 0.3 ms per
# 1,000 characters); longer ones in a thread, so that they do not hold the loop up.
INLINE_CHARS = 4096


class Server:
    """The engines and what every route needs from them."""

    def __init__(self, settings: ServeSettings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
        self.engines = {
            n: Engine(n, d, settings, metrics) for n, d in settings.named_models().items()
        }
        self._loader: threading.Thread | None = None

    def start(self) -> None:
        from bertkit.model import kernels

        if self.settings.threads:
            import torch

            torch.set_num_threads(self.settings.threads)
        kernels.bound_shapes("a server sees ever-new input shapes, and oneDNN keeps memory "
                             "for each (RSS would grow without bound)")  # fmt: skip

        def load_all() -> None:
            for engine in self.engines.values():
                try:
                    engine.load()
                    log.info("model %s ready (%s)", engine.name, ", ".join(engine.capabilities))
                except Exception as e:
                    engine.error = f"{type(e).__name__}: {e}"
                    log.error("model %s failed to load: %s", engine.name, engine.error)

        self._loader = threading.Thread(target=load_all, name="bertkit-load", daemon=True)
        self._loader.start()

    def stop(self) -> None:
        for engine in self.engines.values():
            engine.stop()

    @property
    def ready(self) -> bool:
        return all(e.ready.is_set() for e in self.engines.values())

    def engine(self, capability: str, name: str | None) -> Engine:
        """The named engine, or the first that has ``capability``; 4xx when there is none."""
        if name is not None and name in self.engines:
            engine = self.engines[name]
            if capability not in engine.capabilities and engine.ready.is_set():
                raise ServeError(422, f"model {name!r} ({engine.task}) cannot {capability}; it serves {', '.join(engine.capabilities)}")  # fmt: skip
        else:
            able = [
                e
                for e in self.engines.values()
                if e.ready.is_set() and capability in e.capabilities
            ]
            if name is not None:
                raise ServeError(404, f"no model named {name!r}; served: {', '.join(self.engines)}", "not_found")  # fmt: skip
            if not able:
                if not self.ready:
                    raise ServeError(503, "models are still loading; see /health", "unhealthy")
                raise ServeError(404, f"no served model can {capability} (models: {', '.join(f'{e.name} ({e.task})' for e in self.engines.values())})", "not_found")  # fmt: skip
            engine = able[0]
        if not engine.ready.is_set():
            raise ServeError(
                503, engine.error or f"model {engine.name!r} is still loading", "unhealthy"
            )
        return engine

    async def run(self, engine: Engine, fn: Callable[[], Any]) -> Any:
        """``fn`` on the engine's worker thread, bounded by the request timeout (a non-finite
        result: a JSON 500, see :func:`_finite`)."""
        assert engine.worker is not None
        return _finite(await self._wait(engine.worker.run(fn)))

    async def _wait(self, future: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await asyncio.wait_for(
                asyncio.wrap_future(future), self.settings.request_timeout
            )
        except TimeoutError:
            future.cancel()
            raise ServeError(
                504, f"no result within {self.settings.request_timeout:g} s", "timeout"
            ) from None
        finally:
            self.metrics.queue_wait.observe(time.perf_counter() - t0)
            record_time("x-compute-time", time.perf_counter() - t0)

    def check_count(self, n: int) -> None:
        if n == 0:
            raise ServeError(422, "`inputs` is empty")
        limit = self.settings.max_client_batch_size
        if n > limit:
            raise ServeError(
                413, f"batch size {n} > maximum allowed batch size {limit}", "payload_too_large"
            )

    async def vectors(
        self, engine: Engine, texts: list[str], truncate: bool
    ) -> tuple[np.ndarray, int]:
        """The texts' vectors (unnormalised) and the number of tokens they were embedded from."""
        self.check_count(len(texts))
        if sum(map(len, texts)) <= INLINE_CHARS:  # a thread hand-off costs more than this
            windowed = engine.encode_for_embedding(texts, truncate)
        else:
            windowed = await asyncio.to_thread(engine.encode_for_embedding, texts, truncate)
        assert engine.worker is not None and engine.embedder is not None
        vectors = _finite(await self._wait(engine.worker.embed_later(windowed.inputs)))
        combined = engine.embedder.combine(vectors, windowed).astype(np.float32, copy=False)
        return combined, windowed.tokens


def _finite(out: Any) -> Any:
    """``out`` as it is, or a JSON 500 if the model gave NaN or infinity anywhere in it: JSON has
    no NaN, and orjson would write null (checked where model output enters, before base64)."""
    if not _all_finite(out):
        raise ServeError(500, "the model gave non-finite values for these inputs", "backend")
    return out


def _all_finite(obj: Any) -> bool:
    """No NaN or infinity anywhere in a task's answer (floats, numpy values, dicts, lists)."""
    if isinstance(obj, float | np.floating):
        return math.isfinite(obj)
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind != "f" or bool(np.isfinite(obj).all())
    if isinstance(obj, dict):
        return all(map(_all_finite, obj.values()))
    if isinstance(obj, list | tuple):
        return all(map(_all_finite, obj))
    return True


def _cut_end_only(direction: str | None) -> None:
    """422 for what bertkit does not do: cutting the start of a long input."""
    if direction is not None and direction.lower() == "left":
        raise ServeError(422, "truncation_direction: bertkit cuts the end of a long input "
                         "(\"right\"), not its start")  # fmt: skip


def _dimensions(v: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The first ``dimensions`` values of each vector (checked by Engine.check_dimensions)."""
    return v if dimensions is None else v[:, :dimensions]


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


_normalized = unit_rows


def create_app(settings: ServeSettings) -> FastAPI:
    metrics = Metrics()
    server = Server(settings, metrics)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        server.start()
        yield
        server.stop()

    app = FastAPI(title="bertkit", version=__version__, lifespan=lifespan,
                  description="BERT over HTTP: embeddings (TEI and OpenAI shapes), classification, tagging, QA, fill-mask.")  # fmt: skip
    app.state.server = server
    errors.install(app, lambda t: metrics.failures.labels(t).inc())

    app.add_middleware(Limits, api_key=settings.api_key, max_concurrent=settings.max_concurrent_requests,
                       payload_limit=settings.payload_limit, metrics=metrics)  # fmt: skip

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
        return {"version": __version__, "models": [e.info() for e in server.engines.values()],
                "limits": {"max_batch_tokens": s.max_batch_tokens, "max_client_batch_size": s.max_client_batch_size, "max_input_tokens": s.max_input_tokens,
                           "max_concurrent_requests": s.max_concurrent_requests, "payload_limit": s.payload_limit,
                           "request_timeout": s.request_timeout},
                "auth": bool(s.api_key)}  # fmt: skip

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        for e in server.engines.values():
            metrics.queue_size.labels(e.name).set(e.worker.queued() if e.worker else 0)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/embed", summary="embeddings (text-embeddings-inference shapes)")
    async def embed(req: EmbedRequest) -> Response:
        _cut_end_only(req.truncation_direction)
        engine = server.engine("embed", req.model)
        engine.check_dimensions(req.dimensions)
        texts = engine.prompted(_texts(req.inputs), req.prompt_name)
        v, _ = await server.vectors(engine, texts, req.truncate)
        v = _dimensions(v, req.dimensions)
        return _json(_normalized(v) if req.normalize else v)

    @app.post("/v1/embeddings", summary="embeddings (OpenAI shapes)")
    async def openai_embeddings(req: OpenAIEmbeddingRequest) -> Response:
        engine = server.engine("embed", req.model if req.model in server.engines else None)
        engine.check_dimensions(req.dimensions)
        texts = engine.prompted(_texts(req.input), None)
        # OpenAI's shape has no truncate field: long inputs are read in windows, as /embed does
        v, tokens = await server.vectors(engine, texts, truncate=False)
        v = _normalized(_dimensions(v, req.dimensions))
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(row.astype("<f4").tobytes()).decode() if req.encoding_format == "base64" else row}
                for i, row in enumerate(v)]  # fmt: skip
        return _json({"object": "list", "data": data, "model": req.model or engine.name,
                      "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})  # fmt: skip

    @app.post("/similarity", summary="cosine similarity of a source sentence to each sentence")
    async def similarity(req: SimilarityRequest) -> Response:
        params = req.parameters
        truncate, prompt_name = req.truncate, None
        if params is not None:
            _cut_end_only(params.truncation_direction)
            truncate = params.truncate if params.truncate is not None else truncate
            prompt_name = params.prompt_name
        engine = server.engine("similarity", req.model)
        texts = engine.prompted([req.inputs.source_sentence, *req.inputs.sentences], prompt_name)
        v = _normalized((await server.vectors(engine, texts, truncate))[0])
        return _json([float(x) for x in v[1:] @ v[0]])

    @app.post("/tokenize", summary="word pieces with ids and character offsets")
    async def tokenize(req: TokenizeRequest) -> Response:
        engine = server.engine("tokenize", req.model)
        texts = _texts(req.inputs)
        server.check_count(len(texts))
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
        out = await server.run(engine, lambda: engine.predict(items, req.raw_scores, req.truncate))
        top_k = req.parameters.top_k if req.parameters is not None else None
        return out if top_k is None else [ranked[:top_k] for ranked in out]

    @app.post("/rerank", summary="relevance of each text to a query (a one-output classifier)")
    async def rerank(req: RerankRequest) -> Response:
        _cut_end_only(req.truncation_direction)
        engine = server.engine("rerank", req.model)
        server.check_count(len(req.texts))
        features = await asyncio.to_thread(
            engine.rerank_features, req.query, req.texts, req.truncate
        )
        assert engine.worker is not None
        rows = _finite(
            await server._wait(engine.worker.embed_later(features))
        )  # merged with others
        scores = engine.rerank_scores(rows, features, len(req.texts), req.raw_scores)
        order = rerank_order(scores)[: req.top_n]
        return _json([{"index": i, "score": scores[i], **({"text": req.texts[i]} if req.return_text else {})}
                      for i in order])  # fmt: skip

    @app.post("/", summary="TEI's default route: the served model's own task")
    async def default_route(request: Request) -> Response:
        """What text-embeddings-inference answers at its base URL, and where huggingface_hub's
        InferenceClient(model=URL) sends every call: a rerank body ({query, texts}) or a
        similarity body ({inputs: {source_sentence, sentences}}) by its shape, else the named
        (or first) model's task: embed, predict (classifiers), ner or qa. Classification answers
        in the Inference API's shape, a list of labels per input even for one input (what
        InferenceClient.text_classification reads), where /predict answers one input unwrapped."""
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise ServeError(422, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ServeError(422, "the body must be a JSON object")
        if "query" in body and "texts" in body:
            return await rerank(_validated(RerankRequest, body))
        inputs = body.get("inputs")
        if isinstance(inputs, dict) and "source_sentence" in inputs:
            return await similarity(_validated(SimilarityRequest, body))
        name = body.get("model")
        if name not in server.engines:
            if len(server.engines) > 1:
                raise ServeError(400, f"{'no model named ' + repr(name) if name else 'several models are served'}: "
                                 f"name one in the \"model\" field ({', '.join(server.engines)})")  # fmt: skip
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
        if "predict" in caps:  # the Inference API's shape: a list per input, one input too
            return _json(await classify(_validated(PredictRequest, body)))
        if "tag" in caps:
            return await ner(_validated(TagRequest, body))
        if "qa" in caps:
            return await qa(_validated(QARequest, body))
        raise ServeError(422, f"model {engine.name!r} ({engine.task}) has no default task; "
                         f"use one of its routes: {', '.join(caps)}")  # fmt: skip

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
        out = await server.run(engine, lambda: engine.qa(pairs))
        return _json(out if isinstance(req.inputs, list) else out[0])

    @app.post("/fill-mask", summary="top-k tokens for every [MASK]")
    async def fill_mask(req: FillMaskRequest) -> Response:
        engine = server.engine("fill-mask", req.model)
        texts = _texts(req.inputs)
        server.check_count(len(texts))
        out = await server.run(engine, lambda: engine.fill_mask(texts, req.top_k, req.truncate))
        return _json(out[0] if isinstance(req.inputs, str) else out)

    add_token_routes(app, server, _json, _cut_end_only)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        html = resources.files("bertkit.serve").joinpath("static/index.html")
        return HTMLResponse(
            html.read_text(encoding="utf-8") if html.is_file() else "<p>bertkit</p>"
        )

    # outermost: the requests the limits turn away are counted and timed too
    routes = frozenset(getattr(r, "path", "") for r in app.routes)
    device = hardware.resolve_device(settings.device) if settings.backend == "torch" else "cpu"
    app.add_middleware(
        Observe, metrics=metrics, routes=routes, compute_type=str(device).split(":")[0]
    )
    return app


def _json(obj: Any) -> Response:
    """orjson writes numpy arrays directly, float32 as the shortest text that reads back exactly
    (32 x 384 floats: 0.44 ms, 131 kB, against 11.6 ms and 249 kB for json.dumps of a list)."""
    return Response(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")  # fmt: skip


def app_from_env() -> FastAPI:
    """The app for ``uvicorn --factory`` worker processes: settings from ``$BERTKIT_SERVE_SETTINGS``."""
    return create_app(ServeSettings(**json.loads(os.environ[SETTINGS_ENV])))
