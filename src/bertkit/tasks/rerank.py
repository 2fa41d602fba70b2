"""Cross-encoder rerankers (family ``rerank``): one relevance logit per (query, passage) pair.

Head: ``BertForSequenceClassification`` with one output; scores are ``sigmoid(logit)``. Pairs
are cut longest-first to ``max_seq_length``. The training loss (``loss``, :data:`LOSSES`):

- ``bce`` (default): binary cross-entropy on labels in [0, 1] (``problem_type``
  ``multi_label_classification``, which is what sentence-transformers' ``CrossEncoder`` trains
  with ``num_labels=1``, its ``BinaryCrossEntropyLoss``). Data: labelled pairs, or triples
  expanded to (query, positive, 1) and (query, negative, 0)
  (:func:`bertkit.data.tasks.retrieval.read_labelled_pairs`).
- ``ranking`` and ``listnet``: listwise losses over groups, each a query with its candidates
  (:mod:`bertkit.model.group_losses`: ``MultipleNegativesRankingLoss``, ``ListNetLoss``). Data:
  a triples or n-tuple file (:func:`bertkit.data.tasks.retrieval.read_pairs`: every record with
  the same N >= 1 hard negatives; labels 1, 0, ..., 0), or a listwise JSONL file
  (:func:`bertkit.data.tasks.listwise.read_lists`: query, docs, graded labels, lists of any
  length). ``listnet`` trains on a list as it is; ``ranking`` takes the first doc with the top
  label as the positive and the docs labelled below it as hard negatives (docs tied with the
  top are left out: neither is wrong to rank first), and refuses a list without such a doc.
  Each group's pairs are one :class:`RerankGroup` and stay together in a batch. A
  labelled-pairs file is refused (it has no groups).
- ``ranking`` also scores each query against ``num_negatives`` documents (positives and hard
  negatives alike) of the other groups of its batch, drawn as sentence-transformers draws them
  (:func:`in_batch_negatives`) from the generator the training loop
  gives each batch (:class:`bertkit.training.epochs.EpochBatches`: seeded by the run's seed and
  the batch's place, so a resumed run draws the same). "The batch" is what one forward pass
  sees, as in sentence-transformers' trainer: under torchrun a rank's share, with gradient
  accumulation a micro-batch.

Dev: labelled pairs, triples, or listwise JSONL (each list a query's pairs, its labels as they
are). The pairs of each query (each list) are ranked by their logit; metrics are MRR@10
(selection), NDCG@10 and Recall@1 over the queries with a relevant pair (label >= 0.5: binary
relevance, so graded labels 1, 2 and 3 count alike), ``NDCG@10 (graded)`` where a label is above
1 (each pair's gain its grade, as trec_eval, BEIR and MTEB score), and the accuracy of
``sigmoid(logit) >= 0.5`` against ``label >= 0.5``. ``bce`` also trains on listwise JSONL whose
labels lie in [0, 1].

The saved folder's config.json names the activation (Sigmoid for every loss, as
sentence-transformers keeps its ``num_labels=1`` default whatever the loss: the ranking losses
only order a query's candidates, so their sigmoid is a monotone score, not a calibrated
probability) (``sentence_transformers.activation_fn``,
and the older ``sbert_ce_default_activation_function``): so ``CrossEncoder(folder)``,
text-embeddings-inference and ``bertkit serve``'s ``/rerank`` score with the same sigmoid.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bertkit import __version__
from bertkit.data.tasks import custom
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.data.tasks.listwise import RankedList, list_pairs, read_lists
from bertkit.data.tasks.retrieval import (
    LabelledPair,
    TrainingPair,
    read_labelled_pairs,
    read_pairs,
)
from bertkit.errors import ConfigError, InputError
from bertkit.evaluation.retrieval import rerank_order, retrieval_metrics
from bertkit.io import atomic_write_text
from bertkit.tasks.base import GroupedAdapter, GroupFeature, Scored
from bertkit.tasks.features import EncodedInput, encode_classification, pad_batch
from bertkit.tasks.windows import WindowConfig
from bertkit.tokenizer.protocol import Tokenizer

SIGMOID = "torch.nn.modules.activation.Sigmoid"
LOSSES = ("bce", "ranking", "listnet")
"""The rerank losses: bce, then :data:`bertkit.model.group_losses.GROUP_LOSSES` (named here
without torch; a test keeps them equal)."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def relevance_grade(label: float) -> int:
    """A dev label as a qrels grade: a graded label above 1 its whole grade (2.0 -> 2), any other
    relevant (>= 0.5) or not (0), so labels in [0, 1] stay binary."""
    return int(label) if label > 1 else int(label >= 0.5)


