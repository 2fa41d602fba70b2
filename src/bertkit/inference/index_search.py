"""Search a corpus already embedded into a folder (``bertkit embed --output DIR/``): the query
side of that folder's vectors (``bertkit search``).

:meth:`EmbeddedIndex.open` reads the folder's manifest (:mod:`bertkit.inference.sharded`) and
refuses one that is unfinished. :func:`query_encoder` loads the model the folder names (or
another one whose vectors have the same size) with the folder's own settings: pooling,
normalisation, max length, windows, layers, precision and batch size for dense vectors; the
SPLADE spec for sparse ones. :func:`search_index` embeds the queries as sentence-transformers'
``encode_query`` does (the folder's "query" prompt; a SPLADE Router folder's query route) and
searches exactly:

- dense (``vectors-*.npy``): :func:`~bertkit.evaluation.retrieval.exact_search_blocks` over the
  shards, each memory-mapped, so the index is read shard by shard and never held whole;
- quantized dense (``bertkit embed --quantize``: int8/uint8 codes or packed bits): candidates by
  the quantized query, rescored with the float one, as sentence-transformers'
  ``semantic_search_usearch`` (:mod:`bertkit.inference.quantize`); shards memory-mapped too;
- sparse (``sparse-*.npz``): :func:`~bertkit.evaluation.retrieval.exact_sparse_search` over the
  joined CSR rows (compact: about 8 bytes per non-zero entry).

The similarity is the model folder's ``similarity_fn_name``, as ``bertkit evaluate`` ranks
(:mod:`bertkit.inference.retrieval`): dense cosine unless it says "dot", "euclidean" or
"manhattan" (:mod:`bertkit.evaluation.dense_scoring`; a quantized index is searched by its
codes and rescored by the dot product whatever it says), sparse the dot product unless it says
"cosine". Ties go to the lower line. :func:`line_texts` gives hits their text
from the embedded file when it is still there with the size the manifest recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import ConfigError, InputError
from bertkit.evaluation.dense_scoring import as_given, dense_scoring
from bertkit.evaluation.retrieval import (
    exact_search_blocks,
    exact_sparse_search,
    rerank_order,
)
from bertkit.inference.corpus import DENSE_KIND
from bertkit.inference.embedder import Embedder, LayerSpec
from bertkit.inference.model_fingerprint import model_fingerprint
from bertkit.inference.quantize import RESCORE_MULTIPLIER, Quantization, search_quantized
from bertkit.inference.retrieval import relevance
from bertkit.inference.sharded import (
    MANIFEST,
    file_size,
    read_manifest,
    shard_paths,
)
from bertkit.inference.sparse import SparseEmbedder, as_rows
from bertkit.inference.sparse_corpus import SPARSE_KIND, load_sparse_vectors
from bertkit.interop.sentence_folder import router_of, similarity_of
from bertkit.interop.sentence_prompts import task_prompt
from bertkit.interop.sentence_router import DenseRouter
from bertkit.io import read_text_lines
from bertkit.model.pooling import SpladeSpec
from bertkit.progress import progress
from bertkit.tasks.windows import WindowConfig

TOP_K = 10
"""Hits per query ``bertkit search`` writes by default."""


@dataclass(frozen=True)
class EmbeddedIndex:
    """A finished folder of ``bertkit embed`` vectors and its manifest."""

    folder: Path
    manifest: dict[str, Any]

    @classmethod
    def open(cls, folder: str | Path) -> EmbeddedIndex:
        """The folder's manifest; InputError when it is not a finished dense or SPLADE folder
        (an interrupted ``bertkit embed`` is resumed by running it again)."""
        manifest = read_manifest(folder)
        if manifest.get("kind") not in (DENSE_KIND, SPARSE_KIND):
            raise InputError(
                folder,
                None,
                f"holds {manifest.get('kind')!r} output; expected vectors of `bertkit embed`",
            )
        if not manifest.get("complete"):
            raise InputError(
                Path(folder) / MANIFEST,
                None,
                "the folder is not finished (complete: false); run the same `bertkit embed` "
                "again to resume it before searching",
            )
        return cls(Path(folder), manifest)

    @property
    def sparse(self) -> bool:
        return self.manifest["kind"] == SPARSE_KIND

    @property
    def settings(self) -> dict[str, Any]:
        return self.manifest.get("settings", {})

    @property
    def lines(self) -> int:
        """Vectors in the folder: one per line of the embedded input."""
        return sum(s["lines"][1] - s["lines"][0] + 1 for s in self.manifest.get("shards", []))

    @property
    def model(self) -> str | None:
        """The model folder the vectors were made with, as the manifest names it."""
        return self.manifest.get("model", {}).get("path")

    def source(self) -> Path | None:
        """The file the lines were embedded from, while it still has the size the manifest
        recorded; None once it is gone or changed, or for stdin."""
        inputs = self.manifest.get("inputs") or [{}]
        path, size = inputs[0].get("path"), inputs[0].get("size")
        if path in (None, "-") or size is None or file_size(path) != size:
            return None
        return Path(path)

    def route_warning(self) -> str | None:
        """A one-line warning when the lines went through a ``Router`` folder's query route
        (``bertkit embed --task query``, recorded in the settings): its queries are then compared
        with query vectors, where the folder's documents belong on its document route."""
        if self.settings.get("task") != "query" or self.model is None:
            return None
        if router_of(self.model) is None:  # one encoder: the task chose a prompt, not a route
            return None
        return (
            f"warning: {self.folder} was embedded with --task query, through the query route of "
            f"the Router {self.model}; documents belong on its document route (embed them again "
            "with --task document)"
        )

    @property
    def quantization(self) -> Quantization | None:
        """How a dense folder's vectors are stored when ``bertkit embed --quantize`` wrote it."""
        recorded = self.manifest.get("quantization")
        return Quantization.from_manifest(recorded) if recorded else None

    @property
    def width(self) -> int:
        """The vectors' size: the hidden size (dense) or the vocabulary's (SPLADE)."""
        key = self.settings.get("vocab_size") if self.sparse else self.manifest.get("dim")
        return int(key or 0)


