"""The embedding routes' inputs, as one served model (:class:`~bertkit.serve.engine.Engine`)
reads them: texts behind the folder's prompts, token ids checked against the vocabulary, lengths
against --max-input-tokens (every route's inputs) and the model's positions, the windows the
worker embeds, and the Matryoshka sizes a request may ask for. A mixin of ``Engine``, which holds
the state it reads."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bertkit.inference.sparse_vector import keep_largest
from bertkit.inference.token_ids import TokenIds, TokenIdsError
from bertkit.inference.windowed import Windowed
from bertkit.serve.errors import ServeError

if TYPE_CHECKING:
    from pathlib import Path

    from bertkit.inference import Embedder, FillMasker
    from bertkit.inference.sparse import SparseEmbedder
    from bertkit.serve.metrics import Metrics
    from bertkit.serve.settings import ServeSettings

TRUNCATE_HINT = '; send "truncate": true to cut'
"""What a 413 tells a client of a route with TEI's ``truncate`` field."""


class EmbeddingInputs:
    """Blocking calls (run them from a thread) of the embedding routes; ``Engine`` sets the
    attributes below when it loads its folder."""

    name: str
    settings: ServeSettings
    metrics: Metrics
    embedder: Embedder | None
    masker: FillMasker | None
    sparse: SparseEmbedder | None
    prompts: dict[str, str]
    default_prompt: str | None
    prompt_excluded: Path | None
    """The folder's Pooling config when it leaves prompt tokens out (include_prompt false)."""
    matryoshka: tuple[int, ...]
    max_input_length: int
    """The model's positions (a property of ``Engine``)."""

    def _check_lengths(
        self, lengths: Sequence[int], what: str = "inputs", cut: str = TRUNCATE_HINT
    ) -> None:
        """413 for an input over ``max_input_tokens`` (shorter ones over the model's limit are
        read in windows); ``lengths``: each input's tokens, from the tokenization it runs on;
        ``cut``: how the route's client can cut one, which the answer tells ("" where it cannot:
        OpenAI's shape has no such field)."""
        limit = self.settings.max_input_tokens
        for i, n in enumerate(lengths):
            if n > limit:
                raise ServeError(
                    413,
                    f"Input validation error: `{what}` must have at most {limit} tokens "
                    f"(the server's --max-input-tokens; texts longer than the model's "
                    f"{self.max_input_length} are read in windows{cut}). Input {i} has {n}",
                )

    def _encoded(self, inputs: Sequence[str | TokenIds], emb: Embedder | None = None) -> list[Any]:
        """The texts tokenized, the token ids checked (:meth:`Embedder.encode`; ``emb``: a
        route's Embedder, default the model's): 422 for an empty id list or an id outside the
        vocabulary, naming the input."""
        emb = emb or self.embedder
        assert emb is not None
        try:
            return emb.encode(inputs)
        except TokenIdsError as e:
            raise ServeError(422, f"input {e.index}: {e.message}") from None

    def encode_for_embedding(
        self, inputs: Sequence[str | TokenIds], truncate: bool | None, emb: Embedder | None = None
    ) -> Windowed:
        """The inputs (texts and token ids) as the windows the worker embeds: 413 for an input
        over --max-input-tokens, or for token ids over the model's length (ids are read as they
        are, not in windows), unless ``truncate``. ``truncate`` None: the route has no such
        field (OpenAI's shape): read as False, and no 413 tells the client to send it. ``emb``:
        a Router's route (:meth:`Embedder.for_task`), default the model's Embedder."""
        emb = emb or self.embedder
        assert emb is not None
        t0 = time.perf_counter()
        encodings = self._encoded(inputs, emb)
        self.metrics.tokenization.observe(time.perf_counter() - t0)
        if not truncate:
            self._check_lengths(
                [len(e.input_ids) for e in encodings],
                cut=TRUNCATE_HINT if truncate is not None else "",
            )
        for e in encodings:
            self.metrics.input_length.observe(len(e.input_ids))
        try:
            return emb.window(encodings, bool(truncate))
        except TokenIdsError as e:
            cut = '; send "truncate": true to cut them' if truncate is not None else ""
            raise ServeError(
                413, f"Input validation error: input {e.index} has {e.message}{cut}"
            ) from None

    def prompted(
        self, inputs: Sequence[str | TokenIds], prompt_name: str | None
    ) -> list[str | TokenIds]:
        """The texts of ``inputs`` behind the named prompt of the folder
        (``config_sentence_transformers.json``), or its default prompt when none is named, as
        sentence-transformers does; 422 for a name the folder does not have. Token ids are the
        model's input as they are: the default prompt leaves them so, a named one is a 422."""
        named = prompt_name is not None
        if prompt_name is None:
            prompt_name = self.default_prompt
            if prompt_name is None:
                return list(inputs)
        if prompt_name not in self.prompts:
            known = ", ".join(sorted(self.prompts)) or "none"
            raise ServeError(
                422, f"prompt_name {prompt_name!r} is not one of this model's prompts ({known})"
            )
        ids = next((i for i, x in enumerate(inputs) if isinstance(x, TokenIds)), None)
        if named and ids is not None:
            raise ServeError(
                422,
                f"prompt_name cannot be used with token-id inputs (input {ids}): the ids are the "
                "model's input as they are; put the prompt's tokens in them",
            )
        prompt = self.prompts[prompt_name]
        if prompt and self.prompt_excluded is not None:
            raise ServeError(
                422,
                f"prompt_name {prompt_name!r}: this model's pooling leaves prompt tokens out "
                "(include_prompt false), which bertkit does not compute; send no prompt_name",
            )
        return [prompt + x if isinstance(x, str) else x for x in inputs]

    def check_dimensions(self, dimensions: int | None) -> None:
        """422 for ``dimensions`` past the vector size, or for a model not trained with
        Matryoshka unless the server was started with --any-dimensions."""
        assert self.embedder is not None
        if dimensions is None or dimensions == self.embedder.dim:
            return
        if dimensions > self.embedder.dim:
            raise ServeError(422, f"dimensions {dimensions} > the model's {self.embedder.dim}")
        if not self.matryoshka and not self.settings.any_dimensions:
            raise ServeError(
                422,
                f"model {self.name!r} was not trained with Matryoshka (its bertkit_embedding.json "
                "names no sizes), so its cut vectors are not embeddings; start the server with "
                "--any-dimensions to cut anyway",
            )

    def fitting(
        self, inputs: Sequence[str | TokenIds], truncate: bool, emb: Embedder | None = None
    ) -> list[Any]:
        """Each input (a text or token ids) encoded as one window of at most the model's length
        (cut with ``truncate``, else a 413 for a longer one): the inputs of the per-token
        routes. ``emb``: a route's Embedder, default the model's."""
        emb = emb or self.embedder
        assert emb is not None
        encodings = self._encoded(inputs, emb)
        limit = emb.max_length
        long = next((i for i, e in enumerate(encodings) if len(e.input_ids) > limit), None)
        if long is not None and not truncate:
            raise ServeError(
                413,
                f"Input validation error: `inputs` must have at most {limit} tokens here "
                f'(one vector per token: no windows; send "truncate": true to cut). Input {long} '
                f"has {len(encodings[long].input_ids)}",
            )
        return emb.window(encodings, truncate=True).inputs

    def embed_all(self, inputs: Sequence[str | TokenIds], truncate: bool) -> list[np.ndarray]:
        assert self.embedder is not None
        return self.embedder.token_vectors(self.fitting(inputs, truncate))

    def embed_sparse(
        self, inputs: Sequence[str | TokenIds], truncate: bool, task: str | None = None
    ) -> list[list[dict[str, Any]]]:
        """TEI's ``/embed_sparse``: each input's SPLADE vector (one window, as the other
        per-token routes read it) as ``[{"index", "value"}]``, indices ascending. ``task``
        ("query", "document"; None: the folder's default, document) picks a SPLADE Router's
        route: a query there is its tokens' static weights (no transformer pass), or its own
        encoder's vector."""
        sparse = self.sparse
        assert sparse is not None
        route = sparse.route(task)
        if route is None or isinstance(route, type(sparse)):
            model = route or sparse  # the query route's own encoder, or this one
            windows = self.fitting(inputs, truncate, model.embedder)
            found = model.combine(model.window_vectors(windows), range(len(windows)), len(windows))
        else:
            self._encoded(inputs)  # the checks every route's inputs get
            found, counts = route.embed(inputs)
            if counts.truncated and not truncate:
                raise ServeError(
                    413,
                    f"Input validation error: `inputs` must have at most {route.max_length} "
                    f"tokens for the query route{TRUNCATE_HINT}",
                )
            found = [keep_largest(v, sparse.spec.max_active_dims) for v in found]
        return [
            [{"index": int(i), "value": float(v)} for i, v in zip(x.indices, x.values, strict=True)]
            for x in found
        ]
