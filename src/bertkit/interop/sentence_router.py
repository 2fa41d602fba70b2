"""sentence-transformers ``Router`` folders that bertkit serves: "inference-free" SPLADE.

A ``SparseEncoder`` saved with a ``Router`` (sentence-transformers 5 and 6, e.g.
opensearch-neural-sparse-encoding-doc-v3) has one module in ``modules.json``, the Router at the
folder's root, and a ``router_config.json`` naming its routes::

    {"types": {"query_0_SparseStaticEmbedding": "...SparseStaticEmbedding",
               "document_0_MLMTransformer": "...MLMTransformer",
               "document_1_SpladePooling": "...SpladePooling"},
     "structure": {"query": ["query_0_SparseStaticEmbedding"],
                   "document": ["document_0_MLMTransformer", "document_1_SpladePooling"]},
     "parameters": {"default_route": "document", "allow_empty_key": true, "route_mappings": {}}}

Each module lives in the sub-folder of its id. The "document" route is SPLADE (a masked-LM
transformer, then ``SpladePooling``); the "query" route is either a ``SparseStaticEmbedding``
(one learned weight per vocabulary id: no transformer pass) or the document route's own modules
(or byte-for-byte copies of them, as sentence-transformers 6.0 saves shared modules).
``encode`` without a task takes ``default_route`` (else the first route), as the Router does.
Any other layout (a dense Router, other module types) is a CheckpointError naming the folder and
the module: bertkit would otherwise compute something else than the model does.
"""

from __future__ import annotations

import ast
import filecmp
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import CheckpointError, ConfigError
from bertkit.model.pooling import SpladeSpec

ROUTER_CONFIG = "router_config.json"
TASKS = ("query", "document")
"""The tasks a SPLADE Router serves (``encode_query`` / ``encode_document``)."""
_TRANSFORMERS = ("MLMTransformer", "Transformer")
_STATIC = "SparseStaticEmbedding"
_POOLING = "SpladePooling"


@dataclass(frozen=True)
class SparseRouter:
    """What a SPLADE Router folder computes for each task."""

    root: Path
    document: Path
    """The masked-LM transformer's folder (config.json, weights, tokenizer)."""
    spec: SpladeSpec
    """The document route's SpladePooling and the folder's ``max_active_dims``."""
    max_length: int | None
    """The transformer's ``max_seq_length`` (None: its position limit)."""
    static_query: Path | None
    """The query route's SparseStaticEmbedding folder; None: queries take the document route."""
    default_task: str = "document"
    """The task ``encode`` without one takes (the Router's ``default_route``)."""


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def _route_of(task: str | None, structure: dict, params: dict) -> str:
    """The route ``Router._resolve_route`` picks for ``task`` and text input: a route mapping
    (exact, task only, text only, catch-all), then the route named as the task, then the
    default route (else the first, with ``allow_empty_key``)."""
    mappings = {}
    for key, route in (params.get("route_mappings") or {}).items():
        try:
            mappings[ast.literal_eval(key)] = route
        except (ValueError, SyntaxError):
            continue  # sentence-transformers skips such a key too
    for key in ((task, "text"), (task, None), (None, "text"), (None, None)):
        if key in mappings:
            return mappings[key]
    if task in structure:
        return task
    default = params.get("default_route")
    if default is None and params.get("allow_empty_key", True):
        default = next(iter(structure), None)
    if default is None:
        raise CheckpointError(f"no route for task {task!r} (routes: {', '.join(structure)})")
    return default


