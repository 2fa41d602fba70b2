"""Pre-training instances (masked LM + next-sentence prediction) from tokenized documents.

Faithful to google-research/bert ``create_pretraining_data.py``:

- the target length is ``max_seq_length - 3`` (room for [CLS], [SEP], [SEP]); with probability
  ``short_seq_prob`` (0.1) a shorter target ``randint(2, max_num_tokens)`` is used instead, so the
  model also sees short sequences;
- sentences of a document are gathered into a chunk until the target length is reached (or the
  document ends); segment A is the first ``a_end`` sentences, ``a_end`` uniform in
  ``1..len(chunk)-1`` (1 for a one-sentence chunk);
- with probability 0.5 (always for a one-sentence chunk) B is "random next": sentences from a
  random start in another document up to the remaining target length; the chunk's unused
  sentences are put back, so the next instance starts with them;
- otherwise B is the rest of the chunk ("actual next");
- while A + B is longer than ``max_num_tokens`` the longer segment loses one token, from the front
  or the back with probability 0.5 each;
- masking: :func:`bertkit.data.masking.mask_tokens`;
- each document is used ``dupe_factor`` times, each time with fresh random choices and masks.

Deviations, all for bounded memory (the original holds the whole corpus in memory):

- documents are processed in *chunks* (a buffer of at most ``buffer_docs`` documents and
  ``buffer_tokens`` tokens); the random-next document is drawn from the current chunk plus up to
  ``carry_docs`` documents kept from the previous chunk, not from the whole corpus;
- instances are shuffled within a chunk and dupe pass, not globally (the trainer shuffles again);
- the original draws the random document up to 10 times and keeps its own document if all 10 hit
  it; we draw 10 times the same way and then take a uniformly random *other* document, so B is
  from a different document whenever the pool has one (with a single document, B comes from the
  same document, as in the original).

Labels follow the original and Hugging Face: ``next_sentence_label`` is 0 when B is the actual
next segment and 1 when it is random.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from bertkit.data.masking import MaskingSpec, as_rng, mask_tokens

Sentence = Sequence[int]  # token ids of one sentence (array('i') in the builder)
Document = list[Sentence]


@dataclass(frozen=True)
class InstanceConfig:
    """Instance-building settings (names as in create_pretraining_data.py).

    ``max_seq_length`` is at least 5; ``buffer_docs`` / ``buffer_tokens`` bound a chunk (see the
    module docstring). ``balanced_next``: google-research/bert always makes a chunk of a single
    sentence random-next; at short lengths (32 tokens) most chunks are one sentence, so most
    instances are random-next and NSP there teaches little. Off by default (the original
    algorithm, draw for draw).
    """

    max_seq_length: int = 128
    """Tokens per instance, [CLS] and [SEP]s included."""
    short_seq_prob: float = 0.1
    """Probability of a shorter target length (google-research/bert's 0.1)."""
    dupe_factor: int = 10
    """Uses of each document, with fresh masks each time."""
    buffer_docs: int = 1000
    """Documents per chunk (memory bound)."""
    buffer_tokens: int = 250_000
    """Tokens per chunk (memory bound)."""
    carry_docs: int = 64
    """Documents kept from the previous chunk as extra random-next sources."""
    balanced_next: bool = False
    """Single-sentence chunks get an actual-next B half the time (google-research/bert makes them
    all random-next, which skews short instances' NSP labels; docs/pretraining-data.md)."""

    def __post_init__(self) -> None:
        """Every problem in one ValueError."""
        problems = []
        if self.max_seq_length < 5:
            problems.append("max_seq_length must be >= 5")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            problems.append("short_seq_prob must be in [0, 1]")
        for name in ("dupe_factor", "buffer_docs", "buffer_tokens"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass
class TrainingInstance:
    """One [CLS] A [SEP] B [SEP] example.

    input_ids: (T,) int32, already corrupted when masks are static; T <= max_seq_length.
    num_segment_a: tokens with segment id 0, i.e. len(A) + 2 ([CLS] and the first [SEP]).
    next_sentence_label: 0 = B follows A in the document, 1 = B is from a random document.
    masked_positions / masked_labels: (M,) int32, ascending positions and their original ids;
        empty when masking is dynamic (done at batch time).
    """

    input_ids: np.ndarray
    num_segment_a: int
    next_sentence_label: int
    masked_positions: np.ndarray
    masked_labels: np.ndarray

    @property
    def token_type_ids(self) -> np.ndarray:
        """(T,) 0 for [CLS] A [SEP], 1 for B [SEP]."""
        out = np.ones(len(self.input_ids), dtype=np.int32)
        out[: self.num_segment_a] = 0
        return out


def tokenize_document(sentences: Iterable[str], encode: Callable[[str], list[int]]) -> Document:
    """Token ids per sentence (compact ``array('i')``), dropping sentences with no tokens."""
    out: Document = []
    for s in sentences:
        ids = encode(s)
        if ids:
            out.append(array("i", ids))
    return out


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng) -> None:
    """Trim in place until ``len(a) + len(b) <= max_num_tokens``: one token at a time from the
    longer segment (B on ties), from the front or back at random (to avoid a bias to the end)."""
    r = as_rng(rng)
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if r.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _random_other(pool_size: int, doc_index: int, r) -> int:
    """Index of the random-next document: the original's 10 tries, then any other document."""
    for _ in range(10):
        j = r.randint(0, pool_size - 1)
        if j != doc_index:
            return j
    if pool_size == 1:
        return doc_index
    j = r.randint(0, pool_size - 2)
    return j + 1 if j >= doc_index else j


def create_instances_from_document(
    pool: Sequence[Document],
    doc_index: int,
    config: InstanceConfig,
    cls_id: int,
    sep_id: int,
    spec: MaskingSpec | None,
    rng,
) -> list[TrainingInstance]:
    """All instances from ``pool[doc_index]``; random-next B segments come from other ``pool``
    documents. ``spec=None`` leaves the tokens unmasked (dynamic masking)."""
    r = as_rng(rng)
    document = pool[doc_index]
    max_num_tokens = config.max_seq_length - 3
    target_seq_length = max_num_tokens
    if r.random() < config.short_seq_prob:
        target_seq_length = r.randint(2, max_num_tokens)

    instances: list[TrainingInstance] = []
    chunk: list[Sentence] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            a_end = r.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for s in chunk[:a_end] for t in s]
            tokens_b: list[int] = []
            if len(chunk) == 1 and config.balanced_next and i + 1 < len(document):
                actual = r.random() >= 0.5
            else:
                actual = len(chunk) > 1 and r.random() >= 0.5
            if len(chunk) == 1 and actual:
                # balanced_next: B is the following sentences, which are then used up
                is_random_next = 0
                target_b_length = target_seq_length - len(tokens_a)
                while i + 1 < len(document) and len(tokens_b) < max(1, target_b_length):
                    i += 1
                    tokens_b.extend(document[i])
            elif not actual:
                is_random_next = 1
                target_b_length = target_seq_length - len(tokens_a)
                other = pool[_random_other(len(pool), doc_index, r)]
                for s in other[r.randint(0, len(other) - 1) :]:
                    tokens_b.extend(s)
                    if len(tokens_b) >= target_b_length:
                        break
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                is_random_next = 0
                tokens_b = [t for s in chunk[a_end:] for t in s]
            truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, r)
            ids = [cls_id, *tokens_a, sep_id, *tokens_b, sep_id]
            if spec is not None:
                m = mask_tokens(ids, spec, r)
                ids, positions, labels = m.input_ids, m.positions, m.labels
            else:
                positions, labels = [], []
            instances.append(
                TrainingInstance(
                    np.asarray(ids, dtype=np.int32),
                    len(tokens_a) + 2,
                    is_random_next,
                    np.asarray(positions, dtype=np.int32),
                    np.asarray(labels, dtype=np.int32),
                )
            )
            chunk, chunk_length = [], 0
        i += 1
    return instances


