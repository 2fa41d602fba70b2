"""The instance builder (NSP pairs + static masking), pinned by exact and statistical checks.

Synthetic corpora make every token identify its document and position, so the structure of each
instance (where A and B came from) can be read back from its ids.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from dataclasses import replace

import numpy as np
import pytest

from bertkit.data.masking import MaskingSpec, mask_tokens
from bertkit.data.pretraining import (
    InstanceConfig,
    TrainingInstance,
    create_instances,
    stream_instances,
    truncate_seq_pair,
)

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
FIRST = 5  # first ordinary id


def make_spec(vocab_size: int, continuation: set[int] = frozenset(), **kw) -> MaskingSpec:
    cont = np.zeros(vocab_size, dtype=bool)
    cont[list(continuation)] = True
    return MaskingSpec(vocab_size, MASK, frozenset({PAD, CLS, SEP}), cont, **kw)


def make_corpus(n_docs: int, sents_per_doc: int, sent_len: tuple[int, int], seed: int = 0):
    """Documents whose token ids are all distinct: id -> (doc, position) is a lookup."""
    rng = random.Random(seed)
    docs, where, next_id = [], {}, FIRST
    for d in range(n_docs):
        doc, pos = [], 0
        for _ in range(sents_per_doc):
            n = rng.randint(*sent_len)
            sent = list(range(next_id, next_id + n))
            for t in sent:
                where[t] = (d, pos)
                pos += 1
            next_id += n
            doc.append(sent)
        docs.append(doc)
    return docs, where, next_id


def unmasked(inst: TrainingInstance) -> list[int]:
    ids = inst.input_ids.copy()
    ids[inst.masked_positions] = inst.masked_labels
    return ids.tolist()


CONFIG = InstanceConfig(max_seq_length=64, short_seq_prob=0.1, dupe_factor=1)


def build(docs, config=CONFIG, spec=None, seed=0):
    return list(create_instances(docs, config, CLS, SEP, spec, random.Random(seed)))


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(n_docs=40, sents_per_doc=30, sent_len=(3, 25))


@pytest.fixture(scope="module")
def masked_instances(corpus):
    docs, _, vocab_size = corpus
    spec = make_spec(vocab_size)
    return build(docs, replace(CONFIG, dupe_factor=5), spec), spec


def test_layout_segments_and_lengths(corpus) -> None:
    docs, _, _ = corpus
    insts = build(docs, replace(CONFIG, dupe_factor=3))
    assert len(insts) > 1000
    for inst in insts:
        ids, types, na = inst.input_ids.tolist(), inst.token_type_ids.tolist(), inst.num_segment_a
        assert 5 <= len(ids) <= 64
        assert ids[0] == CLS and ids[na - 1] == SEP and ids[-1] == SEP
        assert ids.count(CLS) == 1 and ids.count(SEP) == 2
        assert types == [0] * na + [1] * (len(ids) - na)
        assert na >= 3 and len(ids) - na >= 2  # A and B each have >= 1 token


def test_nsp_structure_actual_next_and_random_document(corpus) -> None:
    docs, where, _ = corpus
    insts = build(docs, replace(CONFIG, dupe_factor=3))
    for inst in insts:
        ids, na = inst.input_ids.tolist(), inst.num_segment_a
        a = [where[t] for t in ids[1 : na - 1]]
        b = [where[t] for t in ids[na:-1]]
        doc_a = {d for d, _ in a}
        assert len(doc_a) == 1  # A is contiguous text of one document
        # Truncation only trims the ends, so each segment is a contiguous run.
        for seg in (a, b):
            assert [p for _, p in seg] == list(range(seg[0][1], seg[0][1] + len(seg)))
        if inst.next_sentence_label == 0:
            assert {d for d, _ in b} == doc_a
            assert b[0][1] > a[-1][1]  # B follows A
        else:
            assert {d for d, _ in b}.isdisjoint(doc_a)  # B from a different document


def test_nsp_labels_balanced(corpus) -> None:
    docs, _, _ = corpus
    # No short targets: chunks then hold several sentences, so a forced "random next"
    # (one-sentence chunk) is rare and the label is a fair coin.
    insts = build(docs, replace(CONFIG, short_seq_prob=0.0, dupe_factor=10))
    n = len(insts)
    frac = sum(i.next_sentence_label for i in insts) / n
    sigma = math.sqrt(0.25 / n)
    assert abs(frac - 0.5) < 5 * sigma + 0.01, (frac, n)


def test_balanced_next_fixes_the_short_instance_label_skew(corpus) -> None:
    """At 16 tokens most chunks are one sentence, which the original rule always pairs with a
    random next; ``balanced_next`` pairs them with the following sentences half the time, and
    those instances keep the structure (B follows A in the same document, contiguously)."""
    docs, where, _ = corpus
    short = replace(CONFIG, max_seq_length=16, short_seq_prob=0.0, dupe_factor=5)
    original = build(docs, short)
    balanced = build(docs, replace(short, balanced_next=True))
    skewed = sum(i.next_sentence_label for i in original) / len(original)
    frac = sum(i.next_sentence_label for i in balanced) / len(balanced)
    assert skewed > 0.75  # the skew the option exists for
    assert abs(frac - 0.5) < 5 * math.sqrt(0.25 / len(balanced)) + 0.02, frac
    actual = [i for i in balanced if i.next_sentence_label == 0]
    for inst in actual:
        ids, na = inst.input_ids.tolist(), inst.num_segment_a
        a = [where[t] for t in ids[1 : na - 1]]
        b = [where[t] for t in ids[na:-1]]
        assert {d for d, _ in b} == {d for d, _ in a} and b[0][1] > a[-1][1]
    # (off, the builder is the original draw for draw: test_exact_instances_from_a_scripted_rng)


def test_short_seq_prob_makes_short_instances(corpus) -> None:
    docs, _, _ = corpus
    lengths = [
        len(i.input_ids) for i in build(docs, replace(CONFIG, short_seq_prob=0.0, dupe_factor=3))
    ]
    short = [
        len(i.input_ids) for i in build(docs, replace(CONFIG, short_seq_prob=1.0, dupe_factor=3))
    ]
    assert np.mean(short) < 0.75 * np.mean(lengths)
    assert np.mean(lengths) > 0.8 * 64  # full-length targets fill the sequence


def test_masked_count_is_the_original_formula(masked_instances) -> None:
    insts, _spec = masked_instances
    for inst in insts:
        n = len(inst.input_ids)
        assert len(inst.masked_positions) == min(20, max(1, round(n * 0.15)))
        pos = inst.masked_positions.tolist()
        assert pos == sorted(set(pos))


def test_special_tokens_never_masked(masked_instances) -> None:
    insts, _ = masked_instances
    for inst in insts:
        orig = unmasked(inst)
        assert all(orig[p] not in (CLS, SEP) for p in inst.masked_positions)
        # the [CLS]/[SEP] layout is intact in the corrupted ids
        assert inst.input_ids[0] == CLS and inst.input_ids[inst.num_segment_a - 1] == SEP
        assert inst.input_ids[-1] == SEP


def test_80_10_10_split_within_binomial_bounds(masked_instances) -> None:
    insts, spec = masked_instances
    counts = Counter()
    for inst in insts:
        for p, label in zip(inst.masked_positions, inst.masked_labels):
            got = int(inst.input_ids[p])
            counts["mask" if got == MASK else "same" if got == label else "random"] += 1
    n = sum(counts.values())
    v = spec.vocab_size
    expected = {"mask": 0.8 + 0.1 / v, "same": 0.1 + 0.1 / v, "random": 0.1 * (v - 2) / v}
    for k, p in expected.items():
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(counts[k] - n * p) < 5 * sigma, (k, counts, n)


def test_masked_positions_uniform_over_non_special_tokens(masked_instances) -> None:
    # Positions in A and in B are chosen at the same rate (a check on the candidate shuffle).
    insts, _ = masked_instances
    hits = {"a": 0, "b": 0}
    sizes = {"a": 0, "b": 0}
    for inst in insts:
        na, n = inst.num_segment_a, len(inst.input_ids)
        sizes["a"] += na - 2
        sizes["b"] += n - na - 1
        for p in inst.masked_positions:
            hits["a" if p < na else "b"] += 1
    total = hits["a"] + hits["b"]
    p_a = sizes["a"] / (sizes["a"] + sizes["b"])
    sigma = math.sqrt(total * p_a * (1 - p_a))
    assert abs(hits["a"] - total * p_a) < 5 * sigma


def test_whole_word_masking_never_splits_a_word() -> None:
    # Words of 1-4 pieces: the first piece is an ordinary id, the rest are '##' continuations.
    rng = random.Random(1)
    first_ids, cont_ids = range(FIRST, 300), range(300, 400)
    docs = [
        [
            [
                t
                for _ in range(rng.randint(2, 8))
                for t in [rng.choice(first_ids), *rng.sample(cont_ids, rng.randint(0, 3))]
            ]
            for _ in range(20)
        ]
        for _ in range(30)
    ]
    spec = make_spec(400, set(cont_ids), whole_word_mask=True)
    insts = build(docs, replace(CONFIG, dupe_factor=4), spec, seed=3)
    words_masked = 0
    for inst in insts:
        orig = unmasked(inst)
        n_pred = spec.num_to_predict(len(orig))
        masked = set(inst.masked_positions.tolist())
        assert 0 < len(masked) <= n_pred
        # group positions into words: a continuation joins the previous non-special position
        words, cur = [], []
        for i, t in enumerate(orig):
            if t in (CLS, SEP):
                cur = []
                continue
            if t >= 300 and cur:
                cur.append(i)
            else:
                cur = [i]
                words.append(cur)
        for w in words:
            inside = [i in masked for i in w]
            assert all(inside) or not any(inside), (w, masked)
            words_masked += all(inside) and len(w) > 1
    assert words_masked > 100  # multi-piece words were masked, whole


def test_whole_word_masking_worked_example() -> None:
    # [CLS] un ##want ##ed run [SEP] x [SEP] with num_to_predict = 1: only a one-piece word fits.
    spec = make_spec(20, {11, 12}, masked_lm_prob=0.01, whole_word_mask=True)
    for seed in range(20):
        m = mask_tokens([CLS, 10, 11, 12, 13, SEP, 14, SEP], spec, random.Random(seed))
        assert m.positions in ([4], [6])


def test_dupe_factor_gives_different_masks_on_the_same_pair() -> None:
    docs = [[list(range(5, 25)), list(range(25, 45))], [list(range(45, 60))]]
    spec = make_spec(100)
    config = InstanceConfig(max_seq_length=64, short_seq_prob=0.0, dupe_factor=30)
    by_content = defaultdict(set)
    insts = build(docs, config, spec, seed=5)
    for inst in insts:
        by_content[tuple(unmasked(inst))].add(tuple(inst.masked_positions.tolist()))
    actual_next = tuple([CLS, *range(5, 25), SEP, *range(25, 45), SEP])
    assert len(by_content[actual_next]) > 5  # the same A/B pair, masked differently each time
    assert len(insts) >= 30 * 2


def test_deterministic_given_seed_and_numpy_generator_accepted(corpus) -> None:
    docs, _, vocab_size = corpus
    spec = make_spec(vocab_size)
    a = build(docs[:10], CONFIG, spec, seed=7)
    b = build(docs[:10], CONFIG, spec, seed=7)
    c = build(docs[:10], CONFIG, spec, seed=8)

    def key(xs):
        return [
            (
                x.input_ids.tolist(),
                x.num_segment_a,
                x.next_sentence_label,
                x.masked_positions.tolist(),
            )
            for x in xs
        ]

    assert key(a) == key(b)
    assert key(a) != key(c)
    g1 = list(create_instances(docs[:10], CONFIG, CLS, SEP, spec, np.random.default_rng(7)))
    g2 = list(create_instances(docs[:10], CONFIG, CLS, SEP, spec, np.random.default_rng(7)))
    assert key(g1) == key(g2) and len(g1) > 10
    # library code never touches the global RNGs
    random.seed(0)
    np.random.seed(0)
    before = (random.random(), np.random.random())
    random.seed(0)
    np.random.seed(0)
    build(docs[:5], CONFIG, spec, seed=1)
    assert (random.random(), np.random.random()) == before


def test_truncation_trims_the_longer_segment_from_both_ends() -> None:
    fronts = backs = 0
    for seed in range(200):
        a, b = list(range(10)), list(range(100, 104))
        truncate_seq_pair(a, b, 10, random.Random(seed))
        assert len(a) + len(b) == 10 and b == list(range(100, 104))  # only the longer lost tokens
        assert a == list(range(a[0], a[0] + 6))  # still contiguous
        fronts += a[0] > 0
        backs += a[-1] < 9
    assert fronts > 150 and backs > 150  # both ends trimmed (6 coin flips each run)


def test_streaming_chunks_bound_the_pool_and_keep_structure(corpus) -> None:
    docs, where, _ = corpus
    config = replace(CONFIG, buffer_docs=4, carry_docs=2)
    insts = list(stream_instances(iter(docs), config, CLS, SEP, None, random.Random(0)))
    assert len(insts) > 200
    for inst in insts:
        ids, na = inst.input_ids.tolist(), inst.num_segment_a
        da = where[ids[1]][0]
        db = where[ids[na]][0]
        if inst.next_sentence_label == 1:
            assert db != da
            # the random document is in the same chunk of 4 or among the 2 carried before it
            assert da // 4 * 4 - 2 <= db < da // 4 * 4 + 4
        else:
            assert db == da


def test_single_document_corpus_falls_back_to_the_same_document() -> None:
    docs = [[list(range(5, 15)), list(range(15, 25)), list(range(25, 35))]]
    insts = build(docs, replace(CONFIG, dupe_factor=5))
    assert insts and all(set(i.input_ids.tolist()) <= set(range(2, 35)) for i in insts)


def test_random_next_document_is_never_the_own_one_when_another_exists() -> None:
    # The original keeps its own document when 10 draws all hit it ((1/2)^10 with 2 documents);
    # we fall back to another document, so 20,000 draws from a pool of 2 never return doc 0.
    from bertkit.data.pretraining import _random_other

    rng = random.Random(0)
    assert all(_random_other(2, 0, rng) == 1 for _ in range(20_000))
    counts = Counter(_random_other(5, 2, rng) for _ in range(20_000))
    assert set(counts) == {0, 1, 3, 4} and min(counts.values()) > 4500
    assert _random_other(1, 0, rng) == 0


class ScriptedRng:
    """Replays a fixed script of draws and checks each call (method and range) against it."""

    def __init__(self, script: list[tuple]) -> None:
        self.script = list(script)

    def random(self) -> float:
        kind, value = self.script.pop(0)
        assert kind == "random", f"expected {kind}, got random()"
        return value

    def randint(self, a: int, b: int) -> int:
        kind, bounds, value = self.script.pop(0)
        assert (kind, bounds) == ("randint", (a, b)), (
            f"expected {kind}{bounds}, got randint({a}, {b})"
        )
        return value

    def shuffle(self, x: list) -> None:
        raise AssertionError("no shuffle expected")


def test_exact_instances_from_a_scripted_rng() -> None:
    """The original's algorithm step by step: chunking, A/B split, put-back, forced random next
    for a one-sentence chunk, and truncation from the front."""
    from bertkit.data.pretraining import create_instances_from_document

    doc0 = [[10, 11], [12, 13, 14], [15], [16, 17]]
    doc1 = [[20, 21, 22, 23]]
    config = InstanceConfig(max_seq_length=8, short_seq_prob=0.1)  # 5 tokens for A + B
    rng = ScriptedRng(
        [
            ("random", 0.5),  # not a short target: target = 5
            # chunk [s0, s1] (5 tokens)
            ("randint", (1, 1), 1),  # a_end
            ("random", 0.9),  # actual next
            # chunk [s2, s3]
            ("randint", (1, 1), 1),  # a_end
            ("random", 0.1),  # random next
            ("randint", (0, 1), 1),  # the other document
            ("randint", (0, 0), 0),  # its start sentence
            # s3 was put back: chunk [s3] has one sentence -> random next without a draw
            ("randint", (0, 1), 1),
            ("randint", (0, 0), 0),
            ("random", 0.2),  # 2 + 4 > 5: truncate the longer B from the front
        ]
    )
    insts = create_instances_from_document([doc0, doc1], 0, config, CLS, SEP, None, rng)
    assert rng.script == []
    got = [(i.input_ids.tolist(), i.num_segment_a, i.next_sentence_label) for i in insts]
    assert got == [
        ([CLS, 10, 11, SEP, 12, 13, 14, SEP], 4, 0),
        ([CLS, 15, SEP, 20, 21, 22, 23, SEP], 3, 1),
        ([CLS, 16, 17, SEP, 21, 22, 23, SEP], 4, 1),
    ]


def test_exact_masking_from_a_scripted_rng() -> None:
    # 10 tokens -> round(1.5) = 2 predictions; 7 candidates (all but [CLS]/[SEP]).
    spec = make_spec(50)
    ids = [CLS, 10, 11, 12, SEP, 13, 14, 15, 16, SEP]
    rng = ScriptedRng(
        [
            ("randint", (0, 6), 5),  # first pick: candidate 5 of 1,2,3,5,6,7,8 -> position 7
            ("random", 0.5),  # < 0.8: [MASK]
            ("randint", (1, 6), 1),  # second pick: candidate 1 -> position 2
            ("random", 0.9),  # >= 0.8 ...
            ("random", 0.7),  # ... >= 0.5: random id
            ("randint", (0, 49), 42),
        ]
    )
    m = mask_tokens(ids, spec, rng)
    assert rng.script == []
    assert m.positions == [2, 7] and m.labels == [11, 15]
    assert m.input_ids == [CLS, 10, 42, 12, SEP, 13, 14, MASK, 16, SEP]
