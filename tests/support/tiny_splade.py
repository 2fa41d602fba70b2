"""Tiny sentence-transformers ``SparseEncoder`` folders built the way a user builds one: a
random transformers ``BertForMaskedLM`` (hidden 32, 2 layers, 24 positions) under
``MLMTransformer`` -> ``SpladePooling``, saved by sentence-transformers itself; and the plain
Hugging Face masked-LM folder under it. Whole words of a small vocabulary are one token each,
so a window's text is its words joined by spaces."""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = [
    *("the", "cat", "dog", "sat", "on", "mat", "a", "big", "small", "red", "ran", "blue"),
    *("house", "tree", "river", "road"),
]
MAX_SEQ_LENGTH = 12
"""The SparseEncoder's ``max_seq_length``: longer texts are cut there by sentence-transformers."""
QUERY_MAX_SEQ_LENGTH = 8
"""A two-encoder Router's query transformer's ``max_seq_length``."""


def hf_masked_lm(root: Path, seed: int = 0) -> Path:
    """A random Hugging Face BertForMaskedLM folder (config.json, safetensors, vocab.txt)."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    root.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, ".", ","]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=24,
    )
    model = BertForMaskedLM(config)
    with torch.no_grad():  # spread the logits so that about half are > 0 (a sparse vector)
        model.cls.predictions.bias.normal_(0.0, 1.0)
    model.save_pretrained(root)
    BertTokenizerFast(str(root / "vocab.txt")).save_pretrained(root)
    return root


def sparse_encoder(hf_folder: Path, **pooling) -> object:
    """sentence-transformers' SparseEncoder over ``hf_folder``; ``pooling``: SpladePooling's
    keywords, plus ``max_active_dims`` for the encoder and ``fill_mask_transformer`` for the
    module sentence-transformers 6 recommends (``Transformer(transformer_task="fill-mask")``)
    instead of ``MLMTransformer``, which existing SPLADE folders name."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    k = pooling.pop("max_active_dims", None)
    if pooling.pop("fill_mask_transformer", False):
        mlm = Transformer(
            str(hf_folder), transformer_task="fill-mask", max_seq_length=MAX_SEQ_LENGTH
        )
    else:
        mlm = MLMTransformer(str(hf_folder), max_seq_length=MAX_SEQ_LENGTH)
    return SparseEncoder(modules=[mlm, SpladePooling(**pooling)], device="cpu", max_active_dims=k)


def saved_sparse_encoder(root: Path, **pooling) -> tuple[Path, object]:
    """A SparseEncoder folder saved by sentence-transformers (``root/st``) and the encoder
    read back from it (the reference)."""
    from sentence_transformers import SparseEncoder

    hf_masked_lm(root / "hf")
    sparse_encoder(root / "hf", **pooling).save(str(root / "st"))
    return root / "st", SparseEncoder(str(root / "st"), device="cpu")


def saved_router_encoder(
    root: Path, query: str = "static", max_active_dims: int | None = None
) -> tuple[Path, object]:
    """An "inference-free" SparseEncoder folder saved by sentence-transformers (``root/st``):
    a ``Router`` whose document route is MLMTransformer -> SpladePooling and whose query route
    is (``query``) a ``SparseStaticEmbedding`` ("static": random weights, some 0 and some
    negative), the document route's own modules ("shared"), a second SPLADE loaded from the same
    weights ("copy": saved as a copy of each module, as sentence-transformers 6.0 saves shared
    ones), a second SPLADE of other weights, cut at :data:`QUERY_MAX_SEQ_LENGTH` and pooled by
    sum ("splade": a two-encoder SPLADE) or a dense Transformer -> Pooling ("dense": what
    bertkit refuses). Returns the folder and the encoder read back from it (None for "dense")."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding

    hf_masked_lm(root / "hf")
    doc = list(sparse_encoder(root / "hf").children())
    if query == "static":
        torch.manual_seed(1)
        weight = torch.rand(len(doc[0].tokenizer.get_vocab())) * 2 - 1  # half < 0
        weight[[5, 9, 12]] = 0.0  # "the", "on", "big": no weight
        queries = [SparseStaticEmbedding(tokenizer=doc[0].tokenizer, weight=weight, frozen=True)]
    elif query == "shared":
        queries = doc
    elif query == "copy":
        queries = list(sparse_encoder(root / "hf").children())
    elif query == "splade":  # another query encoder: its own weights, length and pooling
        from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

        hf_masked_lm(root / "hf-query", seed=1)
        mlm = MLMTransformer(str(root / "hf-query"), max_seq_length=QUERY_MAX_SEQ_LENGTH)
        queries = [mlm, SpladePooling(pooling_strategy="sum")]
    else:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

        queries = [Transformer(str(root / "hf")), Pooling(32)]
        doc = [Transformer(str(root / "hf")), Pooling(32)]
    router = Router.for_query_document(queries, doc)
    model = SparseEncoder(
        modules=[router], device="cpu", similarity_fn_name="dot", max_active_dims=max_active_dims
    )
    model.save(str(root / "st"))
    if query == "dense":
        return root / "st", None
    return root / "st", SparseEncoder(str(root / "st"), device="cpu")
