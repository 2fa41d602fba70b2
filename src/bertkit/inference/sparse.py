"""SPLADE: one sparse vector over the vocabulary per text, from a masked-LM head.

Each token weighs every vocabulary entry by log(1 + relu(its MLM logit)); the real tokens'
weights ([CLS] and [SEP] included, padding not) are joined by max (SPLADE v2, the default) or
sum (:func:`bertkit.model.pooling.splade_pool`), and only the non-zero entries are kept, ids
ascending. A sentence-transformers ``SparseEncoder`` folder (``MLMTransformer`` ->
``SpladePooling``) says which (:func:`bertkit.interop.sentence_folder.splade_spec`), with its
``max_active_dims`` (only the largest that many entries kept) and its ``max_seq_length``; any
folder with masked-LM head weights (a Hugging Face ``BertForMaskedLM``) works with the defaults.
``SparseEmbedder.load(folder)`` gives what ``SparseEncoder(folder).encode`` gives.

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
from bertkit.evaluation.retrieval import SparseRows
from bertkit.inference.embedder import BATCH_SIZE, Embedder
from bertkit.inference.fill_mask import FillMasker
from bertkit.inference.token_ids import TokenIds
from bertkit.interop.sentence_folder import splade_spec
from bertkit.model.batching import collate, length_batches
from bertkit.model.pooling import SpladeSpec, splade_pool
from bertkit.progress import progress
from bertkit.tasks.windows import WindowConfig, WindowCounts

CHUNK_TOKENS = 64
"""Token positions per pass through the MLM head: its (B, T, V) logits are the memory peak
(32 x 512 x 30522 floats would be 2 GB), so they are made and pooled a slice of T at a time."""


@dataclass(frozen=True)
class SparseVector:
    """The non-zero entries of one sparse vector: vocabulary ids ascending (int64) and their
    weights (float32, all > 0)."""

    indices: np.ndarray
    values: np.ndarray

    def tokens(self, tokenizer: Any) -> list[str]:
        """The vocabulary entry of each index (what the weights say about the text)."""
        return list(tokenizer.convert_ids_to_tokens([int(i) for i in self.indices]))

    def dense(self, size: int) -> np.ndarray:
        """The (size,) float32 vector, zeros outside :attr:`indices`."""
        out = np.zeros(size, np.float32)
        out[self.indices] = self.values
        return out


def _max_per_index(parts: Sequence[SparseVector]) -> SparseVector:
    """The element-wise max of sparse vectors (a text's windows)."""
    if len(parts) == 1:
        return parts[0]
    idx = np.concatenate([p.indices for p in parts])
    val = np.concatenate([p.values for p in parts])
    keys, where = np.unique(idx, return_inverse=True)
    out = np.zeros(len(keys), np.float32)
    np.maximum.at(out, where, val)
    return SparseVector(keys, out)


def keep_largest(vector: SparseVector, k: int | None) -> SparseVector:
    """``vector`` with only its ``k`` largest values (None: as it is), ids still ascending:
    sentence-transformers' ``max_active_dims``."""
    if k is None or len(vector.values) <= k:
        return vector
    top = np.sort(np.argsort(-vector.values, kind="stable")[:k])
    return SparseVector(vector.indices[top], vector.values[top])


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
        :class:`SpladeSpec`'s defaults); ``max_length`` as for :meth:`Embedder.load`."""
        masker = FillMasker.load(
            directory, device=device, precision=precision, allow_pickle=allow_pickle
        )
        embedder = Embedder.load(
            directory,
            model=masker.model.bert,
            max_length=max_length,
            device=device,
            precision=precision,
            batch_size=batch_size,
            allow_pickle=allow_pickle,
            split_special_tokens=split_special_tokens,
            windows=windows,
        )
        return cls.of(
            masker.model,
            embedder,
            pooling_strategy,
            activation_function,
            max_active_dims,
            batch_size=batch_size,
        )

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
    ) -> SparseEmbedder:
        """From an already loaded masked-LM ``model`` and the ``embedder`` over its encoder (the
        server's fill-mask model): the folder's SPLADE settings, overridden by those given."""
        base = (splade_spec(embedder.source) if embedder.source else None) or SpladeSpec()
        given = {
            "pooling_strategy": pooling_strategy,
            "activation_function": activation_function,
            "max_active_dims": max_active_dims,
        }
        spec = replace(base, **{k: v for k, v in given.items() if v is not None})
        return cls(model, embedder, spec, batch_size)

    @property
    def vocab_size(self) -> int:
        """The size of the vectors: the MLM head's outputs."""
        return int(self.model.config.vocab_size)

    @property
    def tokenizer(self) -> Any:
        return self.embedder.tokenizer

    def embed(self, texts: Sequence[str | TokenIds]) -> tuple[list[SparseVector], WindowCounts]:
        """One vector per text (or :class:`TokenIds`), in order, and how they were windowed."""
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
        return [keep_largest(_max_per_index(p), k) for p in parts]

    def __call__(self, texts: Sequence[str | TokenIds]) -> list[SparseVector]:
        return self.embed(texts)[0]

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
                pooled = None
                for s in range(0, hidden.shape[1], CHUNK_TOKENS):
                    logits = model.mlm(hidden[:, s : s + CHUNK_TOKENS], word).float()  # (B, C, V)
                    part = splade_pool(
                        logits,
                        mask[:, s : s + CHUNK_TOKENS],
                        spec.pooling_strategy,
                        spec.activation_function,
                    )  # (B, V)
                    if pooled is None:
                        pooled = part
                    elif spec.pooling_strategy == "max":
                        pooled = torch.maximum(pooled, part)
                    else:
                        pooled = pooled + part
                assert pooled is not None
                rows, cols = pooled.nonzero(as_tuple=True)
                vals = pooled[rows, cols].cpu().numpy()
                rows, cols = rows.cpu().numpy(), cols.cpu().numpy()
                ends = np.searchsorted(rows, np.arange(len(idx) + 1))
                for r, i in enumerate(idx):
                    a, b = ends[r], ends[r + 1]
                    out[i] = SparseVector(cols[a:b].astype(np.int64), vals[a:b].astype(np.float32))
        return out


def as_rows(vectors: Sequence[SparseVector], size: int) -> SparseRows:
    """The vectors as the CSR rows that :mod:`bertkit.evaluation.retrieval` searches."""
    lengths = [len(v.indices) for v in vectors]
    indptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    if not vectors:
        return SparseRows(indptr, np.zeros(0, np.int64), np.zeros(0, np.float32), size)
    indices = np.concatenate([v.indices for v in vectors]).astype(np.int64)
    values = np.concatenate([v.values for v in vectors]).astype(np.float32)
    return SparseRows(indptr, indices, values, size)


def join_rows(parts: Sequence[SparseRows], size: int) -> SparseRows:
    """The rows of ``parts`` one after the other (CSR shards joined in order)."""
    if not parts:
        return as_rows([], size)
    starts = np.cumsum([0] + [int(p.indptr[-1]) for p in parts[:-1]], dtype=np.int64)
    indptr = np.concatenate([[0]] + [p.indptr[1:] + s for p, s in zip(parts, starts)])
    indices = np.concatenate([p.indices for p in parts]).astype(np.int64)
    values = np.concatenate([p.values for p in parts]).astype(np.float32)
    return SparseRows(indptr.astype(np.int64), indices, values, size)