def query_encoder(
    index: EmbeddedIndex,
    model: str | Path | None = None,
    *,
    device: str | None = None,
    batch_size: int | None = None,
    allow_pickle: bool = False,
) -> Embedder | SparseEmbedder:
    """The encoder of ``index``'s queries: ``model`` (default: the folder the index names)
    loaded with the index's settings, so that a query is embedded as its lines were;
    ``batch_size`` None: the index's. ConfigError in one line when its vectors cannot be compared
    with the index's (another hidden or vocabulary size), or when ``model`` is None and the
    folder the index names has changed since (a model retrained in place: its queries would be
    compared with another model's vectors)."""
    s = index.settings
    if model is None:
        _check_unchanged(index)
    model = model if model is not None else index.model
    if model is None:
        raise ConfigError(f"{index.folder}: the manifest names no model folder; pass --model")
    common = {
        "max_length": s.get("max_length"),
        "device": device,
        "precision": s.get("precision", "fp32"),
        "batch_size": batch_size or s.get("batch_size") or 32,
        "allow_pickle": allow_pickle,
        "split_special_tokens": bool(s.get("split_special_tokens", False)),
        # embedder_settings recorded the windows field by field (a SPLADE folder less its
        # window pooling): read back every field that is there
        "windows": WindowConfig(**{k: s[k] for k in WindowConfig.__dataclass_fields__ if k in s}),
    }
    layers = LayerSpec(tuple(s.get("layers") or ()), s.get("layer_combine", "concat"))
    _check_width(index, model, _declared_width(model, index.sparse, layers))  # before loading
    encoder: Embedder | SparseEmbedder
    if index.sparse:
        spec = {k: s[k] for k in SpladeSpec.__dataclass_fields__ if k in s}
        encoder = SparseEmbedder.load(model, **spec, **common)
        _check_width(index, model, encoder.vocab_size)
    else:
        own = {"pooling": s.get("pooling"), "normalize": s.get("normalize")}
        if isinstance(router_of(model), DenseRouter):  # each route's own, queries its query's
            own, common["max_length"] = {}, None
        encoder = Embedder.load(model, **own, layers=layers, **common).for_task("query")
        _check_width(index, model, encoder.dim)
    return encoder


def _check_unchanged(index: EmbeddedIndex) -> None:
    """ConfigError when the model folder the index names no longer has its fingerprint."""
    recorded = index.manifest.get("model", {}).get("sha256")
    if index.model is None or recorded is None or not Path(index.model).is_dir():
        return  # nothing to compare: loading names a missing folder
    now = model_fingerprint(index.model)["sha256"]
    if now != recorded:
        raise ConfigError(
            f"{index.model}: the model's files changed since {index.folder} was embedded with "
            f"it (sha256 {recorded[:12]}, now {now[:12]}); embed the corpus again, or pass "
            "--model to query with the folder as it is now"
        )


def _declared_width(model: str | Path, sparse: bool, layers: LayerSpec) -> int | None:
    """The vectors' size a model folder's config.json declares (its vocabulary for SPLADE, its
    hidden size through ``layers`` for dense), None without one (a Router folder, a Hub id):
    a model of another size is refused before its settings (max length) are checked."""
    path = Path(model) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    size = config.get("vocab_size" if sparse else "hidden_size")
    if not isinstance(size, int):
        return None
    return size if sparse else layers.width(size)


def _check_width(index: EmbeddedIndex, model: str | Path, width: int | None) -> None:
    if width is not None and width != index.width:
        what = "vocabulary" if index.sparse else "vector"
        raise ConfigError(
            f"{model}: its {what} size {width} differs from the index's {index.width} "
            f"({index.folder} was embedded with {index.model}); pass that model as --model"
        )


