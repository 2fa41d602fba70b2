"""SPLADE vectors of a corpus in a folder of shards: :func:`embed_sparse_to` streams lines through
a :class:`~bertkit.inference.SparseEmbedder` into the resumable folder that dense vectors use
(:func:`bertkit.inference.corpus.write_stream`, :mod:`bertkit.inference.sharded`: same manifest,
resume, input checks, processes), and :func:`load_sparse_vectors` reads it back as the
:class:`SparseRows` that :func:`~bertkit.evaluation.retrieval.exact_sparse_search` searches.

Shard format: ``sparse-00000.npz`` ... , each the CSR rows of its lines (:func:`csr_bytes`):
``indptr`` int64 (rows + 1), ``indices`` int32 (vocabulary ids, ascending within a row),
``values`` float32. Why CSR in one ``.npz``: a shard must stay one file (one atomic rename, one
sha256 in the manifest) and a row's length varies; a dense ``.npy`` would hold the whole
vocabulary per line (30522 floats, nearly all zero), JSON lines about three times the bytes of
CSR and a parse per value to read back. ``np.load(shard)`` opens one without bertkit.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import InputError
from bertkit.evaluation.retrieval import SparseRows
from bertkit.inference.corpus import (
    StreamSummary,
    embedder_settings,
    require_kind,
    write_stream,
)
from bertkit.inference.sharded import StreamConfig, lines_bytes, shard_paths
from bertkit.inference.sparse import SparseEmbedder
from bertkit.inference.sparse_vector import as_rows, join_rows
from bertkit.tasks.windows import WindowCounts

SPARSE_KIND = "sparse"
"""The manifest's ``kind`` (and the shards' prefix) of a sparse folder; dense ones: ``vectors``."""

CSR_INDEX_DTYPE = np.int32
"""Vocabulary ids in a CSR shard: int32 halves them against int64 (a vocabulary is far below
2**31 entries); :func:`read_csr` gives them back as int64, as :class:`SparseRows` holds them."""


def csr_bytes(rows: SparseRows) -> bytes:
    """The ``.npz`` file of ``rows``: ``indptr`` (int64), ``indices`` (:data:`CSR_INDEX_DTYPE`)
    and ``values`` (float32), uncompressed. Equal rows give equal
    bytes (``np.savez`` stamps every member 1980-01-01, not the time of writing), as a resumed
    folder's shards must (:mod:`bertkit.inference.sharded`)."""
    buf = io.BytesIO()
    np.savez(
        buf,
        indptr=rows.indptr.astype(np.int64),
        indices=rows.indices.astype(CSR_INDEX_DTYPE),
        values=rows.values.astype(np.float32),
    )
    return buf.getvalue()


def read_csr(path: str | Path, size: int) -> SparseRows:
    """The rows of a :func:`csr_bytes` file, ``size`` columns; InputError when its arrays do not
    fit together (a shard that is not ours)."""
    with np.load(path, allow_pickle=False) as z:
        indptr, indices, values = z["indptr"], z["indices"], z["values"]
    if indptr[0] != 0 or indptr[-1] != len(indices) or len(indices) != len(values):
        raise InputError(
            path, None, "indptr, indices and values of a CSR shard do not fit together"
        )
    return SparseRows(indptr.astype(np.int64), indices.astype(np.int64), values, size)


def sparse_settings(model: SparseEmbedder) -> dict[str, Any]:
    """Everything of ``model`` that changes its vectors' bytes, as JSON values for the manifest:
    the dense encoder's settings (:func:`~bertkit.inference.corpus.embedder_settings`, less its
    pooling, normalisation, layers and window pooling, which SPLADE does not use: it joins a
    text's windows by max), the SPLADE spec (pooling strategy, activation, max_active_dims), the
    batch size and the vocabulary size."""
    dense = embedder_settings(model.embedder)
    for unused in ("normalize", "layers", "layer_combine", "window_pooling"):
        dense.pop(unused)
    return {
        **dense,
        "pooling": "splade",
        **dataclasses.asdict(model.spec),
        "batch_size": model.batch_size,
        "vocab_size": model.vocab_size,
    }


def embed_sparse_to(
    model: SparseEmbedder,
    lines: Iterable[str],
    folder: str | Path,
    *,
    config: StreamConfig | None = None,
    source: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    task: str | None = None,
    **run: Any,
) -> StreamSummary:
    """SPLADE vectors of ``lines`` into ``folder``: shards ``sparse-00000.npz`` ... of CSR rows
    (:func:`csr_bytes`), one per line, plus the manifest, resumable and split over processes
    exactly as :func:`bertkit.inference.corpus.embed_to` (``run``: its total, show_progress,
    rank, world, barrier). ``task``: as :meth:`SparseEmbedder.embed`'s (the prompt and, for a
    Router folder, the route). The manifest's settings (:func:`sparse_settings` and the task)
    must match on resume."""
    model.route(task)  # an unknown task refused before the folder is touched
    quiet = dataclasses.replace(model, show_progress=False)  # one bar, over lines

    def compute(chunk: list[str]) -> tuple[Callable[[int, int], bytes], WindowCounts]:
        vectors, counts = quiet.embed(chunk, task)
        return (lambda a, b: csr_bytes(as_rows(vectors[a:b], model.vocab_size))), counts

    return write_stream(
        folder,
        lines,
        kind=SPARSE_KIND,
        suffix=".npz",
        model_dir=model.folder,  # a Router's own folder: search reads its query route
        settings={**sparse_settings(model), "task": task, **(settings or {})},
        extra={"dtype": "float32", "index_dtype": "int32"},
        compute=compute,
        item_bytes=lines_bytes,
        desc="splade",
        config=config,
        source=source,
        **run,
    )


def load_sparse_vectors(folder: str | Path, verify: bool = True) -> SparseRows:
    """Every vector of a finished :func:`embed_sparse_to` folder as CSR rows in input order,
    ``size`` the vocabulary's: what :func:`~bertkit.evaluation.retrieval.exact_sparse_search`
    takes. ``verify``: each shard's sha256 against the manifest's, and its row count against
    its lines (InputError naming the shard)."""
    size = int(require_kind(folder, SPARSE_KIND, "load_vectors")["settings"]["vocab_size"])
    parts = []
    for record, path in shard_paths(folder, verify):
        rows = read_csr(path, size)
        if verify and len(rows) != record.count:
            raise InputError(path, None, f"{len(rows)} rows, the manifest says {record.count}")
        parts.append(rows)
    return join_rows(parts, size)
