"""The per-token routes of text-embeddings-inference: ``/embed_all`` (a vector per token),
``/embed_sparse`` (SPLADE vectors from a masked-LM head; ``task`` picks an inference-free Router's
query or document route) and ``/decode`` (ids back to text).

Each input (a text, or token ids as TEI takes them: the model's input as it is) is read as one
window of at most the model's length (no windows: a token's vector is the one its window gives);
longer is a 413 unless ``truncate``. The answers are lists per input, for one input too, as
there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Response

from bertkit.inference.token_ids import TokenIds
from bertkit.serve.schemas import (
    DecodeRequest,
    SparseVectorsRequest,
    TokenVectorsRequest,
    inputs_of,
    refuse_empty,
)


def add_token_routes(
    app: FastAPI, server: Any, to_json: Callable[[Any], Response], cut_end_only: Callable[..., None]
) -> Callable[[SparseVectorsRequest], Awaitable[Response]]:
    """Register the routes on ``app`` (``server``: the app's :class:`~bertkit.serve.server.Server`);
    returns the ``/embed_sparse`` handler, the default route's for a SPLADE folder."""

    async def prepared(req: TokenVectorsRequest, capability: str) -> tuple[Any, list[Any]]:
        cut_end_only(req.truncation_direction)
        engine = server.engine(capability, req.model)
        inputs = inputs_of(req.inputs)
        server.check_count(len(inputs))
        return engine, engine.prompted(inputs, req.prompt_name)

    @app.post("/embed_all", summary="a vector per token, [CLS] and [SEP] included (TEI)")
    async def embed_all(req: TokenVectorsRequest) -> Response:
        engine, inputs = await prepared(req, "embed_all")
        return to_json(await server.run(engine, lambda: engine.embed_all(inputs, req.truncate)))

    @app.post(
        "/embed_sparse", summary="SPLADE vectors from the masked-LM head: [{index, value}] (TEI)"
    )
    async def embed_sparse(req: SparseVectorsRequest) -> Response:
        engine, inputs = await prepared(req, "embed_sparse")
        return to_json(
            await server.run(engine, lambda: engine.embed_sparse(inputs, req.truncate, req.task))
        )

    @app.post("/decode", summary="token ids back to text (TEI)")
    async def decode(req: DecodeRequest) -> Response:
        engine = server.engine("decode", req.model)
        ids = [req.ids] if not req.ids or isinstance(req.ids[0], int) else req.ids
        server.check_count(len(ids), "ids")
        refuse_empty([TokenIds(x) for x in ids], "ids")  # type: ignore[arg-type]
        return to_json(engine.decode(ids, req.skip_special_tokens))  # type: ignore[arg-type]

    return embed_sparse
