"""Hard-negative mining: (query, positive) pairs -> pairs with negatives, what
sentence-transformers' ``util.mine_hard_negatives`` gives (same candidates, same rules, same
draws for a seeded ``random``), for ``bertkit finetune embeddings`` and ``finetune rerank``.

:func:`mine` embeds the corpus (the pairs' distinct positives after any ``corpus`` texts, one
document per distinct text) and the distinct queries with an :class:`Embedder` (its batching,
windows, progress), searches exactly in blocks (:func:`bertkit.evaluation.retrieval.exact_search`:
memory holds one block of scores, never the queries x corpus matrix), and picks negatives by
:func:`bertkit.inference.negatives.select_negatives`. :meth:`Mined.rows` lays the result out:

- ``n-tuple``: (query, positive, negative_1 .. negative_n) per pair, a pair whose query found
  fewer than n negatives dropped (``finetune embeddings`` needs the same count on every row);
- ``triplet``: (query, positive, negative) per pair and negative;
- ``labeled-pair``: (query, passage, label): each positive 1, each negative 0 (``finetune rerank``).

With a ``reranker`` (a one-output cross-encoder: ``bertkit mine --cross-encoder``), each query's
retrieved candidates and its positives are rescored by it, as sentence-transformers' ``cross_encoder``
rescores them: the margins, ``max_score``/``min_score`` and the ranking then read the
cross-encoder's scores (:func:`bertkit.inference.retrieval.relevance`: through the activation its
folder names, sigmoid by default), and only the bi-encoder's choice of the candidates is left to
the bi-encoder. ``rows(..., scores=True)`` puts the scores on the rows (``output_scores``): a
``scores`` list [positive, negative_1 .. negative_n] on n-tuple rows, [positive, negative] on
triplets, and the score in place of the label on labelled pairs -- the teacher's scores that
``finetune embeddings --loss margin-mse`` and ``--loss distill-kl`` distil.

Prompts are sentence-transformers': an explicit prompt text, else a named prompt of the folder's
``config_sentence_transformers.json``, else its ``query`` prompt for queries (``document``,
``passage`` or ``corpus`` for documents), else its default prompt.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data.tasks.retrieval import LabelledPair, TrainingPair
from bertkit.errors import ConfigError
from bertkit.evaluation.dense_scoring import dense_scoring
from bertkit.evaluation.pairs import DISTANCES, SIMILARITIES, pair_scores
from bertkit.evaluation.retrieval import exact_search
from bertkit.inference.embedder import Embedder
from bertkit.inference.negatives import MiningConfig, Selection, select_negatives
from bertkit.inference.retrieval import relevance
from bertkit.inference.task_model import Classifier
from bertkit.interop.sentence_folder import similarity_of
from bertkit.interop.sentence_prompts import check_prompt, prompts_of
from bertkit.progress import progress, took

OUTPUT_FORMATS = ("n-tuple", "triplet", "labeled-pair")
QUERY_BLOCK = 1024
"""Queries scored together against the corpus (:func:`exact_search`'s ``chunk``)."""


@dataclass(frozen=True)
class MineOptions:
    """How texts are scored and how the result is laid out (module docstring)."""

    similarity: str | None = None
    """cosine (vectors normalised here, as sentence-transformers does), dot (the vectors as the
    model gives them), euclidean or manhattan (the negated distance of the vectors as given:
    margins and bounds then read negative scores); None: the folder's similarity_fn_name, as
    sentence-transformers' own model.similarity, else cosine. sentence-transformers' mining
    normalises the vectors whatever the similarity: for a model without a Normalize module its
    dot and distance negatives differ from these (docs/search.md)."""
    output_format: str = "n-tuple"
    """n-tuple: query, positive, negative_1..n (finetune embeddings; pairs short of n negatives
    dropped); triplet: one row per negative; labeled-pair: query, passage, label 1/0 (finetune
    rerank)."""
    output_scores: bool = False
    """Put the scores on the rows (the cross-encoder's with --cross-encoder): a scores list
    [positive, negatives...] on n-tuple and triplet rows, a score column in place of the label
    on labeled-pair rows (sentence-transformers' output_scores)."""
    query_prompt: str | None = None
    """Text put before every query (default: the folder's query prompt, else its default prompt)."""
    query_prompt_name: str | None = None
    """A prompt of the folder's config_sentence_transformers.json to put before every query."""
    corpus_prompt: str | None = None
    """Text put before every document (default: the folder's document/passage/corpus prompt, else
    its default prompt)."""
    corpus_prompt_name: str | None = None
    """A prompt of the folder's config_sentence_transformers.json to put before every document."""

    def __post_init__(self) -> None:
        if self.similarity is not None and self.similarity not in SIMILARITIES:
            raise ConfigError(f"similarity must be one of {', '.join(SIMILARITIES)}")
        if self.output_format not in OUTPUT_FORMATS:
            raise ConfigError(f"output format must be one of {', '.join(OUTPUT_FORMATS)}")


def resolve_similarity(similarity: str | None, source: str | Path | None) -> str:
    """``similarity``, else the model folder's ``similarity_fn_name``, else cosine; a folder
    naming a function sentence-transformers does not have is refused."""
    if similarity is not None:
        return similarity
    named = similarity_of(source) if source else None
    if named is None:
        return "cosine"
    if named not in SIMILARITIES:
        raise ConfigError(
            f"{source}: the model's similarity_fn_name is {named!r}; expected one of "
            f"{', '.join(SIMILARITIES)} (or pass --similarity)"
        )
    return named


def prompt_for(
    role: str,
    prompts: dict[str, str],
    default: str | None,
    prompt: str | None = None,
    name: str | None = None,
) -> str:
    """The text put before each input of ``role`` (``query`` or ``corpus``): module docstring."""
    if prompt is not None:
        return prompt
    if name is None:
        names = ("query",) if role == "query" else ("document", "passage", "corpus")
        name = next((n for n in names if n in prompts), default)
        if name is None:
            return ""
    if name not in prompts:
        raise ConfigError(
            f"{role} prompt name {name!r} is not one of the model's prompts "
            f"({', '.join(sorted(prompts)) or 'none'})"
        )
    return prompts[name]


@dataclass
class Mined:
    """The distinct queries, the corpus, each query's positives (corpus indices, in first-seen
    order) and their scores, the selection, and the seconds each stage took; ``rescored``: the
    scores are a cross-encoder's (``pairs_rescored`` of them)."""

    queries: list[str]
    corpus: list[str]
    positives: list[list[int]]
    positive_scores: list[list[float]]
    selection: Selection
    config: MiningConfig
    seconds: dict[str, float]
    pairs_rescored: int = 0

    def pairs(self) -> int:
        return sum(len(p) for p in self.positives)

    def short_queries(self) -> int:
        """Queries that found fewer than ``num_negatives`` negatives."""
        n = self.config.num_negatives
        return sum(len(x) < n for x in self.selection.negatives)

    def rows(
        self, output_format: str = "n-tuple", scores: bool = False
    ) -> list[TrainingPair] | list[LabelledPair]:
        """The mined set laid out as ``output_format`` (module docstring), query by query;
        ``scores``: with the scores (a labelled pair's label is then its score)."""
        if output_format == "labeled-pair":
            out: list[LabelledPair] = []
            for q, (query, docs) in enumerate(zip(self.queries, self.positives, strict=True)):
                pos = self.positive_scores[q] if scores else [1.0] * len(docs)
                neg = self.selection.scores[q] if scores else [0.0] * len(self.negatives(q))
                out += [LabelledPair(query, self.corpus[d], s, q) for d, s in zip(docs, pos)]
                out += [
                    LabelledPair(query, self.corpus[d], s, q)
                    for d, s in zip(self.negatives(q), neg)
                ]
            return out
        if output_format not in OUTPUT_FORMATS:
            raise ConfigError(f"output format must be one of {', '.join(OUTPUT_FORMATS)}")
        rows: list[TrainingPair] = []
        for q, (query, docs) in enumerate(zip(self.queries, self.positives, strict=True)):
            negatives = tuple(self.corpus[d] for d in self.negatives(q))
            neg = tuple(self.selection.scores[q])
            for d, pos in zip(docs, self.positive_scores[q], strict=True):
                if output_format == "triplet":
                    rows += [
                        TrainingPair(query, self.corpus[d], (n,), (pos, s) if scores else ())
                        for n, s in zip(negatives, neg)
                    ]
                elif len(negatives) == self.config.num_negatives:
                    kept = (pos, *neg) if scores else ()
                    rows.append(TrainingPair(query, self.corpus[d], negatives, kept))
        return rows

    @property
    def rescored(self) -> bool:
        return "rescore" in self.seconds

    def negatives(self, query: int) -> list[int]:
        return self.selection.negatives[query]

    def summary(self, output_format: str = "n-tuple") -> str:
        """One line: rows, negatives per query, queries short of negatives (and the pairs the
        format drops for it), mean positive and negative scores, filters, time and rate."""
        found = [s for row in self.selection.scores for s in row]
        pos = [s for row in self.positive_scores for s in row]
        short = self.short_queries()
        dropped = (
            sum(
                len(p)
                for p, x in zip(self.positives, self.selection.negatives, strict=True)
                if len(x) < self.config.num_negatives
            )
            if output_format == "n-tuple"
            else 0
        )
        filters = ", ".join(f"{n} took {k}" for n, k in self.selection.skipped.items() if k)
        seconds = sum(self.seconds.values())
        return (
            f"mined {len(self.rows(output_format))} {output_format} rows for {len(self.queries)} "
            f"queries ({self.pairs()} pairs) over {len(self.corpus)} documents: "
            f"{len(found) / max(len(self.queries), 1):.2f} negatives per query, "
            f"{short} queries short of {self.config.num_negatives}"
            + (f" ({dropped} pairs dropped)" if dropped else "")
            + f"; mean score positive {np.mean(pos):.4f}, negative "
            + (f"{np.mean(found):.4f}" if found else "-")
            + (f" (cross-encoder, {self.pairs_rescored} pairs rescored)" if self.rescored else "")
            + (f"; {filters}" if filters else "")
            + f"; {took(seconds, len(self.queries), 'queries')}, "
            + ", ".join(f"{k.replace('_', ' ')} {v:.1f}s" for k, v in self.seconds.items())
        )


def mine(
    embedder: Embedder,
    pairs: Sequence[TrainingPair],
    config: MiningConfig,
    options: MineOptions | None = None,
    corpus: Sequence[str] = (),
    *,
    reranker: Classifier | None = None,
    doc_block: int = 65536,
    show_progress: bool | None = None,
) -> Mined:
    """Hard negatives for ``pairs`` (their own negatives, if any, are not used), searched among
    ``corpus`` and the pairs' positives, the candidates rescored by ``reranker`` if given
    (module docstring). Deterministic: ``random`` sampling draws from
    ``random.Random(config.seed)``."""
    options = options or MineOptions()
    if not pairs:
        raise ConfigError("mine: no (query, positive) pairs to mine negatives for")
    queries = list(dict.fromkeys(p.query for p in pairs))
    docs = list(dict.fromkeys([*corpus, *(p.positive for p in pairs)]))
    where = {t: i for i, t in enumerate(docs)}
    at = {t: i for i, t in enumerate(queries)}
    positives: list[list[int]] = [[] for _ in queries]
    for p in pairs:
        if where[p.positive] not in positives[at[p.query]]:
            positives[at[p.query]].append(where[p.positive])
    prompts, default = prompts_of(embedder.source) if embedder.source else ({}, None)
    similarity = resolve_similarity(options.similarity, embedder.source)
    folder = embedder.source
    before_q = check_prompt(
        folder,
        prompt_for("query", prompts, default, options.query_prompt, options.query_prompt_name),
    )
    before_d = check_prompt(
        folder,
        prompt_for("corpus", prompts, default, options.corpus_prompt, options.corpus_prompt_name),
    )

    t0 = time.perf_counter()
    d_vecs = embedder([before_d + t for t in docs])
    t1 = time.perf_counter()
    q_vecs = embedder([before_q + t for t in queries])
    t2 = time.perf_counter()
    prepare, score = dense_scoring(similarity)  # the negated distance for a distance
    d_vecs, q_vecs = prepare(d_vecs), prepare(q_vecs)
    rescored = reranker is not None
    k = config.candidates(max(len(p) for p in positives), rescored)
    found_ids, found = [], []
    for start in progress(
        range(0, len(queries), QUERY_BLOCK), desc="search", unit="block", enabled=show_progress
    ):
        ids, scores = exact_search(
            q_vecs[start : start + QUERY_BLOCK],
            d_vecs,
            k,
            chunk=QUERY_BLOCK,
            doc_chunk=doc_block,
            score=score,
        )
        found_ids.append(ids)
        found.append(scores)
    positive_scores = _positive_scores(q_vecs, d_vecs, positives, similarity)
    ids, scores = np.concatenate(found_ids), np.concatenate(found)
    own = [
        -1 if config.include_positives and where.get(q) in positives[i] else where.get(q, -1)
        for i, q in enumerate(queries)
    ]
    t3 = time.perf_counter()
    seconds = {"embed_corpus": t1 - t0, "embed_queries": t2 - t1, "search": t3 - t2}
    rescored_pairs = 0
    if reranker is not None:
        scores, positive_scores, rescored_pairs = rescore(
            reranker, queries, docs, ids, positives, own, config.include_positives
        )
        seconds["rescore"] = time.perf_counter() - t3
    selection = select_negatives(
        ids,
        scores,
        positives,
        positive_scores,
        config,
        random.Random(config.seed),
        own=own,
        rescored=rescored,
    )
    return Mined(
        queries, docs, positives, positive_scores, selection, config, seconds, rescored_pairs
    )


def _positive_scores(
    q_vecs: np.ndarray, d_vecs: np.ndarray, positives: Sequence[Sequence[int]], similarity: str
) -> list[list[float]]:
    """Each query's score of each of its positives: the dot product of the prepared vectors
    (cosine: unit rows), or the negated distance (sentence-transformers' similarity_pairwise)."""
    if similarity not in DISTANCES:
        return [
            [float(np.dot(q_vecs[q], d_vecs[d])) for d in row] for q, row in enumerate(positives)
        ]
    at_q = [q for q, row in enumerate(positives) for _ in row]
    at_d = [d for row in positives for d in row]
    flat = iter((-pair_scores(q_vecs[at_q], d_vecs[at_d], similarity)).tolist())
    return [[next(flat) for _ in row] for row in positives]


def rescore(
    reranker: Classifier,
    queries: Sequence[str],
    docs: Sequence[str],
    ids: np.ndarray,
    positives: Sequence[Sequence[int]],
    own: Sequence[int],
    include_positives: bool,
) -> tuple[np.ndarray, list[list[float]], int]:
    """The cross-encoder's scores (Q, K) of each query's candidates ``ids`` (-inf where no
    candidate; candidates the selection takes out anyway, the query's positives and its own
    text, are not scored: -inf too) and of its positives, and the number of pairs scored.

    sentence-transformers scores every candidate, then sets those same ones to -inf: the
    negatives it picks are the same, for fewer pairs here."""
    scores = np.full(ids.shape, -np.inf, dtype=np.float32)
    where: list[tuple[int, int]] = []
    pairs: list[tuple[str, str]] = []
    for q, row in enumerate(ids.tolist()):
        skip = {own[q], -1, *(() if include_positives else positives[q])}
        for j, d in enumerate(row):
            if d not in skip:
                where.append((q, j))
                pairs.append((queries[q], docs[d]))
    n_candidates = len(pairs)
    pairs += [(queries[q], docs[d]) for q, row in enumerate(positives) for d in row]
    found = relevance(reranker, pairs)
    if where:
        at = np.array(where)
        scores[at[:, 0], at[:, 1]] = found[:n_candidates]
    flat = iter(found[n_candidates:].tolist())
    return scores, [[next(flat) for _ in row] for row in positives], len(pairs)