def sparse_router(
    directory: str | Path, kinds: dict[str, str], max_active_dims: int | None = None
) -> SparseRouter:
    """The SPLADE Router of ``directory`` (``kinds``: its ``modules.json``, holding a Router;
    ``max_active_dims``: its ``config_sentence_transformers.json``'s). Raises CheckpointError
    for a layout bertkit does not compute, naming the module."""
    root = Path(directory)
    if len(kinds) != 1 or kinds.get("Router") != "":
        others = ", ".join(k for k in kinds if k != "Router") or "none"
        raise CheckpointError(
            f"{root}: modules.json holds the Router and other modules ({others}), or the Router "
            "outside the folder's root; bertkit reads a SparseEncoder Router alone (query: "
            "SparseStaticEmbedding or the document modules, document: a masked-LM transformer "
            "-> SpladePooling)"
        )
    config = _read(root / ROUTER_CONFIG)
    types, structure = config.get("types"), config.get("structure")
    params = config.get("parameters") or {}
    if not isinstance(types, dict) or not isinstance(structure, dict) or not structure:
        raise CheckpointError(f"{root / ROUTER_CONFIG}: no 'types' and 'structure' of routes")
    kind = {mid: str(t).rsplit(".", 1)[-1] for mid, t in types.items()}

    def modules(task: str) -> list[str]:
        try:
            route = _route_of(task, structure, params)
        except CheckpointError as e:
            raise CheckpointError(f"{root / ROUTER_CONFIG}: {e}") from e
        ids = structure.get(route)
        if not ids or any(m not in kind for m in ids):
            raise CheckpointError(f"{root / ROUTER_CONFIG}: route {route!r} names no known modules")
        return list(ids)

    doc = modules("document")
    names = [kind[m] for m in doc]
    if len(doc) != 2 or names[0] not in _TRANSFORMERS or names[1] != _POOLING:
        raise CheckpointError(
            f"{root}: the Router's document route is {' -> '.join(names)} ({', '.join(doc)}); "
            "bertkit reads MLMTransformer (or Transformer) -> SpladePooling there: a dense "
            "or other Router is not a SPLADE model"
        )
    task = _read(root / doc[0] / "sentence_bert_config.json").get("transformer_task")
    if names[0] == "Transformer" and task not in (None, "fill-mask"):
        raise CheckpointError(
            f"{root / doc[0]}: transformer_task {task!r}, not fill-mask: no SPLADE vectors"
        )
    query = modules("query")
    static = None
    if query != doc and not _copies(root, query, doc, kind):
        if len(query) != 1 or kind[query[0]] != _STATIC:
            raise CheckpointError(
                f"{root}: the Router's query route is "
                f"{' -> '.join(kind[m] for m in query)} ({', '.join(query)}); bertkit reads "
                "a SparseStaticEmbedding there, or the document route's own modules"
            )
        static = root / query[0]
    plain = structure.get(_route_of(None, structure, params))
    if plain not in (doc, query):
        raise CheckpointError(f"{root}: the Router's default route is neither query nor document")
    default = "document" if plain == doc else "query"
    return SparseRouter(
        root,
        root / doc[0],
        _splade_spec(root / doc[1], max_active_dims),
        _max_length(root / doc[0]),
        static,
        default,
    )


def _copies(root: Path, a: list[str], b: list[str], kind: dict[str, str]) -> bool:
    """Whether two routes' modules are copies of one another: the same kinds and the same files,
    byte for byte (sentence-transformers 6.0 saves a module that two routes share once per
    route, where 6.3 saves it once)."""
    if [kind[m] for m in a] != [kind[m] for m in b]:
        return False
    for x, y in zip(a, b, strict=True):
        files = sorted(p.relative_to(root / x) for p in (root / x).rglob("*") if p.is_file())
        theirs = sorted(p.relative_to(root / y) for p in (root / y).rglob("*") if p.is_file())
        if files != theirs:
            return False
        if not all(filecmp.cmp(root / x / f, root / y / f, shallow=False) for f in files):
            return False
    return True


def _splade_spec(pooling: Path, max_active_dims: int | None) -> SpladeSpec:
    cfg = _read(pooling / "config.json")
    try:
        return SpladeSpec(
            cfg.get("pooling_strategy", "max"),
            cfg.get("activation_function", "relu"),
            max_active_dims,
        )
    except ConfigError as e:
        raise CheckpointError(f"{pooling}: {e}") from e


def _max_length(folder: Path) -> int | None:
    """``sentence_bert_config.json``'s ``max_seq_length`` (sentence-transformers 5), else the
    tokenizer's ``model_max_length`` (where 6 keeps it), else None."""
    from bertkit.tokenizer.conventions import LARGE_INTEGER, read_config

    limit = _read(folder / "sentence_bert_config.json").get("max_seq_length")
    if limit is None:
        limit = read_config(folder).get("model_max_length")
    return int(limit) if limit is not None and limit <= LARGE_INTEGER else None
