"""Retrieval data: BEIR folders, training pairs and triples, labelled pairs, SQuAD as retrieval.

- A **BEIR folder** holds ``corpus.jsonl`` (``{"_id", "title", "text"}``; a document reads
  ``title + " " + text``), ``queries.jsonl`` (``{"_id", "text"}``) and ``qrels/SPLIT.tsv``
  (``query-id<TAB>corpus-id<TAB>score`` after a header line): :func:`read_beir`, :func:`write_beir`.
- **Pairs and triples** (bi-encoder training): JSONL, CSV or TSV (with a header) holding a query
  (``query``, ``anchor`` or ``question``), a positive (``positive``, ``pos``, ``passage``,
  ``document``) and optionally hard negatives (``negative``, ``negative_1``, ``negative_2`` ...,
  or in JSONL a list under ``negatives``), every record with the same number of negatives, and
  optionally ``scores`` [positive, negatives...] (``bertkit mine --output-scores``): :func:`read_pairs`.
- **Labelled pairs** (cross-encoder training): a query, a passage (``passage``, ``document``,
  ``positive``, ``text``) and a ``label`` in [0, 1]; a triples file is read as (query,
  positive, 1) and (query, negative, 0) for each negative: :func:`read_labelled_pairs`.
- Their writers (``bertkit mine``'s output): :mod:`bertkit.data.tasks.pairs_writer`.
- :func:`read_texts`: a corpus of texts, one per line, or JSONL records with ``text`` (and
  ``title``, as in a BEIR corpus).
- :func:`read_queries`: queries to search with, one per line (ids: line numbers) or JSONL
  records with ``_id`` (or ``id``) and ``text``, as a BEIR ``queries.jsonl``.
- :func:`squad_retrieval`: SQuAD as question -> paragraph retrieval, split by article.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.data.tasks._rows import csv_rows, jsonl_rows
from bertkit.data.tasks.custom import detect_format, records
from bertkit.data.tasks.squad import SquadExample
from bertkit.errors import InputError, MissingFileError
from bertkit.io import atomic_write_text, format_suffix, read_text_lines

QUERY_FIELDS = ("query", "anchor", "question")
POSITIVE_FIELDS = ("positive", "pos", "passage", "document")
PASSAGE_FIELDS = ("passage", "document", "positive", "text")


@dataclass
class RetrievalSet:
    """Queries, a corpus and relevance judgements (query id -> {document id: score})."""

    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)

    def judged(self) -> list[str]:
        """The ids of the queries that have a relevant document (the ones metrics count)."""
        return [q for q in self.queries if any(v > 0 for v in self.qrels.get(q, {}).values())]


@dataclass(frozen=True)
class TrainingPair:
    """A query, its positive passage and hard negatives (possibly none); ``scores``: a teacher's
    scores of (query, positive) then of each (query, negative), or () when the row has none."""

    query: str
    positive: str
    negatives: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()


@dataclass(frozen=True)
class LabelledPair:
    """A (query, passage) pair and its relevance label in [0, 1]; ``group`` ties the pairs of
    one query together (for ranking metrics)."""

    query: str
    passage: str
    label: float
    group: int = 0


def is_beir(path: str | Path) -> bool:
    """Whether ``path`` is a BEIR folder (holds corpus.jsonl and queries.jsonl)."""
    p = Path(path)
    return p.is_dir() and (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file()


def read_beir(folder: str | Path, split: str = "test") -> RetrievalSet:
    """Read a BEIR folder's corpus, queries and ``qrels/SPLIT.tsv`` (InputError with file and
    line for a malformed record, a score that is not an integer grade, or a judgement naming an
    unknown query or document; naming the qrels file when it judges no document relevant)."""
    root = Path(folder)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (root / name).is_file():
            raise MissingFileError(root, None, f"no {name} (expected a BEIR folder)")
    corpus = {}
    for line, rec in jsonl_rows(root / "corpus.jsonl"):
        doc_id = _field(root / "corpus.jsonl", line, rec, "_id")
        corpus[doc_id] = (
            f"{rec.get('title') or ''} {_field(root / 'corpus.jsonl', line, rec, 'text')}".strip()
        )
    queries = {
        _field(root / "queries.jsonl", line, rec, "_id"): _field(
            root / "queries.jsonl", line, rec, "text"
        )
        for line, rec in jsonl_rows(root / "queries.jsonl")
    }
    qrels_file = root / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():
        found = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise MissingFileError(root, None, f"no qrels/{split}.tsv (splits here: {found or 'none'})")
    qrels: dict[str, dict[str, int]] = {}
    for n, row in csv_rows(qrels_file, "\t", quoting=False):
        if n == 1 and row[0] == "query-id":
            continue
        if len(row) != 3:
            raise InputError(qrels_file, n, f"expected query-id, corpus-id, score; got {row}")
        q, d, score = row
        value = _grade(qrels_file, n, score)
        if q not in queries:
            raise InputError(qrels_file, n, f"query {q!r} is not in queries.jsonl")
        if d not in corpus:
            raise InputError(qrels_file, n, f"document {d!r} is not in corpus.jsonl")
        qrels.setdefault(q, {})[d] = value
    if not any(v > 0 for docs in qrels.values() for v in docs.values()):  # nothing to score
        raise InputError(
            qrels_file,
            None,
            "no judgement with a score above 0 (expected query-id, corpus-id, score rows)",
        )
    return RetrievalSet(corpus, queries, qrels)


def _grade(path: Path, line: int, score: str) -> int:
    """A qrels score as its integer relevance grade ("2" and "2.0" are 2); a fraction such as
    0.5 is refused rather than rounded (BEIR and trec_eval grade relevance in integers)."""
    try:
        value = float(score)
    except ValueError:
        raise InputError(path, line, f"score {score!r} is not a number") from None
    if not value.is_integer():  # nan and inf are not either
        raise InputError(
            path, line, f"score {score!r} is not an integer relevance grade (0, 1, 2 ...)"
        )
    return int(value)


def write_beir(folder: str | Path, data: RetrievalSet, split: str = "test") -> None:
    """Write ``data`` as a BEIR folder (each file atomically; queries without judgements too)."""
    root = Path(folder)
    (root / "qrels").mkdir(parents=True, exist_ok=True)

    def lines(rows: Any) -> str:
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)

    atomic_write_text(
        root / "corpus.jsonl",
        lines({"_id": d, "title": "", "text": t} for d, t in data.corpus.items()),
    )
    atomic_write_text(
        root / "queries.jsonl", lines({"_id": q, "text": t} for q, t in data.queries.items())
    )
    rows = ["query-id\tcorpus-id\tscore\n"]
    rows += [f"{q}\t{d}\t{s}\n" for q, docs in data.qrels.items() for d, s in docs.items()]
    atomic_write_text(root / "qrels" / f"{split}.tsv", "".join(rows))


def read_pairs(
    path: str | Path, format: str | None = None, *, need_scores: str | None = None
) -> list[TrainingPair]:
    """Training pairs or triples (see the module docstring). ``need_scores``: what needs the
    teachers' scores (a loss's name): a record without them is an InputError naming it."""
    out: list[TrainingPair] = []
    for line, rec in records(path, detect_format(path, format), ()):
        query = _pick(path, line, rec, QUERY_FIELDS)
        positive = _pick(path, line, rec, POSITIVE_FIELDS)
        negatives = _negatives(path, line, rec)
        scores = _scores(path, line, rec, len(negatives))
        if need_scores and not scores:
            hint = "mine the rows with `bertkit mine --cross-encoder RERANKER --output-scores`"
            raise InputError(path, line, f"no teacher scores; {need_scores} trains on them: {hint}")
        if need_scores and not negatives:
            raise InputError(path, line, f"no negatives; {need_scores} needs at least one")
        if out and len(negatives) != len(out[0].negatives):
            raise InputError(
                path,
                line,
                f"{len(negatives)} negatives; the first record has "
                f"{len(out[0].negatives)} (every record needs the same number)",
            )
        out.append(TrainingPair(query, positive, negatives, scores))
    if not out:
        raise InputError(path, None, "no records")
    return out


def read_labelled_pairs(path: str | Path, format: str | None = None) -> list[LabelledPair]:
    """Labelled (query, passage) pairs, or a triples file expanded (module docstring). Pairs of
    the same query text share a ``group``."""
    groups: dict[str, int] = {}
    out: list[LabelledPair] = []
    for line, rec in records(path, detect_format(path, format), ()):
        query = _pick(path, line, rec, QUERY_FIELDS)
        group = groups.setdefault(query, len(groups))
        if "label" not in rec and "score" not in rec:  # a triples file
            out.append(LabelledPair(query, _pick(path, line, rec, POSITIVE_FIELDS), 1.0, group))
            out += [LabelledPair(query, n, 0.0, group) for n in _negatives(path, line, rec)]
            continue
        raw = rec.get("label", rec.get("score"))
        try:
            label = float(raw)
        except (TypeError, ValueError):
            raise InputError(path, line, f"label {raw!r} is not a number in [0, 1]") from None
        if not 0.0 <= label <= 1.0:
            raise InputError(path, line, f"label {label} is outside [0, 1]")
        out.append(LabelledPair(query, _pick(path, line, rec, PASSAGE_FIELDS), label, group))
    if not out:
        raise InputError(path, None, "no records")
    return out


def read_texts(path: str | Path) -> list[str]:
    """A corpus: JSONL records (``.jsonl``, ``.json``) with ``text`` and optional ``title``
    (a document reads ``title + " " + text``, as :func:`read_beir`'s), else one text per
    non-empty line."""
    if format_suffix(path).lstrip(".") in ("json", "jsonl", "ndjson"):
        return [
            f"{rec.get('title') or ''} {_field(Path(path), line, rec, 'text')}".strip()
            for line, rec in jsonl_rows(path)
        ] or _no_texts(path)
    out = [line.strip() for _, line in read_text_lines(path, drop_bom=True) if line.strip()]
    return out or _no_texts(path)


def read_queries(path: str | Path) -> list[tuple[str, str]]:
    """``(id, text)`` of each query: JSONL records (``.jsonl``, ``.json``) with ``_id`` or
    ``id`` and a non-empty ``text`` (a BEIR ``queries.jsonl``), else one query per non-empty
    line, its id the 1-based line number. InputError with the file and line for a record that
    lacks either, or when the file holds no query."""
    if format_suffix(path).lstrip(".") in ("json", "jsonl", "ndjson"):
        out = []
        for line, rec in jsonl_rows(path):
            ids = [rec[k] for k in ("_id", "id") if rec.get(k) is not None]
            if not ids:
                raise InputError(path, line, "expected an '_id' or 'id' field (the query's id)")
            out.append((str(ids[0]), _pick(path, line, rec, ("text",))))
    else:
        lines = read_text_lines(path, drop_bom=True)
        out = [(str(n), line.strip()) for n, line in lines if line.strip()]
    return out or _no_queries(path)


def _no_queries(path: str | Path) -> list[tuple[str, str]]:
    raise InputError(path, None, "no queries (expected one per line, or JSONL with _id and text)")


def _no_texts(path: str | Path) -> list[str]:
    raise InputError(path, None, "no texts")


def pairs_as_retrieval(pairs: Sequence[TrainingPair]) -> RetrievalSet:
    """A retrieval set from pairs: the corpus is every distinct positive and negative, each
    query (by distinct text) is judged relevant to its positives."""
    docs: dict[str, str] = {}  # text -> id
    asked: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for p in pairs:
        for text in (p.positive, *p.negatives):
            docs.setdefault(text, f"d{len(docs)}")
        q = asked.setdefault(p.query, f"q{len(asked)}")
        qrels.setdefault(q, {})[docs[p.positive]] = 1
    return RetrievalSet({i: t for t, i in docs.items()}, {i: t for t, i in asked.items()}, qrels)


def squad_retrieval(
    examples: Sequence[SquadExample], train_articles: int
) -> tuple[RetrievalSet, RetrievalSet]:
    """SQuAD as question -> paragraph retrieval: (the first ``train_articles`` articles, the
    rest), in file order. Each set's corpus is its own articles' paragraphs (ids ``p0``,
    ``p1`` ... over the whole file), each question is relevant to its own paragraph."""
    titles: list[str] = []
    for e in examples:
        if not titles or titles[-1] != e.title:
            titles.append(e.title)
    if not 0 < train_articles < len(titles):
        raise InputError(
            "squad", None, f"train_articles must be in 1..{len(titles) - 1}, got {train_articles}"
        )
    first = set(titles[:train_articles])
    sets = (RetrievalSet({}, {}, {}), RetrievalSet({}, {}, {}))
    paragraph: dict[tuple[str, str], str] = {}
    for e in examples:
        s = sets[0] if e.title in first else sets[1]
        key = (e.title, e.context)
        if key not in paragraph:
            paragraph[key] = f"p{len(paragraph)}"
            s.corpus[paragraph[key]] = e.context
        s.queries[e.qas_id] = e.question
        s.qrels[e.qas_id] = {paragraph[key]: 1}
    return sets


def retrieval_pairs(data: RetrievalSet) -> list[TrainingPair]:
    """One (query, relevant document) pair per judgement, in query order."""
    return [
        TrainingPair(data.queries[q], data.corpus[d])
        for q in data.queries
        for d, v in data.qrels.get(q, {}).items()
        if v > 0
    ]


def _field(path: Path, line: int, rec: dict[str, Any], name: str) -> str:
    value = rec.get(name)
    if value is None:
        raise InputError(path, line, f"no {name!r} field")
    return str(value)


def _pick(path: str | Path, line: int, rec: dict[str, Any], names: Sequence[str]) -> str:
    for name in names:
        value = rec.get(name)
        if value is not None and str(value).strip():
            return str(value)
    raise InputError(
        path,
        line,
        f"expected a non-empty field named one of {', '.join(names)}; "
        f"found {', '.join(rec) or 'none'}",
    )


def _scores(path: str | Path, line: int, rec: dict[str, Any], negatives: int) -> tuple[float, ...]:
    """The record's ``scores`` (a list, or its JSON text): () when it has none, else one finite
    number for the positive and one per negative (InputError otherwise)."""
    raw = rec.get("scores")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return ()
    try:
        values = json.loads(raw) if isinstance(raw, str) else raw
        out = tuple(float(x) for x in values if not isinstance(x, (bool, str)))
    except (ValueError, TypeError):
        values, out = None, ()
    if not isinstance(values, list) or len(out) != len(values) or not all(map(math.isfinite, out)):
        raise InputError(path, line, f"scores {raw!r} is not a list of finite numbers")
    if len(out) != negatives + 1:
        raise InputError(
            path,
            line,
            f"{len(out)} scores for 1 positive and {negatives} negatives "
            f"(expected {negatives + 1}: the positive's, then each negative's)",
        )
    return out


def _negatives(path: str | Path, line: int, rec: dict[str, Any]) -> tuple[str, ...]:
    listed = rec.get("negatives")
    if isinstance(listed, list):
        values = listed
    else:
        names = [
            "negative",
            *sorted((k for k in rec if k.startswith("negative_")), key=lambda k: (len(k), k)),
        ]
        values = [rec[k] for k in names if k in rec]
    out = tuple(str(v) for v in values if v is not None and str(v).strip())
    if len(out) != len(values):
        raise InputError(path, line, "an empty negative")
    return out
