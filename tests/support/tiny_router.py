"""Tiny dense sentence-transformers ``Router`` folders (asymmetric bi-encoders), saved by
sentence-transformers itself: ``Router.for_query_document`` over random Hugging Face BERTs
(:func:`support.tiny_splade.hf_masked_lm`: hidden 32, 2 layers, 24 positions)."""

from __future__ import annotations

from pathlib import Path

from support.tiny_splade import hf_masked_lm

QUERY_MAX_LENGTH = 10
"""The query Transformer's ``max_seq_length`` (the document's: the model's 24 positions)."""


def saved_dense_router(root: Path, query: str = "other") -> tuple[Path, object]:
    """A ``SentenceTransformer([Router])`` folder (``root/st``) and the model read back from it.

    The document route is Transformer (BERT of seed 0) -> mean Pooling -> Normalize. The query
    route (``query``): "other", a second BERT (seed 1) cut at :data:`QUERY_MAX_LENGTH` -> [CLS]
    Pooling; "shared", the document route's own modules; "copy", the same BERT loaded again
    with the same pooling (saved as copies of each module); "dense", "other" -> a ``Dense``
    layer (tanh); "layernorm", "other" -> a ``LayerNorm``, and "static", a ``StaticEmbedding``
    (bertkit refuses these two by name)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sentence_transformer.modules import (
        Dense,
        LayerNorm,
        Normalize,
        Pooling,
        Transformer,
    )

    hf_masked_lm(root / "doc", seed=0)
    torch.manual_seed(0)  # the BERT pooler, absent from a masked-LM folder, is drawn at load
    doc = [Transformer(str(root / "doc")), Pooling(32, "mean"), Normalize()]
    if query == "shared":
        queries = doc
    elif query == "copy":
        torch.manual_seed(0)
        queries = [Transformer(str(root / "doc")), Pooling(32, "mean"), Normalize()]
    elif query == "static":
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(root / "doc" / "tokenizer.json"))
        queries = [StaticEmbedding(tokenizer, embedding_dim=32)]
    else:
        hf_masked_lm(root / "query", seed=1)
        queries = [
            Transformer(str(root / "query"), max_seq_length=QUERY_MAX_LENGTH),
            Pooling(32, "cls"),
        ]
        if query == "dense":
            queries.append(Dense(32, 32))
        if query == "layernorm":
            queries.append(LayerNorm(32))
    model = SentenceTransformer(modules=[Router.for_query_document(queries, doc)], device="cpu")
    model.save(str(root / "st"))
    return root / "st", SentenceTransformer(str(root / "st"), device="cpu")
