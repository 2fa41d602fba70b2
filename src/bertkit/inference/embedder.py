"""Sentence vectors from any BERT folder: length-sorted batches, pooling, precision, progress.

Pooling and normalisation come from the folder when it is a sentence-transformers model
(``modules.json`` with a ``Pooling`` module and its ``config.json``; ``Dense`` modules, LaBSE's
projection, applied to each window's pooled vector; a ``Normalize`` module; the
``max_seq_length`` and ``do_lower_case`` of ``sentence_bert_config.json``), so
``Embedder.load(minilm)`` gives the vectors sentence-transformers gives. Otherwise mean pooling
without normalisation, up to the model's position limit. Explicit arguments win over the folder.
:meth:`Embedder.save` writes a folder that sentence-transformers loads to the same vectors (the
format: :mod:`bertkit.interop.sentence_folder`).

Long texts are read in windows (:mod:`bertkit.tasks.windows`, ``--doc-stride`` as everywhere):
each window is pooled, and the window vectors of a text are combined by a mean weighted by the
window's tokens (a text of 300 tokens read as windows of 256 and 128 weighs them 2:1, as the
mean over its tokens would), or an element-wise max (``window_pooling="max"``, which with max
pooling equals max pooling over all tokens); normalisation comes after. ``truncate`` reads only
the first window, as sentence-transformers does.

An input may also be given as token ids (:class:`TokenIds`, what text-embeddings-inference and
OpenAI's embeddings API accept): they are the model's input as they are, [CLS] and [SEP] only
where the caller put them, token types 0, one window (``truncate`` keeps the first
:attr:`Embedder.max_length` ids; otherwise a longer list is a :class:`TokenIdsError`).
``TokenIds(tokenizer.encode(text).input_ids)`` embeds as ``text`` does.

Feature-based use (paper section 5.3): ``layers`` picks hidden layers (-1 the last, 0 the
embeddings) joined by ``layer_combine`` (concat, sum, mean) instead of the last layer alone;
:meth:`Embedder.token_features` gives one vector per word piece with its character offsets, each
taken from the window where that piece has the most context.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import precision as P
from bertkit.errors import ConfigError
from bertkit.evaluation.retrieval import unit_rows
from bertkit.inference.embedder_save import save_embedder
from bertkit.inference.loading import load_for_inference
from bertkit.inference.token_features import TokenFeatures, token_features
from bertkit.inference.token_ids import TokenIds, TokenIdsError, outside_vocabulary
from bertkit.inference.windowed import Windowed
from bertkit.interop.sentence_dense import PostPooling, dense_head, dense_width
from bertkit.interop.sentence_folder import (
    PoolingSpec,
    router_of,
    sentence_transformers_spec,
)
from bertkit.interop.sentence_router import DenseRouter
from bertkit.model.batching import collate, length_batches
from bertkit.model.pooling import POOLINGS, LayerSpec, combine_layers, pool
from bertkit.progress import progress
from bertkit.tasks.features import EncodedInput
from bertkit.tasks.windows import WindowConfig, WindowCounts, aggregate, slices
from bertkit.tokenizer.encoding import Encoding
from bertkit.tokenizer.protocol import Tokenizer

BATCH_SIZE = 32
"""Windows per forward pass, batched by length (the default of ``load`` and of the CLI)."""


@dataclass
class Embedder:
    """One vector per text. Build with :meth:`load`; call with a list of texts."""

    model: torch.nn.Module
    tokenizer: Tokenizer
    spec: PoolingSpec
    precision: str = "fp32"
    batch_size: int = BATCH_SIZE
    show_progress: bool | None = None
    windows: WindowConfig = field(default_factory=WindowConfig)
    layers: LayerSpec = field(default_factory=LayerSpec)
    source: Path | None = None
    """The folder :meth:`load` read (a Router's: the route's transformer folder)."""
    root: Path | None = None
    """A dense Router folder this is a route of (:mod:`bertkit.inference.routed`)."""
    routes: dict[str, Embedder] = field(default_factory=dict, repr=False, compare=False)
    """A Router's Embedder of each task (``for_task``), this one among them."""
    head: torch.nn.Module | None = field(default=None, repr=False, compare=False)
    """The folder's Dense modules (``spec.dense``) as layers, applied to each pooled window."""

    @classmethod
    def load(
        cls,
        directory: str | Path,
        *,
        pooling: str | None = None,
        normalize: bool | None = None,
        max_length: int | None = None,
        device: str | None = None,
        precision: str = P.DEFAULT,
        batch_size: int = BATCH_SIZE,
        allow_pickle: bool = False,
        split_special_tokens: bool = False,
        model: torch.nn.Module | None = None,
        windows: WindowConfig | None = None,
        layers: LayerSpec | None = None,
    ) -> Embedder:
        """``model``: an encoder already loaded from ``directory`` (e.g. a fill-mask model's
        ``bert``), used instead of loading the weights a second time. ``directory``: a folder
        or a Hub id (:func:`bertkit.hub.resolve`); a dense Router folder gives its default
        route's Embedder (:func:`~bertkit.inference.routed.load_routes`)."""
        router = router_of(directory) if model is None else None
        if isinstance(router, DenseRouter):
            from bertkit.inference.routed import load_routes

            return load_routes(
                router,
                cls.load,
                pooling=pooling,
                normalize=normalize,
                max_length=max_length,
                device=device,
                precision=precision,
                batch_size=batch_size,
                allow_pickle=allow_pickle,
                split_special_tokens=split_special_tokens,
                windows=windows,
                layers=layers,
            )
        if pooling is not None and pooling not in POOLINGS:
            raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {batch_size}")
        loaded = load_for_inference(
            directory,
            "BertModel",
            device=device,
            precision=precision,
            allow_pickle=allow_pickle,
            split_special_tokens=split_special_tokens,
            model=model,
            warn_unused=False,
        )
        limit = loaded.model.config.max_position_embeddings
        if max_length is not None and not 2 <= max_length <= limit:
            raise ConfigError(
                f"max length {max_length} is outside 2..{limit} (the model's position limit)"
            )
        layers = layers or LayerSpec()
        layers.check(int(loaded.model.config.num_hidden_layers))
        base = sentence_transformers_spec(loaded.directory) or PoolingSpec()
        spec = PoolingSpec(
            pooling if pooling is not None else base.pooling,
            normalize if normalize is not None else base.normalize,
            min(max_length or base.max_length or limit, limit),
            lowercase=base.lowercase,
        )
        embedder = cls(
            loaded.model,
            loaded.tokenizer.lowercased() if spec.lowercase else loaded.tokenizer,
            spec,
            loaded.placement.precision,
            batch_size,
            windows=windows or WindowConfig(),
            layers=layers,
            source=loaded.directory,
        )
        return embedder.project(base.dense, allow_pickle) if base.dense else embedder

    def project(self, dense: tuple[PostPooling, ...], allow_pickle: bool = False) -> Embedder:
        """This Embedder, applying Dense modules to each pooled window from now on (fp32)."""
        head = dense_head(dense, self.token_dim, allow_pickle)
        self.spec = replace(self.spec, dense=dense)
        self.head = head.to(next(self.model.parameters()).device)
        return self

    @property
    def folder(self) -> Path | None:
        """The model's folder (its prompts, similarity, fingerprint): the Router's, else
        :attr:`source`."""
        return self.root or self.source

    def for_task(self, task: str | None) -> Embedder:
        """A Router folder's Embedder for ``task`` ("query", "document"; None: this one), as
        ``encode_query`` / ``encode_document`` route; any other folder's: this one."""
        return self.routes.get(task, self) if task else self

    @property
    def dim(self) -> int:
        """The size of a text's vector (after the Dense modules, when the folder has some)."""
        return dense_width(self.spec.dense, self.token_dim)

    @property
    def token_dim(self) -> int:
        """The size of a token's vector (and of the pooled one, before any Dense module)."""
        return self.layers.width(int(self.model.config.hidden_size))

    @property
    def max_length(self) -> int:
        return int(self.spec.max_length or self.model.config.max_position_embeddings)

    def save(self, folder: str | Path) -> None:
        """Write a model folder that embeds as this Embedder does, which sentence-transformers
        and text-embeddings-inference load (:func:`bertkit.inference.embedder_save.save_embedder`:
        what is written, and what is refused)."""
        save_embedder(self, folder)

    @property
    def vocab_size(self) -> int:
        """The ids a :class:`TokenIds` input may hold: 0 .. vocab_size - 1 (tokens of the
        tokenizer that the model has an embedding for)."""
        return min(len(self.tokenizer), int(self.model.config.vocab_size))

    def encode(self, inputs: Sequence[str | TokenIds]) -> list[Encoding | TokenIds]:
        """Token ids and offsets of each text, whole (:meth:`window` cuts them to the limit); a
        :class:`TokenIds` input as it is, once checked (:class:`TokenIdsError` for an empty
        one or an id outside the vocabulary)."""
        texts = [x for x in inputs if isinstance(x, str)]
        if len(texts) == len(inputs):
            return self.tokenizer.encode_batch(texts)
        encoded = iter(self.tokenizer.encode_batch(texts) if texts else ())
        vocab = self.vocab_size
        out: list[Encoding | TokenIds] = []
        for i, x in enumerate(inputs):
            if isinstance(x, str):
                out.append(next(encoded))
                continue
            if not x.input_ids:
                raise TokenIdsError(i, "an empty list of token ids")
            if (why := outside_vocabulary(x.input_ids, vocab)) is not None:
                raise TokenIdsError(i, why)
            out.append(x)
        return out

    def window(
        self, encodings: Sequence[Encoding | TokenIds], truncate: bool | None = None
    ) -> Windowed:
        """Windows of at most :attr:`max_length` tokens over each encoding (``truncate``: the
        first only; None: as :attr:`windows` says). A :class:`TokenIds` input is one window of
        its ids as they are (``truncate``: the first :attr:`max_length`; otherwise a longer one
        is a :class:`TokenIdsError` with ``too_long``)."""
        cut = self.windows.truncate if truncate is None else truncate
        room, stride = self.max_length - 2, self.windows.stride(self.max_length)
        out = Windowed([], [], [], [], WindowCounts(0, 0, 0, 0))
        cls_id, sep_id, cut_inputs = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id, []
        for i, enc in enumerate(encodings):
            if isinstance(enc, TokenIds):  # the model's input as it is: no specials, no windows
                ids = list(enc.input_ids)
                if len(ids) > self.max_length:
                    if not cut:
                        raise TokenIdsError(
                            i,
                            f"{len(ids)} token ids, more than the model's {self.max_length} "
                            "(token ids are read as they are, not in windows)",
                            too_long=True,
                        )
                    ids = ids[: self.max_length]
                    cut_inputs.append(i)
                out.inputs.append(EncodedInput(ids, [0] * len(ids), [1] * len(ids), None, i))
                out.owners.append(i)
                out.starts.append(0)
                out.is_max.append([True] * len(ids))
                continue
            content = list(enc.input_ids[1:-1])
            if cut and len(content) > room:
                cut_inputs.append(i)
            for sl in slices(
                len(content), room, stride, mode=self.windows.stride_mode, truncate=cut
            ):
                ids = [cls_id, *content[sl.start : sl.stop], sep_id]
                out.inputs.append(EncodedInput(ids, [0] * len(ids), [1] * len(ids), None, i))
                out.owners.append(i)
                out.starts.append(sl.start)
                out.is_max.append(sl.is_max)
        out.counts = WindowCounts.of(out.owners, cut_inputs, len(encodings))
        return out

    def _batches(self, inputs: Sequence[Any]):
        """(indices, combined hidden states (B, T, D), attention mask) per length-sorted batch."""
        device = next(self.model.parameters()).device
        batches = length_batches([len(e.input_ids) for e in inputs], self.batch_size)
        pad = self.tokenizer.pad_token_id or 0
        every = bool(self.layers.layers)
        with P.autocast(self.precision, device):
            for idx in progress(batches, desc="embed", unit="batch", enabled=self.show_progress):
                batch = collate(
                    [inputs[i].input_ids for i in idx], [inputs[i].token_type_ids for i in idx], pad
                )
                batch = {k: v.to(device) for k, v in batch.items()}
                out = self.model(**batch, output_hidden_states=every)
                hidden = (
                    combine_layers(out.hidden_states, self.layers.layers, self.layers.layer_combine)
                    if every
                    else out.last_hidden_state
                )
                yield idx, hidden.float(), batch["attention_mask"]

    @torch.inference_mode()
    def embed_encodings(self, inputs: Sequence[Any]) -> np.ndarray:
        """(N, D) float32 pooled vectors of already encoded inputs (windows), in their order,
        not normalised (:meth:`combine` normalises after joining a text's windows)."""
        vectors = np.zeros((len(inputs), self.dim), dtype=np.float32)
        for idx, hidden, mask in self._batches(inputs):
            pooled = pool(hidden, mask, self.spec.pooling, False)
            vectors[idx] = (
                (pooled if self.head is None else self.head(pooled).float()).cpu().numpy()
            )
        return vectors

    @torch.inference_mode()
    def token_vectors(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Each encoded input's vectors, one per token ([CLS] and [SEP] included), float32
        (T_i, D): what text-embeddings-inference's ``/embed_all`` returns."""
        out: list[np.ndarray] = [np.zeros((0, self.token_dim), np.float32)] * len(inputs)
        for idx, hidden, _mask in self._batches(inputs):
            rows = hidden.cpu().numpy()
            for r, i in enumerate(idx):
                out[i] = rows[r, : len(inputs[i].input_ids)]
        return out

    def combine(
        self,
        vectors: np.ndarray,
        windowed: Windowed,
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """One float32 vector per text from its windows' vectors (see the module doc): its first
        ``dimensions`` values (a Matryoshka size; None: all), then normalised to unit length
        when ``normalize`` says so (None: as the spec says)."""
        weights = [len(x.input_ids) for x in windowed.inputs]
        out = aggregate(
            vectors, windowed.owners, weights, windowed.counts.inputs, self.windows.window_pooling
        )
        if dimensions is not None:
            out = out[:, :dimensions]
        if self.spec.normalize if normalize is None else normalize:
            out = unit_rows(out)
        return out.astype(np.float32, copy=False)

    def embed(self, texts: Sequence[str | TokenIds]) -> tuple[np.ndarray, WindowCounts]:
        """(N, D) float32 vectors in the order of ``texts``, and how they were windowed."""
        windowed = self.window(self.encode(texts))
        return self.combine(self.embed_encodings(windowed.inputs), windowed), windowed.counts

    def iter_batches(self, lines: Iterable[str], window: int | None = None):
        """``(first_line, vectors)`` per window of lines, streaming: :func:`bertkit.inference.corpus.iter_batches`."""
        from bertkit.inference import corpus

        return corpus.iter_batches(self, lines, window or corpus.StreamConfig().window)

    def embed_to(self, lines: Iterable[str], folder: str | Path, **kwargs: Any):
        """Shards + manifest in ``folder``, resumable: :func:`bertkit.inference.corpus.embed_to`."""
        from bertkit.inference import corpus

        return corpus.embed_to(self, lines, folder, **kwargs)

    def __call__(self, texts: Sequence[str | TokenIds]) -> np.ndarray:
        """(N, D) float32 vectors, in the order of ``texts`` (texts or :class:`TokenIds`)."""
        return self.embed(texts)[0]

    def token_features(self, texts: Sequence[str]) -> tuple[list[TokenFeatures], WindowCounts]:
        """Per text, one vector per word piece (no [CLS]/[SEP]) with its characters, each from
        the window where it has most context (:func:`~bertkit.inference.token_features`)."""
        return token_features(self, texts)
