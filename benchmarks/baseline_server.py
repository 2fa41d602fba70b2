"""The baseline embedding server for benchmarks/serve_load.py, written the way one is usually
written today: FastAPI + sentence-transformers, one ``model.encode(texts)`` per request.

    python benchmarks/baseline_server.py --model DIR --port 8081 --threads 2

``POST /embed {"inputs": [texts], "normalize": true}`` answers a list of vectors (TEI's shape);
with ``--cross-encoder DIR`` instead, ``POST /rerank {"query", "texts"}`` answers TEI's
``[{index, score}]`` best first, one ``CrossEncoder.predict(pairs)`` per request (sigmoid scores);
``GET /health`` is 200 once the model has loaded (the server starts listening only then).

The route is a plain ``def``, as in most examples: FastAPI runs it in its thread pool (40 threads
by default), so concurrent requests run concurrent forward passes that share (and oversubscribe)
the ``--threads`` cores. Nothing merges requests into batches. The reply is a Python list, which
FastAPI walks with ``jsonable_encoder`` before encoding it. Bound to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os

from pydantic import BaseModel


class RerankRequest(BaseModel):
    query: str
    texts: list[str]
    truncate: bool = False


class EmbedRequest(BaseModel):
    inputs: str | list[str]
    normalize: bool = True
    truncate: bool = False


def build_rerank_app(model_dir: str, threads: int):
    import torch
    from fastapi import FastAPI
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(threads)
    model = CrossEncoder(model_dir, device="cpu", local_files_only=True)
    model.predict([("warm", "up")])
    app = FastAPI(title="baseline reranking server")

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.post("/rerank")
    def rerank(req: RerankRequest):
        scores = model.predict([(req.query, t) for t in req.texts])
        order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
        return [{"index": i, "score": float(scores[i])} for i in order]

    return app


def build_app(model_dir: str, threads: int):
    import torch
    from fastapi import FastAPI
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(model_dir, device="cpu", local_files_only=True)
    model.encode(["warm up"])
    app = FastAPI(title="baseline embedding server")

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.post("/embed")
    def embed(req: EmbedRequest):
        texts = [req.inputs] if isinstance(req.inputs, str) else req.inputs
        return model.encode(texts, normalize_embeddings=req.normalize).tolist()

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="a sentence-transformers folder")
    ap.add_argument("--cross-encoder", default=None, help="a CrossEncoder folder: serve /rerank")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
    import uvicorn

    if args.cross_encoder:
        app = build_rerank_app(args.cross_encoder, args.threads)
    elif args.model:
        app = build_app(args.model, args.threads)
    else:
        raise SystemExit("give --model or --cross-encoder")
    uvicorn.run(app, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