@dataclass(frozen=True)
class RerankGroup(GroupFeature):
    """A query's (query, candidate) rows (each row's ``label`` its relevance), with the texts
    ``ranking`` pairs with other queries for in-batch negatives (empty when it draws none)."""

    query: str = ""
    docs: tuple[str, ...] = ()


@dataclass
class RerankAdapter(GroupedAdapter):
    """A one-output pair scorer (see the module docstring)."""

    file_format: str | None = None
    loss: str = "bce"
    num_negatives: int = 4
    """``ranking``: in-batch negatives per query (sentence-transformers' CrossEncoder
    MultipleNegativesRankingLoss ``num_negatives`` and its default; 0: none)."""
    _tokenizer: Tokenizer | None = field(default=None, init=False, repr=False, compare=False)
    """The tokenizer :meth:`encode` used, which pairs the in-batch negatives in :meth:`collate`."""

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.num_negatives < 0:
            raise ConfigError(f"in-batch negatives must be >= 0, got {self.num_negatives}")

    @property
    def draws_negatives(self) -> bool:
        """Whether a training batch draws in-batch negatives (:meth:`collate`'s ``draws``)."""
        return self.loss == "ranking" and self.num_negatives > 0

    @property
    def group_loss(self) -> str | None:
        """The listwise loss the head trains with over groups (None: bce, pair by pair)."""
        return None if self.loss == "bce" else self.loss

    head_class = "BertForSequenceClassification"
    main_metric = "MRR@10"

    def config_overrides(self) -> dict[str, Any]:
        return {
            "num_labels": 1,
            "problem_type": "multi_label_classification",
            "id2label": {0: "LABEL_0"},
            "label2id": {"LABEL_0": 0},
        }

    def read(self, path: str | Path, split: str = "dev") -> list[Any]:
        if split == "train" and self.group_loss:
            return self._read_groups(path)
        if "docs" in custom.first_record_fields(path, self.file_format):
            return list_pairs(path, read_lists(path, self.file_format), unit=split == "train")
        return read_labelled_pairs(path, self.file_format)

    def _read_groups(self, path: str | Path) -> list[TrainingPair] | list[RankedList]:
        """The groups of a triples, n-tuple or listwise file; a labelled-pairs file, one
        without negatives, or (``ranking``) a list without a doc below its top label is an
        InputError naming the layout expected."""
        expected = (
            f"--loss {self.loss} trains on groups: a triples or n-tuple file, each record a "
            "query, its positive and the same number (at least 1) of hard negatives (query, "
            "positive, negative or negative_1, negative_2 ...; in JSONL a negatives list), "
            "which `bertkit mine` writes, or a listwise JSONL file (query, docs, labels); "
            "labelled pairs train with --loss bce"
        )
        have = custom.first_record_fields(path, self.file_format)
        if "docs" in have:
            lists = read_lists(path, self.file_format)
            return lists if self.loss == "listnet" else [_ranked_pair(path, x) for x in lists]
        if "label" in have or "score" in have:
            label = "label" if "label" in have else "score"
            raise InputError(
                path, 1, f"labelled pairs (a {label} field) have no groups; {expected}"
            )
        groups = read_pairs(path, self.file_format)
        if not groups[0].negatives:
            raise InputError(path, 1, f"no negatives; {expected}")
        return groups

    def require_labelled(
        self, path: str | Path, split: str, examples: list[Any]
    ) -> list[LabelledPair]:
        """Also refused: training pairs that all have the same label (nothing to learn), or a
        dev set where no query has both a relevant (label >= 0.5) and an irrelevant pair (every
        query's positive would rank first: MRR@10 1 for any model). A (query, positive) pairs
        file without negatives reads as relevant pairs only, so it is refused for both."""
        examples = super().require_labelled(path, split, examples)
        if split == "train" and self.group_loss:
            return examples  # groups: read_pairs checked each has a positive and negatives
        if split == "train":
            labels = {e.label for e in examples}
            if len(labels) > 1:
                return examples
            what = f"every pair has label {labels.pop():g}: nothing to learn"
        else:
            by_query: dict[int, set[bool]] = {}
            for e in examples:
                by_query.setdefault(e.group, set()).add(e.label >= 0.5)
            if any(len(kinds) == 2 for kinds in by_query.values()):
                return examples
            what = "no query has both a relevant (label >= 0.5) and an irrelevant pair to rank"
        raise InputError(
            path,
            None,
            f"{what} (a pairs file without negatives reads as all relevant); "
            "expected labelled pairs with both labels, or triples with negatives "
            "(`bertkit mine` writes them)",
        )

    def encode(self, tokenizer: Tokenizer, examples: Sequence[Any], training: bool) -> list[Any]:
        if not (training and self.group_loss):
            return self._encode_pairs(
                tokenizer, [(e.query, e.passage, float(e.label)) for e in examples]
            )
        self._tokenizer = tokenizer
        out = []
        for i, e in enumerate(examples):
            query, docs, labels = _candidates(e)
            pairs = [(query, d, y) for d, y in zip(docs, labels, strict=True)]
            rows = tuple(replace(f, example_index=i) for f in self._encode_pairs(tokenizer, pairs))
            kept = (query, docs) if self.draws_negatives else ("", ())
            out.append(RerankGroup(rows, i, any(r.truncated for r in rows), (), *kept))
        return out

    def _encode_pairs(
        self, tokenizer: Tokenizer, pairs: Sequence[tuple[str, str, float]]
    ) -> list[EncodedInput]:
        """(query, passage, label) pairs, each cut longest-first to ``max_seq_length``."""
        examples = [ClassificationExample(str(i), *p) for i, p in enumerate(pairs)]
        return encode_classification(
            tokenizer, examples, self.max_seq_length, WindowConfig(truncate=True)
        )

    def collate(
        self,
        features: Sequence[Any],
        pad_id: int,
        training: bool,
        draws: Any = None,
    ) -> dict[str, np.ndarray]:
        """Pairs, or groups: each group's rows, then (``ranking`` given ``draws``, a
        ``torch.Generator``) its in-batch negative pairs, group after group; ``labels`` (B, K)
        each row's label in order (0 for an in-batch negative), ``-inf`` after a shorter group's
        (:func:`bertkit.model.group_losses.group_loss`)."""
        grouped = bool(features) and isinstance(features[0], GroupFeature)
        if not grouped:
            batch = pad_batch(features, pad_id)
            if "labels" in batch:
                batch["labels"] = batch["labels"].astype(np.float32).reshape(-1, 1)
            return batch
        extra: list[list[EncodedInput]] = [[] for _ in features]
        if draws is not None and self.draws_negatives and len(features) > 1:
            assert self._tokenizer is not None, "encode the groups first"
            sizes = [len(f.rows) for f in features]
            for b, picks in enumerate(in_batch_negatives(sizes, self.num_negatives, draws)):
                pairs = [(features[b].query, features[g].docs[c], 0.0) for g, c in picks]
                extra[b] = self._encode_pairs(self._tokenizer, pairs)
        rows = [r for f, more in zip(features, extra, strict=True) for r in (*f.rows, *more)]
        width = max(len(f.rows) + len(more) for f, more in zip(features, extra, strict=True))
        labels = np.full((len(features), width), -np.inf, dtype=np.float32)  # (B, K)
        for b, (f, more) in enumerate(zip(features, extra, strict=True)):
            labels[b, : len(f.rows) + len(more)] = [r.label for r in f.rows] + [0.0] * len(more)
        batch = pad_batch(rows, pad_id)
        batch["labels"] = labels
        return batch

    def outputs(self, out: Any, batch: dict[str, np.ndarray]) -> list[Any]:
        return [float(x) for x in out.logits.float().cpu().numpy()[:, 0]]

    def score(
        self, examples: Sequence[Any], features: Sequence[Any], rows: Sequence[Any]
    ) -> Scored:
        logits = np.asarray(rows, dtype=np.float64)
        groups: dict[int, list[int]] = {}
        for i, e in enumerate(examples):
            groups.setdefault(e.group, []).append(i)
        rankings, qrels = {}, {}
        for g, members in groups.items():
            order = rerank_order([logits[i] for i in members])
            rankings[str(g)] = [str(members[k]) for k in order]
            qrels[str(g)] = {str(i): relevance_grade(examples[i].label) for i in members}
        metrics: dict[str, Any] = {}
        if any(any(v.values()) for v in qrels.values()):
            metrics = retrieval_metrics(rankings, qrels, (1,))
            kept = ("MRR@10", "NDCG@10", "NDCG@10 (graded)", "Recall@1", "queries")
            metrics = {k: metrics[k] for k in kept if k in metrics}
        gold = np.asarray([e.label >= 0.5 for e in examples])
        metrics["accuracy"] = float(np.mean((logits >= 0) == gold))
        preds = [
            {"query": e.query, "score": round(float(sigmoid(x)), 6), "logit": float(x)}
            for e, x in zip(examples, logits, strict=True)
        ]
        return Scored(metrics, float(metrics.get(self.main_metric, np.nan)), preds)

    def save(self, directory: str | Path) -> None:
        """Name the activation in config.json (written before this is called) for
        sentence-transformers' CrossEncoder. No ``bertkit_task.json``: the folder is a plain
        one-output sequence classifier, which bertkit reads as one
        (:func:`bertkit.tasks.saved.adapter_from_hf_config`: ``predict`` gives the logit,
        ``serve``'s ``/rerank`` its sigmoid)."""
        path = Path(directory) / "config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        config["sentence_transformers"] = {
            "activation_fn": SIGMOID,
            "version": f"bertkit {__version__}",
        }
        config["sbert_ce_default_activation_function"] = SIGMOID
        atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")


