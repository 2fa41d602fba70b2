"""sentence-transformers ``Router`` folders: which modules each task runs (the one home of it).

A model saved with a ``Router`` (sentence-transformers 5 and 6: ``Router.for_query_document``,
e.g. opensearch-neural-sparse-encoding-doc-v3 or an asymmetric bi-encoder) has one module in
``modules.json``, the Router at the folder's root, and a ``router_config.json`` naming its
routes::

    {"types": {"query_0_SparseStaticEmbedding": "...SparseStaticEmbedding",
               "document_0_MLMTransformer": "...MLMTransformer",
               "document_1_SpladePooling": "...SpladePooling"},
     "structure": {"query": ["query_0_SparseStaticEmbedding"],
                   "document": ["document_0_MLMTransformer", "document_1_SpladePooling"]},
     "parameters": {"default_route": "document", "allow_empty_key": true, "route_mappings": {}}}

Each module lives in the sub-folder of its id. A task's route is resolved as
``Router._resolve_route`` resolves it (:func:`_route_of`); ``encode`` without a task takes
``default_route`` (else the first route). Two kinds are read:

- SPLADE (:class:`SparseRouter`, the document route ends in ``SpladePooling``): the document
  route is a masked-LM transformer -> SpladePooling; the query route a ``SparseStaticEmbedding``
  (one learned weight per vocabulary id: no transformer pass), its own masked-LM transformer ->
  SpladePooling (a two-encoder SPLADE), or the document route's own modules;
- dense (:class:`DenseRouter`): each route ``Transformer -> Pooling (-> Dense ...) (->
  Normalize)``, what bertkit's single sentence-transformers folders hold
  (:mod:`bertkit.interop.sentence_dense`).

A route whose modules are byte-for-byte copies of the other's (sentence-transformers 6.0 saves
a shared module once per route) reads as that route: one encoder in memory. Any other module
(``StaticEmbedding``, ``LayerNorm``, ...) is a CheckpointError naming the folder and the module:
bertkit would otherwise compute something else than the model does.
"""

from __future__ import annotations

import ast
import filecmp
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import CheckpointError, ConfigError
from bertkit.interop.sentence_dense import DenseModule, read_dense
from bertkit.interop.sentence_pooling import includes_prompt, pooling_mode
from bertkit.model.pooling import SpladeSpec

ROUTER_CONFIG = "router_config.json"
TASKS = ("query", "document")
"""The tasks a Router serves (``encode_query`` / ``encode_document``)."""
_TRANSFORMERS = ("MLMTransformer", "Transformer")
_STATIC = "SparseStaticEmbedding"
_SPLADE = "SpladePooling"
_DENSE_TASKS = (None, "feature-extraction")
"""The ``transformer_task`` of a dense route's Transformer (its hidden states)."""


@dataclass(frozen=True)
class SpladeRoute:
    """A masked-LM transformer -> SpladePooling route."""

    transformer: Path
    """The masked-LM transformer's folder (config.json, weights, tokenizer)."""
    spec: SpladeSpec
    """Its SpladePooling and the folder's ``max_active_dims``."""
    max_length: int | None
    """The transformer's ``max_seq_length`` (None: its position limit)."""


@dataclass(frozen=True)
class SparseRouter:
    """What a SPLADE Router folder computes for each task."""

    root: Path
    document: Path
    """The document route's masked-LM transformer folder."""
    spec: SpladeSpec
    """The document route's SpladePooling and the folder's ``max_active_dims``."""
    max_length: int | None
    """The document transformer's ``max_seq_length`` (None: its position limit)."""
    static_query: Path | None
    """The query route's SparseStaticEmbedding folder; None: no static query route."""
    default_task: str = "document"
    """The task ``encode`` without one takes (the Router's ``default_route``)."""
    query_splade: SpladeRoute | None = None
    """The query route's own masked-LM transformer -> SpladePooling (a two-encoder SPLADE);
    None with ``static_query`` None: queries take the document route."""


@dataclass(frozen=True)
class DenseRoute:
    """A Transformer -> Pooling (-> Dense ...) (-> Normalize) route."""

    transformer: Path
    pooling: str
    normalize: bool
    max_length: int | None
    dense: tuple[DenseModule, ...] = ()


@dataclass(frozen=True)
class DenseRouter:
    """What a dense Router folder computes for each task; ``query is document`` when the two
    routes are the same modules (or copies of them): one encoder."""

    root: Path
    query: DenseRoute
    document: DenseRoute
    default_task: str = "document"

    def route(self, task: str | None) -> DenseRoute:
        """The route ``task`` takes (None: :attr:`default_task`'s)."""
        return self.query if (task or self.default_task) == "query" else self.document


@dataclass(frozen=True)
class _Routes:
    """A Router folder's routes for the two tasks (module ids), resolved."""

    root: Path
    kind: dict[str, str]
    """Each module id's class name ("document_0_Transformer": "Transformer")."""
    query: list[str]
    document: list[str]
    default_task: str
    shared: bool
    """Whether the query route is the document route's modules, or byte-for-byte copies."""

    def names(self, ids: list[str]) -> str:
        return f"{' -> '.join(self.kind[m] for m in ids)} ({', '.join(ids)})"


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


