"""SPLADE: one sparse vector over the vocabulary per text, from a masked-LM head.

Each token weighs every vocabulary entry by log(1 + relu(its MLM logit)); the real tokens'
weights ([CLS] and [SEP] included, padding not) are joined by max (SPLADE v2, the default) or
sum (:func:`bertkit.model.pooling.splade_pool`), and only the non-zero entries are kept, ids
ascending. A sentence-transformers ``SparseEncoder`` folder (``MLMTransformer`` ->
``SpladePooling``) says which (:func:`bertkit.interop.sentence_folder.splade_spec`), with its
``max_active_dims`` (only the largest that many entries kept) and its ``max_seq_length``; any
folder with masked-LM head weights (a Hugging Face ``BertForMaskedLM``) works with the defaults.
``SparseEmbedder.load(folder)`` gives what ``SparseEncoder(folder).encode`` gives, and
:meth:`SparseEmbedder.encode` what its ``encode_query`` / ``encode_document`` give (the task's
prompt, and for an "inference-free" ``Router`` folder the task's route:
:mod:`bertkit.interop.sentence_router`, queries by :mod:`bertkit.inference.sparse_static`).

Long texts: with max pooling they are read in windows as the dense :class:`Embedder` reads them
(``doc_stride``), and a text's vector is the element-wise max of its windows' vectors: the max
over all its tokens, each token seen in its window. sentence-transformers cuts them at
``max_seq_length`` instead (``truncate`` does that). With sum pooling a token shared by two
windows would count twice, so sum always reads the first window only (the counts say how many
texts were cut).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import precision as P
from bertkit.errors import ConfigError
from bertkit.inference.embedder import BATCH_SIZE, Embedder
from bertkit.inference.fill_mask import FillMasker
from bertkit.inference.sparse_static import StaticSparseEmbedder
from bertkit.inference.sparse_vector import SparseVector, as_rows, keep_largest, max_per_index
from bertkit.inference.token_ids import TokenIds
from bertkit.interop.sentence_folder import router_of, splade_spec
from bertkit.interop.sentence_prompts import task_prompt
from bertkit.interop.sentence_router import TASKS, SparseRouter
from bertkit.model.batching import collate, length_batches
from bertkit.model.pooling import SpladeSpec
from bertkit.model.splade import CHUNK_TOKENS, splade_vectors
from bertkit.progress import progress
from bertkit.tasks.sparse import nonzero_rows
from bertkit.tasks.windows import WindowConfig, WindowCounts

__all__ = ["CHUNK_TOKENS", "SparseEmbedder", "SparseVector", "as_rows", "keep_largest"]


@dataclass
class SparseEmbedder:
    """One :class:`SparseVector` per text. Build with :meth:`load`; call with a list of texts."""

    model: torch.nn.Module
    """A model with ``bert`` (the encoder) and ``mlm`` (the head): BertForMaskedLM."""
    embedder: Embedder
    """Tokenization, token-id checks and windows: the dense Embedder over ``model.bert``."""
    spec: SpladeSpec
    batch_size: int = BATCH_SIZE
    """Windows per forward pass, batched by length (each pass holds B x 64 x V logits)."""
    show_progress: bool | None = None
    query_route: StaticSparseEmbedder | SparseEmbedder | None = None
    """A Router folder's query route, where queries do not take this MLM: its
    SparseStaticEmbedding, or its own masked-LM encoder (a two-encoder SPLADE)."""
    root: Path | None = None
    """A Router folder (the encoder's folder is inside it); None: the encoder's folder."""
    default_task: str = "document"
    """The route :meth:`embed` takes without a task (a Router's ``default_route``)."""

    @classmethod
    def load(
        cls,
        directory: str | Path,
        *,
        pooling_strategy: str | None = None,
        activation_function: str | None = None,
        max_active_dims: int | None = None,
        max_length: int | None = None,
        device: str | None = None,
        precision: str = P.DEFAULT,
        batch_size: int = BATCH_SIZE,
        allow_pickle: bool = False,
        split_special_tokens: bool = False,
        windows: WindowConfig | None = None,
    ) -> SparseEmbedder:
        """Read a folder with masked-LM head weights (CheckpointError without them). The
        SPLADE settings not given come from the folder's ``SpladePooling`` (else
        :class:`SpladeSpec`'s defaults); ``max_length`` as for :meth:`Embedder.load`. A
        SparseEncoder ``Router`` folder reads its document route's transformer and pooling, and
        its query route's static weights or own masked-LM encoder and pooling, loaded only when
        it differs from the document route (CheckpointError for a Router that is not SPLADE)."""
        router = router_of(directory, sparse=True)  # its document route's transformer is the model
        given = {
            "pooling_strategy": pooling_strategy,
            "activation_function": activation_function,
            "max_active_dims": max_active_dims,
        }
        common = {
            "device": device,
            "precision": precision,
            "batch_size": batch_size,
            "allow_pickle": allow_pickle,
            "split_special_tokens": split_special_tokens,
            "windows": windows,
        }
        query = None
        if isinstance(router, SparseRouter):
            query = cls.query_encoder(router, max_length=max_length, **given, **common)
            directory, max_length = router.document, max_length or router.max_length
        masker = FillMasker.load(
            directory, device=device, precision=precision, allow_pickle=allow_pickle
        )
        embedder = Embedder.load(
            directory, model=masker.model.bert, max_length=max_length, **common
        )
        return cls.of(
            masker.model,
            embedder,
            pooling_strategy,
            activation_function,
            max_active_dims,
            batch_size=batch_size,
            router=router,  # type: ignore[arg-type]
            split_special_tokens=split_special_tokens,
            query=query,
        )

    @classmethod
    def query_encoder(
        cls, router: SparseRouter, *, max_length: int | None = None, **options: Any
    ) -> SparseEmbedder | None:
        """A two-encoder Router's query encoder: its own transformer, SpladePooling and length,
        overridden by the SPLADE settings and ``max_length`` given (``options``: :meth:`load`'s
        keywords); None for a Router whose queries take static weights or the document route."""
        route = router.query_splade
        if route is None:
            return None
        for key in SpladeSpec.__dataclass_fields__:
            if options.get(key) is None:
                options[key] = getattr(route.spec, key)
        return cls.load(route.transformer, max_length=max_length or route.max_length, **options)

    @classmethod
    def of(
        cls,
        model: torch.nn.Module,
        embedder: Embedder,
        pooling_strategy: str | None = None,
        activation_function: str | None = None,
        max_active_dims: int | None = None,
        *,
        batch_size: int = BATCH_SIZE,
        router: SparseRouter | None = None,
        split_special_tokens: bool = False,
        query: SparseEmbedder | None = None,
    ) -> SparseEmbedder:
        """From an already loaded masked-LM ``model`` and the ``embedder`` over its encoder (the
        server's fill-mask model): the folder's SPLADE settings, overridden by those given.
        ``router``: the Router folder ``model`` is the document route of (its settings, and its
        query route's static weights, read with ``split_special_tokens``); ``query``: its query
        route's own encoder (:meth:`load` reads it)."""
        if router is not None:
            base = router.spec
        else:
            base = (splade_spec(embedder.source) if embedder.source else None) or SpladeSpec()
        given = {
            "pooling_strategy": pooling_strategy,
            "activation_function": activation_function,
            "max_active_dims": max_active_dims,
        }
        spec = replace(base, **{k: v for k, v in given.items() if v is not None})
        if router is None:
            return cls(model, embedder, spec, batch_size)
        static = router.static_query
        if router.query_splade is not None and query is None:
            raise ConfigError(f"{router.root}: its query route's encoder is not loaded")
        route: StaticSparseEmbedder | SparseEmbedder | None = query
        if static is not None:
            route = StaticSparseEmbedder.load(static, split_special_tokens=split_special_tokens)
        return cls(
            model,
            embedder,
            spec,
            batch_size,
            query_route=route,
            root=router.root,
            default_task=router.default_task,
        )

    @property
    def vocab_size(self) -> int:
        """The size of the vectors: the MLM head's outputs."""
        return int(self.model.config.vocab_size)

    @property
    def tokenizer(self) -> Any:
        return self.embedder.tokenizer

    @property
    def folder(self) -> Path | None:
        """The SparseEncoder folder (its prompts and similarity): the Router's, else the
        encoder's."""
        return self.root or self.embedder.source

    def encode(self, texts: Sequence[str], task: str | None = None) -> list[SparseVector]:
        """sentence-transformers' ``encode_query`` (``task="query"``) or ``encode_document``
        (:meth:`embed`'s vectors); None: ``encode``."""
        return self.embed(texts, task)[0]

    def embed(
        self, texts: Sequence[str | TokenIds], task: str | None = None
    ) -> tuple[list[SparseVector], WindowCounts]:
        """One vector per text (or :class:`TokenIds`), in order, and how they were windowed.
        ``task`` ("query", "document"): each text behind the folder's prompt of that task
        (:func:`task_prompt`; token ids as they are), through a Router's route for it; None:
        no prompt, :attr:`default_task`'s route (sentence-transformers' ``encode``)."""
        route = self.route(task)
        prompt = task_prompt(self.folder, task) if task and self.folder else ""
        if prompt:
            texts = [t if isinstance(t, TokenIds) else prompt + t for t in texts]
        if route is not None:
            found, counts = route.embed(texts)
            return [keep_largest(v, self.spec.max_active_dims) for v in found], counts
        emb = self.embedder
        cut = True if self.spec.pooling_strategy == "sum" else None
        windowed = emb.window(emb.encode(texts), truncate=cut)
        found = self.window_vectors(windowed.inputs)
        return self.combine(found, windowed.owners, windowed.counts.inputs), windowed.counts

    def combine(
        self, vectors: Sequence[SparseVector], owners: Sequence[int], inputs: int
    ) -> list[SparseVector]:
        """One vector per text from its windows' (``owners[w]``: window w's text, of
        ``inputs``): their element-wise max, then only the largest ``max_active_dims``."""
        parts: list[list[SparseVector]] = [[] for _ in range(inputs)]
        for owner, vec in zip(owners, vectors, strict=True):
            parts[owner].append(vec)
        k = self.spec.max_active_dims
        return [keep_largest(max_per_index(p), k) for p in parts]

    def __call__(self, texts: Sequence[str | TokenIds]) -> list[SparseVector]:
        return self.embed(texts)[0]

    def route(self, task: str | None) -> StaticSparseEmbedder | SparseEmbedder | None:
        """The query route ``task`` takes (static weights or the query encoder), or None where
        it takes this MLM; ConfigError for a task other than "query" and "document"."""
        if task is not None and task not in TASKS:
            raise ConfigError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
        return self.query_route if (task or self.default_task) == "query" else None

    @torch.inference_mode()
    def window_vectors(self, inputs: Sequence[Any]) -> list[SparseVector]:
        """The pooled vector of each encoded input (a window: ``input_ids``, from
        :meth:`Embedder.window`), in order, before ``max_active_dims``."""
        model, emb, spec = self.model, self.embedder, self.spec
        model.eval()
        device = next(model.parameters()).device
        out: list[SparseVector] = [SparseVector(np.zeros(0, np.int64), np.zeros(0, np.float32))]
        out = out * len(inputs)
        batches = length_batches([len(x.input_ids) for x in inputs], self.batch_size)
        pad = emb.tokenizer.pad_token_id or 0
        word = model.bert.embeddings.word.weight
        with P.autocast(emb.precision, device):
            for idx in progress(batches, desc="splade", unit="batch", enabled=self.show_progress):
                batch = collate([inputs[i].input_ids for i in idx], None, pad)
                batch = {key: v.to(device) for key, v in batch.items()}
                hidden = model.bert(**batch).last_hidden_state  # (B, T, H)
                mask = batch["attention_mask"]
                pooled = splade_vectors(model.mlm, word, hidden, mask, spec)  # (B, V)
                for i, (ids, weights) in zip(idx, nonzero_rows(pooled), strict=True):
                    out[i] = SparseVector(ids, weights)
        return out