def _candidates(e: TrainingPair | RankedList) -> tuple[str, tuple[str, ...], list[float]]:
    """A group's query, candidates and their labels (a triple's: 1 for the positive, then 0)."""
    if isinstance(e, RankedList):
        return e.query, e.docs, list(e.labels)
    return e.query, (e.positive, *e.negatives), [1.0] + [0.0] * len(e.negatives)


def _ranked_pair(path: str | Path, x: RankedList) -> TrainingPair:
    """``ranking``'s group of a list: the first doc with the top label, then the docs below."""
    top = max(x.labels)
    below = tuple(d for d, y in zip(x.docs, x.labels, strict=True) if y < top)
    if not below:
        raise InputError(
            path,
            x.line,
            f"every doc has the top label {top:g}: --loss ranking needs a doc labelled below "
            "the first top-labelled one (its positive); --loss listnet trains on any list",
        )
    return TrainingPair(x.query, x.docs[x.labels.index(top)], below)


def in_batch_negatives(
    sizes: Sequence[int], num: int | None, generator: Any
) -> list[list[tuple[int, int]]]:
    """For each of B groups of ``sizes`` candidates, ``num`` candidates of the other groups, as
    (group, candidate) pairs: sentence-transformers' ``get_in_batch_negatives``.

    Its candidates are laid column-major (candidate c of group b at ``c * B + b``) with a group's
    own masked out; when ``num`` is below the count left it draws ``torch.multinomial(mask,
    num)`` (uniform, without replacement) from ``generator`` (there: the global one, so both
    draw the same with the same seed), else (or ``num`` None) it takes them all in that order.
    Groups of different sizes (listwise files) mask the missing candidates too; the groups with
    more than ``num`` to choose from draw in one call (all of them when the sizes are equal, as
    there), the others take all theirs.
    """
    import torch  # training only: the rest of the task family reads and scores without it

    count, width = len(sizes), max(sizes)
    exists = torch.arange(width)[:, None] < torch.tensor(sizes)[None, :]  # (C, B)
    owner = torch.arange(count).repeat(width)  # (C * B,): the group of each flat candidate
    mask = exists.reshape(1, -1) & (owner[None, :] != torch.arange(count)[:, None])  # (B, C*B)
    left = mask.sum(dim=1).tolist()
    drawn: list[list[int]] = [[] for _ in range(count)]
    some = [b for b in range(count) if num is not None and num < left[b]]
    if some:
        picks = torch.multinomial(mask[some].float(), num, generator=generator)  # type: ignore[arg-type]
        for b, row in zip(some, picks.tolist(), strict=True):
            drawn[b] = row
    for b in range(count):
        if b not in some:
            drawn[b] = mask[b].nonzero().flatten().tolist()
    return [[(i % count, i // count) for i in row] for row in drawn]