def _routes(root: Path, kinds: dict[str, str]) -> _Routes:
    if len(kinds) != 1 or kinds.get("Router") != "":
        others = ", ".join(k for k in kinds if k != "Router") or "none"
        raise CheckpointError(
            f"{root}: modules.json holds the Router and other modules ({others}), or the Router "
            "outside the folder's root; bertkit reads a Router alone (SPLADE routes, or "
            "Transformer -> Pooling routes)"
        )
    config = _read(root / ROUTER_CONFIG)
    types, structure = config.get("types"), config.get("structure")
    params = config.get("parameters") or {}
    if not isinstance(types, dict) or not isinstance(structure, dict) or not structure:
        raise CheckpointError(f"{root / ROUTER_CONFIG}: no 'types' and 'structure' of routes")
    kind = {mid: str(t).rsplit(".", 1)[-1] for mid, t in types.items()}

    def modules(task: str | None) -> list[str]:
        try:
            route = _route_of(task, structure, params)
        except CheckpointError as e:
            raise CheckpointError(f"{root / ROUTER_CONFIG}: {e}") from e
        ids = structure.get(route)
        if not ids or any(m not in kind for m in ids):
            raise CheckpointError(f"{root / ROUTER_CONFIG}: route {route!r} names no known modules")
        return list(ids)

    doc, query, plain = modules("document"), modules("query"), modules(None)
    if plain not in (doc, query):
        raise CheckpointError(f"{root}: the Router's default route is neither query nor document")
    shared = query == doc or _copies(root, query, doc, kind)
    return _Routes(root, kind, query, doc, "document" if plain == doc else "query", shared)


def read_router(
    directory: str | Path,
    kinds: dict[str, str],
    max_active_dims: int | None = None,
    *,
    sparse: bool | None = None,
) -> SparseRouter | DenseRouter:
    """The Router of ``directory`` (``kinds``: its ``modules.json``, holding a Router;
    ``max_active_dims``: its ``config_sentence_transformers.json``'s): SPLADE when its document
    route ends in SpladePooling (or ``sparse`` says so), else dense. Raises CheckpointError for
    a layout bertkit does not compute, naming the module."""
    routes = _routes(Path(directory), kinds)
    if sparse if sparse is not None else routes.kind[routes.document[-1]] == _SPLADE:
        return _sparse(routes, max_active_dims)
    return _dense(routes)


def _sparse(r: _Routes, max_active_dims: int | None) -> SparseRouter:
    document = _splade_route(r, r.document, "document", max_active_dims)
    static = query = None
    if not r.shared:
        if len(r.query) == 1 and r.kind[r.query[0]] == _STATIC:
            static = r.root / r.query[0]
        elif r.kind[r.query[-1]] == _SPLADE:
            query = _splade_route(r, r.query, "query", max_active_dims)
        else:
            raise CheckpointError(
                f"{r.root}: the Router's query route is {r.names(r.query)}; bertkit reads a "
                "SparseStaticEmbedding there, a masked-LM transformer -> SpladePooling, or "
                "the document route's own modules"
            )
    return SparseRouter(
        r.root,
        document.transformer,
        document.spec,
        document.max_length,
        static,
        r.default_task,
        query,
    )


def _splade_route(r: _Routes, ids: list[str], task: str, cap: int | None) -> SpladeRoute:
    names = [r.kind[m] for m in ids]
    if len(ids) != 2 or names[0] not in _TRANSFORMERS or names[1] != _SPLADE:
        raise CheckpointError(
            f"{r.root}: the Router's {task} route is {r.names(ids)}; bertkit reads "
            "MLMTransformer (or Transformer) -> SpladePooling there: a dense "
            "or other Router is not a SPLADE model"
        )
    folder = r.root / ids[0]
    transformer_task = _read(folder / "sentence_bert_config.json").get("transformer_task")
    if names[0] == "Transformer" and transformer_task not in (None, "fill-mask"):
        raise CheckpointError(
            f"{folder}: transformer_task {transformer_task!r}, not fill-mask: no SPLADE vectors"
        )
    return SpladeRoute(folder, _splade_spec(r.root / ids[1], cap), _max_length(folder))


def _dense(r: _Routes) -> DenseRouter:
    document = _dense_route(r, r.document, "document")
    query = document if r.shared else _dense_route(r, r.query, "query")
    return DenseRouter(r.root, query, document, r.default_task)


def _dense_route(r: _Routes, ids: list[str], task: str) -> DenseRoute:
    """Transformer -> Pooling (-> Dense ...) (-> Normalize), a Dropout anywhere after the
    Transformer left out (nothing at inference); any other module refused by name."""
    shape = "Transformer -> Pooling (-> Dense ...) (-> Normalize) routes"
    ids = [m for n, m in enumerate(ids) if n == 0 or r.kind[m] != "Dropout"]
    for n, m in enumerate(ids):
        allowed = (
            ("Transformer",)
            if n == 0
            else ("Pooling",)
            if n == 1
            else ("Dense", "Normalize")
            if n == len(ids) - 1
            else ("Dense",)
        )
        if r.kind[m] not in allowed:
            raise CheckpointError(
                f"{r.root}: the Router's {task} route is {r.names(ids)}; bertkit does not "
                f"compute {r.kind[m]} ({m}) there: it reads {shape}"
            )
    if len(ids) < 2:
        raise CheckpointError(
            f"{r.root}: the Router's {task} route is {r.names(ids)}, without a Pooling: "
            f"bertkit reads {shape}"
        )
    folder = r.root / ids[0]
    transformer_task = _read(folder / "sentence_bert_config.json").get("transformer_task")
    if transformer_task not in _DENSE_TASKS:
        raise CheckpointError(
            f"{folder}: transformer_task {transformer_task!r}: a dense route pools hidden states"
        )
    if not includes_prompt(r.root / ids[1]):
        raise CheckpointError(
            f"{r.root / ids[1]}: the {task} route's pooling leaves prompt tokens out "
            "(include_prompt false), which bertkit does not compute"
        )
    dense = tuple(read_dense(r.root / m) for m in ids[2:] if r.kind[m] == "Dense")
    normalize = r.kind[ids[-1]] == "Normalize" and len(ids) > 2
    return DenseRoute(folder, pooling_mode(r.root / ids[1]), normalize, _max_length(folder), dense)


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
