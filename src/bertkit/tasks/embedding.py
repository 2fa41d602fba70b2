"""Sentence embeddings for retrieval (family ``embeddings``): a bi-encoder trained contrastively.

Training examples are (query, positive, hard negatives...) from a pairs/triples file or a BEIR
folder's ``train`` judgements (:mod:`bertkit.data.tasks.retrieval`); each text is cut to
``max_seq_length`` tokens as sentence-transformers cuts it. The model is
:class:`bertkit.model.contrastive.BiEncoder` (the loss lives there); the selected model is saved
as a sentence-transformers folder (pooling, ``Normalize``), which ``bertkit embed``/``serve``,
sentence-transformers and text-embeddings-inference read.

With ``loss="margin-mse"`` or ``"distill-kl"`` (:data:`TEACHER_LOSSES`) the training rows carry a
teacher's ``scores`` (``bertkit mine --cross-encoder ... --output-scores``) and the loss distils
them (:func:`margin_mse_loss`, :func:`distill_kl_loss`); neither couples examples, so gradient
accumulation is allowed for them.

Dev, told apart by its layout (:func:`bertkit.data.tasks.dev_layout.dev_layout`):

- retrieval: a BEIR folder (its ``dev`` judgements, else ``test``) or a (query, positive) pairs
  file (corpus: every distinct passage). Queries and documents are embedded and searched
  exactly by the saved folder's similarity (:attr:`EmbeddingAdapter.declared_similarity`:
  cosine, the dot product of a model that does not normalise, trained by dot, or a start
  folder's kept distance), as ``bertkit evaluate`` searches that folder; the metrics are
  :func:`bertkit.evaluation.retrieval.retrieval_metrics`' and MRR@10 selects.
- labelled sentence pairs, what ``bertkit evaluate`` scores an embedding model on
  (:func:`bertkit.data.tasks.sentence_pairs.read_sentence_pairs`: a GLUE STS-B/MRPC/QQP folder's
  dev split, or a file with a text pair and a numeric ``label`` or ``score``). Each distinct text
  is embedded once and the metrics are :func:`bertkit.evaluation.pairs.pair_metrics`'; the saved
  model's similarity (the folder's ``similarity_fn_name``) picks the main one, as
  :func:`bertkit.inference.sentence_pairs.evaluate_pairs` does: ``spearman_cosine`` for gold
  scores (STS, sentence-transformers' ``EmbeddingSimilarityEvaluator``), ``cosine_ap`` for 0/1
  labels (``BinaryClassificationEvaluator``); ``spearman_dot`` / ``dot_ap`` for a dot model.
  ``pair_kind`` forces sts or pair_classification (auto: from the task or the labels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.tasks.dev_layout import dev_layout
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.data.tasks.retrieval import (
    RetrievalSet,
    TrainingPair,
    is_beir,
    pairs_as_retrieval,
    read_beir,
    read_pairs,
    retrieval_pairs,
)
from bertkit.data.tasks.sentence_pairs import (
    PAIR_KINDS,
    SentencePairs,
    read_sentence_pairs,
)
from bertkit.errors import ConfigError, InputError
from bertkit.evaluation.dense_scoring import dense_scoring
from bertkit.evaluation.pairs import DISTANCES, main_metric, pair_metrics, pair_scores
from bertkit.evaluation.retrieval import (
    exact_search,
    rank_by_scores,
    retrieval_metrics,
    top_hits,
    unit_rows,
)
from bertkit.tasks.base import GroupedAdapter, GroupFeature, Scored
from bertkit.tasks.features import EncodedInput, encode_classification, pad_batch
from bertkit.tasks.windows import WindowConfig
from bertkit.tokenizer.protocol import Tokenizer

LOSSES = ("ranking", "margin-mse", "distill-kl")
"""The losses of :class:`bertkit.model.contrastive.BiEncoder` (named here without torch)."""
TEACHER_LOSSES = ("margin-mse", "distill-kl")
"""The losses that distil a teacher's scores: each row scored on its own, no query side."""
SIMILARITIES = ("cosine", "dot")
"""What a bi-encoder's vectors are trained and searched by, and its folder declares (a start
folder's distance may be declared instead: :attr:`EmbeddingAdapter.folder_similarity`)."""
LOSS_OPTIONS = {
    "scale": ("ranking",),
    "temperature": ("distill-kl",),
    "student_temperature": ("distill-kl",),
    "teacher_temperature": ("distill-kl",),
}
"""The loss options (:class:`EmbeddingAdapter` fields) and the losses that read them; another
loss refuses a value other than the field's default, which it would silently ignore."""
POOLINGS = ("mean", "cls", "max")
"""The poolings of :mod:`bertkit.model.pooling` (named here so that ``bertkit.tasks`` imports
without torch; a test keeps the two equal)."""
_CUT = WindowConfig(truncate=True)  # texts are cut, as sentence-transformers cuts them