def create_instances(
    documents: Sequence[Document],
    config: InstanceConfig,
    cls_id: int,
    sep_id: int,
    spec: MaskingSpec | None,
    rng,
    *,
    extra_pool: Sequence[Document] = (),
) -> Iterator[TrainingInstance]:
    """Instances of a chunk of documents, ``dupe_factor`` passes, each pass shuffled.

    Like the original's main loop on a (bounded) corpus: shuffle the documents, build instances for
    every document per dupe pass, shuffle. ``extra_pool`` documents only serve as random-next
    sources.
    """
    r = as_rng(rng)
    docs = [d for d in documents if d]
    r.shuffle(docs)
    pool = docs + [d for d in extra_pool if d]
    for _ in range(config.dupe_factor):
        batch: list[TrainingInstance] = []
        for k in range(len(docs)):
            batch.extend(create_instances_from_document(pool, k, config, cls_id, sep_id, spec, r))
        r.shuffle(batch)
        yield from batch


class ChunkedInstanceBuilder:
    """Streaming front end of :func:`create_instances` with bounded memory.

    Feed tokenized documents with :meth:`add`; when the buffer reaches ``buffer_docs`` documents
    or ``buffer_tokens`` tokens its instances are built and returned (and the buffer emptied);
    :meth:`finish` builds the rest. The last ``carry_docs`` documents of a chunk stay as extra
    random-next sources for the next chunk, so a small final chunk still has other documents.
    """

    def __init__(
        self, config: InstanceConfig, cls_id: int, sep_id: int, spec: MaskingSpec | None, rng
    ) -> None:
        self.config, self.cls_id, self.sep_id, self.spec = config, cls_id, sep_id, spec
        self.rng = as_rng(rng)
        self._buffer: list[Document] = []
        self._tokens = 0
        self._carry: list[Document] = []

    def add(self, doc: Document) -> Iterator[TrainingInstance]:
        if not doc:
            return iter(())
        self._buffer.append(doc)
        self._tokens += sum(len(s) for s in doc)
        c = self.config
        if len(self._buffer) >= c.buffer_docs or self._tokens >= c.buffer_tokens:
            return self._build()
        return iter(())

    def finish(self) -> Iterator[TrainingInstance]:
        return self._build() if self._buffer else iter(())

    def _build(self) -> Iterator[TrainingInstance]:
        chunk, carry = self._buffer, self._carry
        self._carry = chunk[-self.config.carry_docs :] if self.config.carry_docs else []
        self._buffer, self._tokens = [], 0
        return create_instances(
            chunk, self.config, self.cls_id, self.sep_id, self.spec, self.rng, extra_pool=carry
        )


def stream_instances(
    documents: Iterable[Document],
    config: InstanceConfig,
    cls_id: int,
    sep_id: int,
    spec: MaskingSpec | None,
    rng,
) -> Iterator[TrainingInstance]:
    """Instances from a stream of tokenized documents with bounded memory (chunked, see module
    docstring). Deterministic given the documents and ``rng``."""
    builder = ChunkedInstanceBuilder(config, cls_id, sep_id, spec, rng)
    for doc in documents:
        yield from builder.add(doc)
    yield from builder.finish()


__all__ = [
    "ChunkedInstanceBuilder",
    "Document",
    "InstanceConfig",
    "TrainingInstance",
    "create_instances",
    "create_instances_from_document",
    "stream_instances",
    "tokenize_document",
    "truncate_seq_pair",
]
