"""The served models and what every route needs from them: the engine for a capability (4xx
when none can), a call on an engine's worker bounded by the request timeout, the count limit,
embedding vectors, and the check that no answer holds NaN or infinity."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bertkit.inference.token_ids import TokenIds
from bertkit.serve.engine import Engine
from bertkit.serve.errors import EMPTY, ServeError
from bertkit.serve.metrics import Metrics, record_time
from bertkit.serve.schemas import refuse_empty
from bertkit.serve.settings import ServeSettings

log = logging.getLogger("bertkit.serve")
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
        kernels.bound_shapes(
            "a server sees ever-new input shapes, and oneDNN keeps memory "
            "for each (RSS would grow without bound)"
        )

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
                raise ServeError(
                    422,
                    f"model {name!r} ({engine.task}) cannot {capability}; it serves {', '.join(engine.capabilities)}",
                )
        else:
            able = [
                e
                for e in self.engines.values()
                if e.ready.is_set() and capability in e.capabilities
            ]
            if name is not None:
                raise ServeError(
                    404, f"no model named {name!r}; served: {', '.join(self.engines)}", "not_found"
                )
            if not able:
                if not self.ready:
                    raise ServeError(503, "models are still loading; see /health", "unhealthy")
                served = "; ".join(
                    f"{e.name} ({e.task}: {', '.join(e.capabilities)})"
                    for e in self.engines.values()
                )
                raise ServeError(
                    404, f"no served model can {capability} (models: {served})", "not_found"
                )
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

    def check_count(self, n: int, field: str = "inputs") -> None:
        """A 400 for no inputs (TEI's "`inputs` cannot be empty"; ``field``: the request's name
        for the list), a 413 for more than ``--max-client-batch-size``."""
        if n == 0:
            raise ServeError(400, f"Input validation error: `{field}` cannot be empty", EMPTY)
        limit = self.settings.max_client_batch_size
        if n > limit:
            raise ServeError(
                413, f"batch size {n} > maximum allowed batch size {limit}", "payload_too_large"
            )

    async def vectors(
        self,
        engine: Engine,
        inputs: Sequence[str | TokenIds],
        truncate: bool | None,
        normalize: bool = False,
        dimensions: int | None = None,
        *,
        counted: int | None = None,
        field: str = "inputs",
        task: str | None = None,
    ) -> tuple[np.ndarray, int]:
        """The vectors of the inputs, texts or token ids (their first ``dimensions`` values,
        normalised or not), and the number of tokens they were embedded from (``truncate`` None:
        the route has no such field, :meth:`Engine.encode_for_embedding`). ``counted``: the
        inputs checked against ``--max-client-batch-size``, when not all of them
        (/similarity's ``sentences``: its source sentence is not counted, as /rerank's query
        is not); ``field``: the request's name for the list, which an empty one's 400 names.
        ``task``: a dense Router's route ("query", "document"; None: its default route); its
        default route's inputs merge with other requests', the other route's run as one job."""
        self.check_count(len(inputs) if counted is None else counted, field)
        assert engine.worker is not None and engine.embedder is not None
        emb = engine.embedder.for_task(task)
        # a thread hand-off costs more than tokenizing this much (or checking as many ids)
        size = sum(len(x) if isinstance(x, str) else len(x.input_ids) for x in inputs)
        if size <= INLINE_CHARS:
            windowed = engine.encode_for_embedding(inputs, truncate, emb)
        else:
            windowed = await asyncio.to_thread(engine.encode_for_embedding, inputs, truncate, emb)
        if emb is engine.embedder:
            job = engine.worker.embed_later(windowed.inputs)
        else:
            job = engine.worker.run(lambda: emb.embed_encodings(windowed.inputs))
        vectors = _finite(await self._wait(job))
        combined = emb.combine(vectors, windowed, normalize=normalize, dimensions=dimensions)
        return combined, windowed.tokens

    async def relevance(
        self,
        engine: Engine,
        query: str,
        texts: Sequence[str],
        field: str,
        *,
        truncate: bool | None = False,
        raw_scores: bool = False,
        max_tokens_per_text: int | None = None,
        max_windows: int | None = None,
    ) -> tuple[list[float], int]:
        """The relevance of each text to ``query`` (:meth:`Engine.rerank_scores`: ``truncate``
        cuts a long pair, else it is read in windows, None: the route has no such field, as
        :meth:`Engine.rerank_features` reads it, as its caps ``max_tokens_per_text`` and
        ``max_windows``; ``raw_scores``: no sigmoid), and the tokens
        of the (query, text) windows the model read (what /v1/embeddings counts as usage). The
        count's check and the empty-input rule come first (``field``: the request's name for the
        texts): a text with the query is one input, empty only when both are (TEI). The worker
        merges the windows with other requests' (embeddings' too) into its forward passes."""
        self.check_count(len(texts), field)
        if not query:
            refuse_empty(texts, field, ", and so is the query")
        features = await asyncio.to_thread(
            engine.rerank_features, query, texts, truncate, max_tokens_per_text, max_windows
        )
        assert engine.worker is not None
        rows = _finite(await self._wait(engine.worker.embed_later(features)))
        scores = engine.rerank_scores(rows, features, len(texts), raw_scores)
        return scores, sum(len(f.input_ids) for f in features)


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