def search_index(
    index: EmbeddedIndex,
    encoder: Embedder | SparseEmbedder,
    queries: Sequence[str],
    k: int,
    *,
    verify: bool = True,
    show_progress: bool | None = None,
    rescore_multiplier: int = RESCORE_MULTIPLIER,
) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` lines of ``index`` for each query text: (lines (Q, k'), scores (Q, k')),
    k' = min(k, lines), lines 1-based, best first, ties by the lower line. ``verify``: each
    shard's sha256 against the manifest's first (InputError naming a modified shard).
    A quantized folder (``bertkit embed --quantize``): ``k * rescore_multiplier`` candidates
    by the quantized query, rescored with the float one
    (:func:`~bertkit.inference.quantize.search_quantized`)."""
    if k < 1:
        raise ConfigError(f"top k must be at least 1, got {k}")
    folder = _folder(encoder)
    similarity = similarity_of(folder) if folder else None
    if isinstance(encoder, SparseEmbedder):
        found = as_rows(encoder.encode(list(queries), "query"), index.width)
        docs = load_sparse_vectors(index.folder, verify)
        if similarity == "cosine":
            found, docs = found.unit(), docs.unit()
        ids, scores = exact_sparse_search(found, docs, k)
        return ids + 1, scores
    prompt = task_prompt(folder, "query") if folder else ""
    vectors = encoder.for_task("query").embed([prompt + q for q in queries])[0]
    if index.quantization is not None:  # the float query as embedded, as sentence-transformers
        shards = list(_dense_blocks(index, verify, as_given, show_progress))
        ids, scores = search_quantized(vectors, shards, index.quantization, k, rescore_multiplier)
        return ids + 1, scores
    prepare, score = dense_scoring(similarity)
    blocks = _dense_blocks(index, verify, prepare, show_progress)
    ids, scores = exact_search_blocks(prepare(vectors), blocks, k, score=score)
    return ids + 1, scores


def _folder(encoder: Embedder | SparseEmbedder) -> Path | None:
    """The folder whose prompts and similarity apply (a Router's own folder)."""
    return Path(encoder.folder) if encoder.folder is not None else None


def _dense_blocks(
    index: EmbeddedIndex,
    verify: bool,
    prepare: Callable[[np.ndarray], np.ndarray],
    show_progress: bool | None,
) -> Iterator[np.ndarray]:
    """Each shard memory-mapped and ``prepare``d (unit rows for cosine: one shard's copy at a
    time), checked to follow the previous one line by line (a vector's position is its line -
    1)."""
    shards = shard_paths(index.folder, verify)
    bar = progress(total=index.lines, desc="search", unit="line", enabled=show_progress)
    expected = 1
    for record, path in shards:
        block = np.load(path, mmap_mode="r", allow_pickle=False)
        if record.lines[0] != expected or block.shape[0] != record.count:
            raise InputError(
                path,
                None,
                f"holds {block.shape[0]} rows for lines {record.lines}; "
                f"expected the lines from {expected} on, one row each",
            )
        expected = record.lines[1] + 1
        yield prepare(block)
        bar.update(record.count)
    bar.close()


def line_texts(
    index: EmbeddedIndex, lines: Collection[int], errors: str | None = None
) -> dict[int, str] | None:
    """The text of each of ``lines`` (1-based) in the file the index was embedded from, read
    once and keeping only those lines; None when that file is gone, is stdin, or no longer has
    the size the manifest recorded (its lines may have moved). ``errors``: how undecodable
    bytes are read (default: as the index was embedded)."""
    path = index.source()
    if path is None:
        return None
    wanted = set(lines)
    errors = errors or index.settings.get("encoding_errors", "strict")
    out = {}
    for n, line in read_text_lines(path, errors):
        if n in wanted:
            out[n] = line
            if len(out) == len(wanted):
                break
    return out


def rerank_hits(
    reranker: Any,
    queries: Sequence[str],
    lines: np.ndarray,
    texts: dict[int, str],
    top_k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's first ``top_k`` hits reordered by the cross-encoder ``reranker``
    (:func:`~bertkit.inference.retrieval.relevance`: its scores as ``CrossEncoder.predict``
    gives them; ties keep the first-stage order); -> (order (Q, k') of positions into each
    row of ``lines``, reranker scores (Q, k'), NaN past ``top_k``)."""
    head = min(top_k, lines.shape[1])
    pairs = [(q, texts[int(n)]) for q, row in zip(queries, lines) for n in row[:head]]
    scores = relevance(reranker, pairs).reshape(len(queries), head)
    order = np.tile(np.arange(lines.shape[1]), (len(queries), 1))
    out = np.full(lines.shape, np.nan, dtype=np.float32)
    for r, row in enumerate(scores):
        best = rerank_order(row.tolist())
        order[r, :head] = best
        out[r, :head] = row[best]
    return order, out
