"""One served model: what it can do (by its folder), its worker thread, and each capability as a
blocking call the routes await through the worker.

=================  ============================================================================
folder             capabilities
=================  ============================================================================
encoder            embed, embed_all, similarity, tokenize, decode (+ fill-mask and embed_sparse
                   when it has masked-LM weights; a SparseEncoder folder, an inference-free
                   Router one too: no embed, similarity)
fine-tuned         its family's: predict (glue/classify), tag (ner/tag), qa (squad),
                   choose (swag); and tokenize, decode
one-output         predict and rerank: a sequence classifier with one output (a CrossEncoder
classifier        reranker, a regression model), TEI's definition of a reranker
=================  ============================================================================
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import CheckpointError
from bertkit.inference import (
    TASKS,
    Classifier,
    Embedder,
    FillMasker,
    QuestionAnswerer,
    Tagger,
    TaskModel,
    task_of,
)
from bertkit.inference.fill_mask import MaskCutError
from bertkit.inference.sparse import SparseEmbedder
from bertkit.inference.token_ids import outside_vocabulary
from bertkit.interop.sentence_folder import matryoshka_dims, router_of, splade_spec
from bertkit.interop.sentence_prompts import check_prompt, prompt_left_out, prompts_of
from bertkit.interop.sentence_router import DenseRouter, SparseRouter
from bertkit.serve.embedding_inputs import TRUNCATE_HINT, EmbeddingInputs
from bertkit.serve.errors import ServeError
from bertkit.serve.metrics import Metrics
from bertkit.serve.settings import ServeSettings
from bertkit.serve.worker import Worker
from bertkit.tasks import load_adapter

_TASK_CAPS = {
    "text-classification": "predict",
    "token-classification": "tag",
    "question-answering": "qa",
    "multiple-choice": "choose",
}

COHERE_HINT = '; send "max_tokens_per_doc" to cut each document'
"""What a 413 tells a client of the Cohere-shaped rerank routes (no ``truncate`` field)."""


class Engine(EmbeddingInputs):
    """One served model (see the module doc); its embedding routes' input handling comes from
    :class:`~bertkit.serve.embedding_inputs.EmbeddingInputs`."""

    def __init__(
        self, name: str, directory: Path, settings: ServeSettings, metrics: Metrics
    ) -> None:
        self.name, self.directory, self.settings, self.metrics = name, directory, settings, metrics
        self.task = task_of(directory)
        self.embedder: Embedder | None = None
        self.masker: FillMasker | None = None
        self.sparse: SparseEmbedder | None = None
        self.sparse_only = False
        """A sentence-transformers SparseEncoder folder: its vectors are the SPLADE ones, so it
        is not offered for dense embeddings (TEI serves a SPLADE model at /embed_sparse only)."""
        self.task_model: TaskModel | None = None
        self.worker: Worker | None = None
        self.ready = threading.Event()
        self.error: str | None = None
        self.prompts: dict[str, str] = {}
        self.default_prompt: str | None = None
        self.prompt_excluded: Path | None = None
        self.matryoshka: tuple[int, ...] = ()

    # ---- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Load the folder and run one real forward pass; then :attr:`ready` is set."""
        s = self.settings
        opts = {"device": s.device, "precision": s.precision, "allow_pickle": s.allow_pickle}
        split = {"split_special_tokens": s.split_special_tokens}
        exported = self._exported()
        if exported is not None:  # ONNX Runtime on the CPU; the file fixes its own precision
            fixed = "int8" if exported.quantized == "int8" else "fp32"  # reported by /info
            opts = {**opts, "device": "cpu", "precision": fixed, "model": exported}
        if self.task == "feature-extraction":
            # a SPLADE Router: its document route's transformer is the model; a dense Router:
            # one Embedder per route (Embedder.for_task), no masked-LM head
            router = router_of(self.directory)
            splade = router if isinstance(router, SparseRouter) else None
            source = splade.document if splade is not None else self.directory
            try:  # fill-mask runs on the PyTorch backend only
                plain = exported is None and not isinstance(router, DenseRouter)
                self.masker = FillMasker.load(source, **opts) if plain else None
            except CheckpointError:
                if router is not None:
                    raise
                self.masker = None
            # with masked-LM weights, the embedder shares the fill-mask model's encoder
            shared = self.masker.model.bert if self.masker is not None else opts.pop("model", None)
            limit = splade.max_length if splade is not None else None
            emb = Embedder.load(
                source, pooling=s.pooling, max_length=limit, model=shared, **opts, **split
            )
            for route in {id(e): e for e in (emb, *emb.routes.values())}.values():
                # the worker batches by tokens; each request says whether to normalise
                route.batch_size, route.show_progress = s.max_batch_tokens, False
            self.embedder = emb
            if self.masker is not None:  # the folder's SpladePooling, if it has one
                query = SparseEmbedder.query_encoder(splade, **opts, **split) if splade else None
                self.sparse = SparseEmbedder.of(
                    self.masker.model,
                    emb,
                    batch_size=self.masker.batch_size,
                    router=splade,
                    query=query,
                    **split,
                )
                self.sparse_only = splade_spec(self.directory) is not None
            self.prompts, self.default_prompt = prompts_of(self.directory)
            check_prompt(self.directory, self.prompts.get(self.default_prompt or "", ""))
            self.prompt_excluded = prompt_left_out(self.directory)
            self.matryoshka = matryoshka_dims(self.directory)
        else:
            # the class pipeline() picks, called directly: ``model=`` is its own argument there
            self.task_model = TASKS[self.task].load(self.directory, **opts, **split)
            self.task_model.show_progress = False
        embed = self.embedder.embed_encodings if self.embedder is not None else None
        if self.task == "text-classification" and self._one_output():  # /rerank merges requests
            embed = self.task_model.feature_rows  # type: ignore[union-attr]
        self.worker = Worker(self.name, embed, s.max_batch_tokens, self.metrics.batch)
        self._warm_up()
        self.ready.set()

    def _exported(self) -> Any:
        """With ``--backend onnx``: the folder's exported file in ONNX Runtime (else None)."""
        if self.settings.backend != "onnx":
            return None
        from bertkit.export import OnnxModel

        model = OnnxModel(self.directory, threads=self.settings.threads)
        want = (
            "BertModel"
            if self.task == "feature-extraction"
            else load_adapter(self.directory).head_class
        )
        if model.head != want:
            raise CheckpointError(
                f"{model.path}: a {model.head} graph, but this folder is served "
                f"as {want} (export it again with --head auto)"
            )
        return model

    def _warm_up(self) -> None:
        if self.embedder is not None:
            self.worker.embed_later(
                self.embedder.window(self.embedder.encode(["warm up"])).inputs
            ).result()  # type: ignore[union-attr]
        elif self.task == "question-answering":
            self.worker.run(lambda: self.task_model("what?", "warm up")).result()  # type: ignore[union-attr,misc]
        elif self.task == "multiple-choice":
            self.worker.run(lambda: self.task_model("warm", ["up", "down"])).result()  # type: ignore[union-attr,misc]
        else:
            self.worker.run(lambda: self.task_model(["warm up"])).result()  # type: ignore[union-attr,misc]

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    # ---- description -----------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return (self.embedder or self.task_model).tokenizer  # type: ignore[union-attr]

    @property
    def capabilities(self) -> list[str]:
        if self.task != "feature-extraction":
            one_output = self.task == "text-classification" and self._one_output()
            # tokenize and decode on every model, as TEI serves them for its rerankers too
            head = [_TASK_CAPS[self.task], *(["rerank"] if one_output else [])]
            return [*head, "tokenize", "decode"]
        masked = ["fill-mask", *(["embed_sparse"] if self.sparse else [])] if self.masker else []
        caps = ["embed", "embed_all", "similarity", "tokenize", "decode", *masked]
        dense = ("embed", "similarity")
        return [c for c in caps if not (self.sparse_only and c in dense)]

    def _one_output(self) -> bool:
        adapter = self.task_model.adapter if self.task_model is not None else None
        return adapter is not None and not getattr(adapter, "labels", None)

    @property
    def max_input_length(self) -> int:
        if self.embedder is not None:
            return self.embedder.max_length
        if self.task_model is not None:
            return int(self.task_model.adapter.max_seq_length)
        return 0

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "folder": str(self.directory),
            "task": self.task,
            "capabilities": self.capabilities,
            "ready": self.ready.is_set(),
            "max_input_length": self.max_input_length,
        }
        if self.embedder is not None:
            out.update(
                pooling=self.embedder.spec.pooling,
                dimensions=self.embedder.dim,
                precision=self.embedder.precision,
                matryoshka_dims=list(self.matryoshka),
                prompts=sorted(self.prompts),
                default_prompt_name=self.default_prompt,
            )
        if self.task_model is not None:
            out.update(family=self.task_model.adapter.family, precision=self.task_model.precision)
            labels = getattr(self.task_model.adapter, "labels", None)
            if labels:
                out["labels"] = list(labels)
        if self.settings.backend != "torch":
            out["backend"] = self.settings.backend
        if self.error:
            out["error"] = self.error
        return out

    # ---- capabilities (blocking: call them from a thread) ----------------------------------

    def _prepared(
        self,
        model: TaskModel,
        examples: list[Any],
        check: bool,
        what: str,
        cut: str = TRUNCATE_HINT,
        **caps: int | None,
    ) -> Any:
        """``examples`` encoded for ``model`` (:meth:`TaskModel.prepare`: tokenized once, with
        the ``caps`` of :meth:`Classifier.prepare` if any), their lengths checked against
        --max-input-tokens unless ``check`` is off (``cut``: how the route's client can cut an
        input, which the 413 tells)."""
        prepared = model.prepare(examples, **caps)
        if check:
            self._check_lengths(prepared.lengths, what, cut)
        return prepared

    def decode(self, ids: Sequence[Sequence[int]], skip_special_tokens: bool) -> list[str]:
        tok = self.tokenizer
        vocab = len(tok)
        for row in ids:
            if (why := outside_vocabulary(row, vocab)) is not None:
                raise ServeError(422, why)
        return [tok.decode(list(row), skip_special_tokens=skip_special_tokens) for row in ids]

    def tokenize(
        self, texts: Sequence[str], add_special_tokens: bool
    ) -> list[list[dict[str, Any]]]:
        tok = self.tokenizer
        out = []
        for text in texts:
            enc = tok.encode(text, add_special_tokens=add_special_tokens)
            pieces = tok.convert_ids_to_tokens(enc.input_ids)
            out.append(
                [
                    {"id": i, "text": t, "special": bool(sp), "start": s, "stop": e}
                    for i, t, sp, (s, e) in zip(
                        enc.input_ids, pieces, enc.special_tokens_mask, enc.offsets
                    )
                ]
            )
        return out

    def predict(
        self, items: Sequence[str | tuple[str, str]], raw_scores: bool, truncate: bool
    ) -> list[list[dict]]:
        """Each input's labels ranked by probability (``raw_scores``: by logit, as logits), or
        its score for a regression model. A one-output model that is no regression (a
        CrossEncoder, a ``finetune rerank`` folder: ``problem_type`` not ``regression``) answers
        its ``id2label`` name and the sigmoid of its logit unless ``raw_scores``, as TEI's
        /predict and transformers' text-classification pipeline do (and /rerank here)."""
        tm = self.task_model
        assert isinstance(tm, Classifier)
        model = tm.with_windows(truncate=truncate)
        prepared = self._prepared(model, model.examples_of(items), not truncate, "inputs")
        labels = getattr(tm.adapter, "labels", None)
        config = tm.model.config
        logit_label = None
        if not labels and config.problem_type != "regression":
            logit_label = str((config.id2label or {}).get(0, "LABEL_0"))
        out = []
        for r in model.outputs(model.run(prepared)):
            if logit_label is not None:
                x = float(r["score"])
                score = x if raw_scores else float(1.0 / (1.0 + np.exp(-x)))
                out.append([{"label": logit_label, "score": score}])
                continue
            if not labels:  # regression
                out.append([{"label": "score", "score": float(r["score"])}])
                continue
            scores = np.asarray(r["logits" if raw_scores else "probabilities"], dtype=np.float64)
            ranked = sorted(zip(labels, scores), key=lambda p: -p[1])
            out.append([{"label": str(lab), "score": float(sc)} for lab, sc in ranked])
        return out

    def rerank_features(
        self,
        query: str,
        texts: Sequence[str],
        truncate: bool | None,
        max_tokens_per_text: int | None = None,
        max_windows: int | None = None,
    ) -> list[Any]:
        """The windows of the pairs (query, text) (with ``truncate``: one each, cut; else a 413
        for a pair over --max-input-tokens), for the worker to merge with other requests'.
        ``truncate`` None: the route has no such field (Cohere's shape): read as False, and the
        413 tells the client of ``max_tokens_per_doc`` instead. ``max_tokens_per_text``: each text cut to its first N
        word pieces before anything else; ``max_windows``: each pair read in its first N windows
        (:func:`~bertkit.tasks.features.encode_classification`); the 413 checks the pairs as
        read."""
        tm = self.task_model
        assert isinstance(tm, Classifier)
        model = tm.with_windows(truncate=bool(truncate))
        pairs = model.examples_of([(query, t) for t in texts])
        # TEI's /rerank has ``truncate``; Cohere's shape (None) caps documents instead
        cut = TRUNCATE_HINT if truncate is not None else COHERE_HINT
        caps = {"text_pair_max_tokens": max_tokens_per_text, "max_windows": max_windows}
        return self._prepared(model, pairs, not truncate, "query + text", cut, **caps).features

    def rerank_scores(
        self, rows: np.ndarray, features: Sequence[Any], texts: int, raw_scores: bool
    ) -> list[float]:
        """The relevance of each text: its windows' one output combined, through a sigmoid
        unless ``raw_scores`` (TEI's /rerank)."""
        tm = self.task_model
        assert isinstance(tm, Classifier)
        raw = tm.combine_rows(rows, features, texts)[:, 0].astype(np.float64)
        return (raw if raw_scores else 1.0 / (1.0 + np.exp(-raw))).tolist()

    def tag(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """Tags per word and entity spans with character offsets (:class:`Tagger`)."""
        tm = self.task_model
        assert isinstance(tm, Tagger)
        prepared = self._prepared(tm, tm.examples_of(texts), True, "inputs", cut="")  # no truncate
        return tm.outputs(texts, tm.run(prepared))

    def qa(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        tm = self.task_model
        assert isinstance(tm, QuestionAnswerer)
        examples = tm.examples_of(pairs)
        prepared = self._prepared(tm, examples, True, "question + context", cut="")  # no truncate
        return [
            {
                "answer": g["answer"],
                "start": g["start"],
                "end": g["end"],
                "score": g["probability"],
                "null_score_diff": g["null_score_diff"],
            }
            for g in tm.outputs(tm.run(prepared))
        ]

    def fill_mask(self, texts: Sequence[str], top_k: int, truncate: bool) -> list[list[list[dict]]]:
        m = self.masker
        assert m is not None
        ids = m.encode(texts)  # whole: for both checks below, then run as they are
        limit = m.model.config.max_position_embeddings
        long = next((i for i, x in enumerate(ids) if len(x) > limit), None)
        if not truncate and long is not None:  # one prediction per [MASK]: no windows here
            raise ServeError(
                413,
                f"Input validation error: `inputs` must have at most {limit} tokens for "
                f'fill-mask (model limit; send "truncate": true to cut). Input {long} has '
                f"{len(ids[long])}",
            )
        mask = m.tokenizer.mask_token_id
        missing = [i for i, x in enumerate(ids) if mask not in x]
        if missing:
            raise ServeError(422, f"input {missing[0]} has no [MASK] token")
        try:
            found = m.fill(ids, top_k)
        except MaskCutError as e:  # with truncate: the cut dropped a [MASK]
            raise ServeError(422, f"input {e.index}: {e.message}") from None
        return [[[{"token": t, "score": float(p)} for t, p in c] for c in text] for text in found]
