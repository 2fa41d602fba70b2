"""The rerank routes: text-embeddings-inference's ``/rerank`` and the Cohere / Jina / vLLM shape
of ``/v1/rerank`` and ``/v2/rerank``, both over one scoring path (:meth:`Server.relevance`: a
one-output classifier's sigmoid, long pairs in windows, concurrent requests' windows merged).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Response

from bertkit.evaluation.retrieval import rerank_order
from bertkit.serve.errors import ServeError
from bertkit.serve.schemas import CohereRerankRequest, RerankRequest


def add_rerank_routes(
    app: FastAPI, server: Any, to_json: Callable[[Any], Response], cut_end_only: Callable[..., None]
) -> Callable[[RerankRequest], Awaitable[Response]]:
    """Register the routes on ``app`` (``server``: the app's :class:`~bertkit.serve.server.Server`);
    returns the ``/rerank`` handler, which the default route calls for a ``{query, texts}`` body."""

    @app.post("/rerank", summary="relevance of each text to a query (a one-output classifier)")
    async def rerank(req: RerankRequest) -> Response:
        cut_end_only(req.truncation_direction)
        engine = server.engine("rerank", req.model)
        scores, _ = await server.relevance(
            engine, req.query, req.texts, "texts", truncate=req.truncate, raw_scores=req.raw_scores
        )
        order = rerank_order(scores)[: req.top_n]
        return to_json(
            [
                {
                    "index": i,
                    "score": scores[i],
                    **({"text": req.texts[i]} if req.return_text else {}),
                }
                for i in order
            ]
        )

    @app.post("/v1/rerank", summary="rerank in the shape of Cohere, Jina, vLLM and Infinity")
    @app.post("/v2/rerank", summary="rerank in the shape of Cohere's v2 API (the same body)")
    async def cohere_rerank(req: CohereRerankRequest) -> Response:
        """The scores /rerank gives (sigmoid, long pairs in windows; what is read of each
        document capped as :class:`CohereRerankRequest` says), in the shape RAG clients read:
        ``results`` best first, each ``{index, relevance_score, document?}`` (as sent), and the
        tokens read as ``usage``. Errors in OpenAI's shape (under /v2/ too), as vLLM answers."""
        if req.rank_fields not in (None, ["text"]):
            raise ServeError(422, 'rank_fields: bertkit ranks a document\'s "text" only')
        # a name the server does not serve picks the default reranker, as /v1/embeddings does:
        # clients send their hosted model's name (LangChain's CohereRerank: rerank-english-v3.0)
        engine = server.engine("rerank", req.model if req.model in server.engines else None)
        texts = req.texts()
        # the shape has no truncate field (None): long pairs are read in windows, as /rerank's
        # default, and a 413 names max_tokens_per_doc instead
        scores, tokens = await server.relevance(
            engine,
            req.query,
            texts,
            "documents",
            truncate=None,
            max_tokens_per_text=req.max_tokens_per_doc,
            max_windows=req.max_chunks_per_doc,
        )
        order = rerank_order(scores)[: req.top_n or None]
        documents = req.return_documents is not False
        results = [
            {
                "index": i,
                "relevance_score": scores[i],
                **({"document": {"text": texts[i]}} if documents else {}),
            }
            for i in order
        ]
        return to_json(
            {
                "id": f"rerank-{uuid.uuid4().hex}",
                "model": engine.name,
                "results": results,
                "usage": {"total_tokens": tokens},
            }
        )

    return rerank
