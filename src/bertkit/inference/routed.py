"""A dense sentence-transformers ``Router`` folder as Embedders: one per distinct route.

``Router.for_query_document(query_modules=[...], document_modules=[...])`` (an asymmetric
bi-encoder) embeds a query through the query route's Transformer -> Pooling (-> Dense ...)
(-> Normalize) and a document through the document route's
(:class:`~bertkit.interop.sentence_router.DenseRouter` says which modules each task runs).
:func:`load_routes` loads each distinct route's encoder once: routes of the same modules, or
byte-for-byte copies, share one encoder in memory. Every loaded
:class:`~bertkit.inference.embedder.Embedder` knows the others by task
(:meth:`Embedder.for_task`) and the Router's folder (:attr:`Embedder.folder`: its prompts and
similarity).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bertkit.errors import ConfigError
from bertkit.interop.sentence_router import TASKS, DenseRoute, DenseRouter

if TYPE_CHECKING:
    from bertkit.inference.embedder import Embedder

ROUTE_OWN = ("pooling", "normalize", "max_length")
"""What each route declares itself, so that a Router folder takes no override of it."""


def load_routes(router: DenseRouter, load: Callable[..., Embedder], **options: Any) -> Embedder:
    """The Embedder of ``router``'s default route, each route loaded by ``load``
    (:meth:`Embedder.load`) with ``options`` (device, precision, windows, layers, ...) and its
    own pooling, normalisation and length. ConfigError for a pooling, normalize or max_length
    given: the routes declare their own (a query route may pool by [CLS], the document route
    by the mean), and one value forced on both would compute another model."""
    given = [k for k in ROUTE_OWN if options.pop(k, None) is not None]
    if given:
        raise ConfigError(
            f"{router.root}: a Router folder's routes declare their own "
            f"{', '.join(given)}; give none of them"
        )
    loaded: dict[DenseRoute, Embedder] = {}
    for route in dict.fromkeys((router.document, router.query)):  # the document route first
        emb = load(
            route.transformer,
            pooling=route.pooling,
            normalize=route.normalize,
            max_length=route.max_length,
            **options,
        )
        emb.root = router.root
        if route.dense:  # the route's projection after its pooling
            emb.project(route.dense, options.get("allow_pickle", False))
        loaded[route] = emb
    routes = {task: loaded[router.route(task)] for task in TASKS}
    for emb in loaded.values():
        emb.routes = routes
    return routes[router.default_task]