@dataclass(frozen=True)
class RetrievalText:
    """A dev text: a query (``relevant`` holds its judgements) or a document (``relevant`` None)."""

    id: str
    text: str
    relevant: dict[str, int] | None = None


@dataclass(frozen=True)
class PairText:
    """A dev text of labelled sentence pairs (each distinct text once, in the order of
    :meth:`SentencePairs.texts`); ``pairs`` is the set they are scored in, shared by all."""

    text: str
    pairs: SentencePairs


def dev_texts(data: RetrievalSet) -> list[RetrievalText]:
    """The judged queries, then every document."""
    return [RetrievalText(q, data.queries[q], data.qrels[q]) for q in data.judged()] + [
        RetrievalText(d, t) for d, t in data.corpus.items()
    ]


@dataclass
class EmbeddingAdapter(GroupedAdapter):
    """Contrastive bi-encoder training (see the module docstring)."""

    pooling: str = "mean"
    normalize: bool = True
    scale: float | None = None
    """The ranking loss's scale (None: :attr:`default_scale`)."""
    similarity_fn_name: str | None = None
    """cosine or dot, what the losses score by (None: :attr:`similarity` decides)."""
    symmetric: bool = False
    matryoshka_dims: list[int] = field(default_factory=list)
    mini_batch_size: int | None = None
    file_format: str | None = None
    loss: str = "ranking"
    temperature: float = 1.0
    student_temperature: float | None = None
    """distill-kl's temperature of the student's scores (None: ``temperature``)."""
    teacher_temperature: float | None = None
    """distill-kl's temperature of the teacher's scores (None: ``temperature``)."""
    pair_kind: str = "auto"
    """What a labelled-pairs dev set is scored as (:data:`PAIR_KINDS`; auto: from the task or
    the labels)."""
    query_prompt: str = ""
    """Put before every query (training and dev search) and saved as the folder's "query"
    prompt, which ``encode_query`` and bertkit's evaluate put there too."""
    document_prompt: str = ""
    """Put before every positive, negative and dev document; the folder's "document" prompt."""
    folder_prompts: dict[str, str] = field(default_factory=dict)
    """The starting folder's named prompts, saved with the model; its "query" and "document"
    give way to :attr:`query_prompt` and :attr:`document_prompt`."""
    default_prompt_name: str | None = None
    """The starting folder's default prompt (``encode``'s), saved while the model has it."""
    include_prompt: bool = True
    """False: the starting folder's Pooling leaves the prompt's tokens out (kept when saved)."""
    folder_similarity: str | None = None
    """The starting folder's distance ``similarity_fn_name`` (euclidean or manhattan), declared
    again by the saved folder and scoring labelled dev pairs (:attr:`declared_similarity`); the
    losses still score by :attr:`similarity`, as sentence-transformers' ``fit`` keeps a model's
    similarity while its ranking loss scores by cosine."""
    _dev_kind: str = field(default="retrieval", init=False, repr=False)
    """What the dev set read last is scored as: retrieval, sts or pair_classification (not
    saved: state() leaves out the private fields)."""

    head_class = "BiEncoder"
    in_batch_negatives = True  # the ranking loss (bertkit.model.contrastive); see couples_batch

    @classmethod
    def couples_batch(cls, loss: str | None = None) -> bool:
        """The ranking loss scores each query against the batch; the teacher losses do not."""
        return loss not in TEACHER_LOSSES

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.similarity_fn_name not in (None, *SIMILARITIES):
            raise ConfigError(
                f"similarity_fn_name must be one of {', '.join(SIMILARITIES)}, "
                f"got {self.similarity_fn_name!r}"
            )
        if self.similarity_fn_name == "dot" and self.normalize:
            raise ConfigError(
                "similarity_fn_name dot trains a model that does not normalise its vectors (the "
                "dot product of unit vectors is their cosine): add --no-normalize"
            )
        if self.scale is None:
            self.scale = self.default_scale
        if not self.scale > 0:
            raise ConfigError(f"scale must be positive, got {self.scale}")
        if any(d < 1 for d in self.matryoshka_dims):
            raise ConfigError(f"Matryoshka dimensions must be positive, got {self.matryoshka_dims}")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise ConfigError(f"mini_batch_size must be positive, got {self.mini_batch_size}")
        self.matryoshka_dims = sorted(set(self.matryoshka_dims), reverse=True)
        if self.loss not in LOSSES:
            raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.loss in TEACHER_LOSSES and self.symmetric:
            raise ConfigError(f"symmetric is a ranking-loss option; {self.loss} has no query side")
        for name in ("temperature", "student_temperature", "teacher_temperature"):
            value = getattr(self, name)
            if value is not None and not 0 < value < math.inf:
                raise ConfigError(f"{name} must be positive and finite, got {value}")
        self._check_loss_options()
        if self.folder_similarity not in (None, *DISTANCES):
            raise ConfigError(
                f"folder_similarity must be one of {', '.join(sorted(DISTANCES))}, "
                f"got {self.folder_similarity!r}"
            )
        if self.pair_kind not in PAIR_KINDS:
            raise ConfigError(
                f"pair_kind must be one of {', '.join(PAIR_KINDS)}, got {self.pair_kind!r}"
            )

    def _check_loss_options(self) -> None:
        """A loss option set (not its default) for a loss that does not read it is a
        ConfigError: it would be silently ignored (:data:`LOSS_OPTIONS`)."""
        defaults = {f.name: f.default for f in fields(self)} | {"scale": self.default_scale}
        for name, losses in LOSS_OPTIONS.items():
            value = getattr(self, name)
            if self.loss not in losses and value != defaults[name]:
                raise ConfigError(
                    f"{name} is a {' / '.join(losses)} loss option; the {self.loss} loss does "
                    f"not use it (got {value})"
                )

    @property
    def temperatures(self) -> tuple[float, float]:
        """distill-kl's (student, teacher) temperatures: each side's own, else ``temperature``."""
        student, teacher = self.student_temperature, self.teacher_temperature
        return (
            self.temperature if student is None else student,
            self.temperature if teacher is None else teacher,
        )

    @property
    def similarity(self) -> str:
        """The similarity every loss scores by, the saved folder declares
        (``similarity_fn_name``) and dev is scored by: :attr:`similarity_fn_name` when given;
        else the dot product for a teacher loss whose model does not normalise its vectors
        (sentence-transformers' MarginMSELoss and DistillKLDivLoss score by dot: a model distilled
        without normalising is a dot-product model, as its msmarco ``-dot`` models are); else
        cosine (the ranking loss's default, MultipleNegativesRankingLoss' ``cos_sim``)."""
        if self.similarity_fn_name is not None:
            return self.similarity_fn_name
        return "dot" if self.loss in TEACHER_LOSSES and not self.normalize else "cosine"

    @property
    def declared_similarity(self) -> str:
        """The saved folder's ``similarity_fn_name``: :attr:`folder_similarity`, else
        :attr:`similarity`. Labelled dev pairs are scored by it, as ``bertkit evaluate`` scores
        the saved folder; a retrieval dev set searches by cosine for a distance, as ``bertkit
        evaluate`` searches such a folder (the same ranking for unit vectors)."""
        return self.folder_similarity or self.similarity

    @property
    def default_scale(self) -> float:
        """The ranking loss's scale unless given: 20 by cosine (temperature 0.05,
        sentence-transformers' default), 1 by the dot product (its advice for ``dot_score``:
        unnormalised dot products are already large). A teacher loss reads no scale (20)."""
        return 1.0 if self.loss == "ranking" and self.similarity == "dot" else 20.0

    @property
    def main_metric(self) -> str:  # type: ignore[override]
        """MRR@10 on a retrieval dev set; on labelled pairs evaluate_pairs' main metric."""
        if self._dev_kind == "retrieval":
            return "MRR@10"
        return main_metric(self._dev_kind, self.declared_similarity)

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        folder = Path(path).is_dir()  # not a BEIR one: read_beir names the file it lacks
        need = f"--loss {self.loss}" if self.loss in TEACHER_LOSSES else None
        if split == "train":
            if is_beir(path) or folder:
                if need:
                    raise InputError(
                        path,
                        None,
                        f"a BEIR folder holds no teacher scores; {need} trains on a pairs file "
                        f"from `bertkit mine --cross-encoder RERANKER --output-scores`",
                    )
                return retrieval_pairs(read_beir(path, "train"))
            return read_pairs(path, self.file_format, need_scores=need)
        if dev_layout(path, self.file_format) == "pairs":
            pairs = read_sentence_pairs(path, split, self.pair_kind)
            self._dev_kind = pairs.kind  # the dev set decides what selects (main_metric)
            return [PairText(t, pairs) for t in pairs.texts()]
        if self.pair_kind != "auto":
            raise ConfigError(
                f"pair_kind {self.pair_kind} scores labelled sentence pairs; the dev set "
                f"{path} is retrieval data (queries and passages), to which it does not apply"
            )
        self._dev_kind = "retrieval"
        if is_beir(path) or folder:
            has_dev = (Path(path) / "qrels" / "dev.tsv").is_file()
            return dev_texts(read_beir(path, "dev" if has_dev else "test"))
        return dev_texts(pairs_as_retrieval(read_pairs(path, self.file_format)))

    def _encode(self, tokenizer: Tokenizer, texts: Sequence[str]) -> list[EncodedInput]:
        """Each text cut to ``max_seq_length`` tokens (``truncated`` marks the cut ones)."""
        examples = [ClassificationExample(str(i), t, None, None) for i, t in enumerate(texts)]
        return encode_classification(tokenizer, examples, self.max_seq_length, _CUT)

    def encode(self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool) -> list[Any]:
        q, d = self.query_prompt, self.document_prompt
        if not training:
            # retrieval texts behind the query / document prompt, labelled pairs the default one
            pairs = self.default_prompt_text  # once: a property built from the prompts
            return self._encode(tokenizer, [self._dev_prompt(e, pairs) + e.text for e in examples])
        out = []
        for i, e in enumerate(examples):
            assert isinstance(e, TrainingPair)
            texts = [q + e.query, d + e.positive, *(d + n for n in e.negatives)]
            rows = tuple(replace(f, example_index=i) for f in self._encode(tokenizer, texts))
            out.append(GroupFeature(rows, i, any(r.truncated for r in rows), e.scores))
        return out

    def _dev_prompt(self, e: Any, pairs: str) -> str:
        """A dev text's prompt: a retrieval query's or document's; for labelled pairs ``pairs``,
        the saved folder's default prompt (``encode``'s, which ``evaluate`` and
        sentence-transformers' evaluators put there), else none."""
        if isinstance(e, RetrievalText):
            return self.query_prompt if e.relevant is not None else self.document_prompt
        return pairs

    @property
    def prompts(self) -> dict[str, str]:
        """The prompts the saved folder declares (sentence-transformers' ``prompts``)."""
        named = {"query": self.query_prompt, "document": self.document_prompt}
        kept = {k: v for k, v in self.folder_prompts.items() if k not in named}
        return {**kept, **{k: v for k, v in named.items() if v}}

    @property
    def default_prompt(self) -> str | None:
        """The saved folder's ``default_prompt_name``: the starting folder's, unless the model
        saves no prompt of that name (a --query-prompt "" took it away)."""
        name = self.default_prompt_name
        return name if name in self.prompts else None

    @property
    def default_prompt_text(self) -> str:
        """What ``encode`` on the saved folder puts before every text ("" without a default)."""
        return self.prompts.get(self.default_prompt or "", "")

    def collate(
        self, features: Sequence[Any], pad_id: int, training: bool
    ) -> dict[str, np.ndarray]:
        if not training:
            return pad_batch(features, pad_id)
        # column by column: the B queries, their B positives, then each column of negatives
        rows = [f.rows[c] for c in range(len(features[0].rows)) for f in features]
        batch = pad_batch(rows, pad_id)
        batch["labels"] = np.arange(len(features), dtype=np.int64)
        if self.loss in TEACHER_LOSSES:
            batch["teacher_scores"] = np.array([f.scores for f in features], dtype=np.float32)
        return batch

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        return list(out.embeddings.float().cpu().numpy())

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        vectors = np.stack(rows).astype(np.float32)
        # the saved folder's vectors (unit length when it has a Normalize module: Embedder),
        # scored as bertkit evaluate scores that folder: by the similarity it declares
        vectors = unit_rows(vectors) if self.normalize else vectors
        if examples and isinstance(examples[0], PairText):
            return self._score_pairs(examples[0].pairs, vectors)
        prepare, score = dense_scoring(self.declared_similarity)
        vectors = prepare(vectors)
        queries = [i for i, e in enumerate(examples) if e.relevant is not None]
        docs = [i for i, e in enumerate(examples) if e.relevant is None]
        found, scores = exact_search(vectors[queries], vectors[docs], 100, score=score)
        doc_ids = [examples[i].id for i in docs]
        query_ids = [examples[i].id for i in queries]
        rankings = rank_by_scores(doc_ids, found, query_ids)
        qrels = {examples[i].id: examples[i].relevant for i in queries}
        metrics = retrieval_metrics(rankings, qrels)  # type: ignore[arg-type]
        preds = top_hits(query_ids, rankings, scores)
        return Scored(metrics, float(metrics[self.main_metric]), preds)

    def _score_pairs(self, pairs: SentencePairs, vectors: np.ndarray) -> Scored:
        """Labelled pairs scored from ``vectors[i]``, the vector of ``pairs.texts()[i]`` as the
        saved folder embeds it (pooled, then normalised where it normalises), as
        :func:`bertkit.inference.sentence_pairs.evaluate_pairs` scores a saved folder; one
        prediction per pair: its label and similarity."""
        a, b = pairs.sides(vectors)
        metrics = pair_metrics(pairs.kind, a, b, pairs.labels)
        name = self.declared_similarity
        similarity = pair_scores(a, b, name).tolist()
        preds = [
            {"label": y, name: round(float(s), 6)}
            for y, s in zip(pairs.labels, similarity, strict=True)
        ]
        return Scored(metrics, float(metrics[self.main_metric]), preds)
