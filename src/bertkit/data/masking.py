"""Masked-LM corruption, shared by the instance builder (static masks) and the collator
(dynamic masks drawn again each epoch).

The procedure follows google-research/bert ``create_masked_lm_predictions``:

1. candidates are all positions except the special tokens ([CLS], [SEP], [PAD]); with whole-word
   masking a ``##`` continuation piece joins the candidate of the piece before it;
2. the candidates are taken in a uniformly random order drawn with the given ``rng`` (a
   Fisher-Yates shuffle done lazily, stopping once enough are chosen: the same distribution as the
   original's full shuffle at a fraction of the cost, though not the same random stream);
3. ``num_to_predict = min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))``
   where ``len(tokens)`` counts the special tokens too (as the original does);
4. candidates are taken in shuffled order, skipping a whole word that would overshoot
   ``num_to_predict``;
5. each chosen position becomes [MASK] with probability 0.8, keeps its token with 0.1, and
   becomes a uniformly random vocabulary id with 0.1 (any id, as in the original). These are the
   spec's ``mask_ratios`` (MASK, SAME, RANDOM), which the paper's Table 8 varies: ``(1, 0, 0)``,
   ``(0.8, 0, 0.2)``, ``(0.8, 0.2, 0)``, ``(0, 0.2, 0.8)``, ``(0, 0, 1)``. The draws are
   ``u1 < MASK`` then ``u2 < SAME / (SAME + RANDOM)``, so the default gives the same stream as
   the original ``0.8`` / ``0.5`` test.

Worked example (whole-word masking): tokens ``[CLS] un ##want ##ed run [SEP]`` give candidates
``[[1, 2, 3], [4]]``; with ``num_to_predict = 1`` the word ``un ##want ##ed`` is skipped when it
comes first (3 > 1) and ``run`` is masked, so a word is never split.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np


class Rng(Protocol):
    """The three draws the builders need; ``random.Random`` has them, see :func:`as_rng`."""

    def random(self) -> float: ...
    def randint(self, a: int, b: int) -> int: ...
    def shuffle(self, x: list) -> None: ...


class _NumpyRng:
    """Adapts a ``numpy.random.Generator`` to :class:`Rng` (``randint`` inclusive of ``b``)."""

    def __init__(self, gen: np.random.Generator) -> None:
        self.gen = gen

    def random(self) -> float:
        return float(self.gen.random())

    def randint(self, a: int, b: int) -> int:
        return int(self.gen.integers(a, b + 1))

    def shuffle(self, x: list) -> None:
        self.gen.shuffle(x)


def as_rng(rng: random.Random | np.random.Generator | Rng) -> Rng:
    """Accept a ``random.Random`` or a ``numpy.random.Generator``; never a global RNG."""
    if isinstance(rng, np.random.Generator):
        return _NumpyRng(rng)
    if isinstance(rng, random.Random) or all(
        hasattr(rng, a) for a in ("random", "randint", "shuffle")
    ):
        return rng
    raise TypeError(f"rng must be random.Random or numpy.random.Generator, got {type(rng)!r}")


def derive_rng(*key: int) -> random.Random:
    """A ``random.Random`` determined only by integers ``key`` (e.g. (seed, epoch, index)).

    Uses numpy's SeedSequence so nearby keys give unrelated streams.
    """
    state = np.random.SeedSequence([int(k) for k in key]).generate_state(4, np.uint32)
    return random.Random(int.from_bytes(state.tobytes(), "little"))


def check_mask_ratios(ratios: Sequence[float]) -> tuple[float, float, float]:
    """``ratios`` as a (MASK, SAME, RANDOM) triple of non-negative shares summing to 1."""
    if len(ratios) != 3 or any(not 0.0 <= float(r) <= 1.0 for r in ratios):
        raise ValueError(
            f"mask ratios are three shares (MASK SAME RANDOM) in [0, 1], got {list(ratios)}"
        )
    if abs(sum(float(r) for r in ratios) - 1.0) > 1e-6:
        raise ValueError(f"mask ratios must sum to 1, got {list(ratios)} (sum {sum(ratios):g})")
    return (float(ratios[0]), float(ratios[1]), float(ratios[2]))


@dataclass(frozen=True, kw_only=True)
class MaskingSettings:
    """How many positions of an instance to mask and how (no vocabulary: :class:`MaskingSpec`
    adds it). The fields are keyword-only."""

    masked_lm_prob: float = 0.15
    """Fraction of tokens masked."""
    max_predictions_per_seq: int = 20
    """At most this many masked tokens per instance."""
    whole_word_mask: bool = False
    """Mask all pieces of a word together."""
    mask_ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)
    """Of the masked positions: shares made [MASK], kept, replaced by a random id (sum 1)."""

    def __post_init__(self) -> None:
        """Every problem in one ValueError; ``mask_ratios`` becomes a tuple of floats."""
        problems = []
        if not 0.0 < self.masked_lm_prob < 1.0:
            problems.append("masked_lm_prob must be in (0, 1)")
        if self.max_predictions_per_seq < 1:
            problems.append("max_predictions_per_seq must be >= 1")
        try:
            object.__setattr__(self, "mask_ratios", check_mask_ratios(self.mask_ratios))
        except ValueError as e:
            problems.append(str(e))
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True)
class MaskingSpec(MaskingSettings):
    """The masking settings plus what masking needs to know about the vocabulary.

    vocab_size: ids are drawn from ``range(vocab_size)`` for the 10% random replacement.
    mask_id: the [MASK] id.
    special_ids: ids never chosen for prediction ([CLS], [SEP], [PAD]).
    is_continuation: bool per id, True for ``##`` pieces (used only by whole-word masking).
    The settings (:class:`MaskingSettings`) are keyword arguments.
    """

    vocab_size: int
    mask_id: int
    special_ids: frozenset[int]
    is_continuation: np.ndarray = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.is_continuation) != self.vocab_size:
            raise ValueError("is_continuation must have one entry per vocabulary id")

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], **settings) -> MaskingSpec:
        """Build from the vocabulary's token strings (index = id), e.g. ``vocab.id_to_token``;
        ``settings``: fields of :class:`MaskingSettings`."""
        ids = {t: i for i, t in enumerate(tokens)}
        missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in ids]
        if missing:
            raise ValueError(f"vocabulary lacks special tokens {missing}")
        special = {ids["[CLS]"], ids["[SEP]"]} | ({ids["[PAD]"]} if "[PAD]" in ids else set())
        cont = np.fromiter((t.startswith("##") for t in tokens), dtype=bool, count=len(tokens))
        return cls(len(tokens), ids["[MASK]"], frozenset(special), cont, **settings)

    @classmethod
    def from_vocab_file(cls, path: str | Path, **settings) -> MaskingSpec:
        """Build from a ``vocab.txt`` (one token per line, line number = id)."""
        with open(path, encoding="utf-8") as f:
            tokens = [line.rstrip("\n").rstrip("\r") for line in f]
        if tokens and tokens[-1] == "":
            tokens.pop()
        return cls.from_tokens(tokens, **settings)

    def num_to_predict(self, num_tokens: int) -> int:
        """The original's count: ``min(max_pred, max(1, round(num_tokens * masked_lm_prob)))``."""
        return min(self.max_predictions_per_seq, max(1, round(num_tokens * self.masked_lm_prob)))


@dataclass
class MaskedTokens:
    """``input_ids`` after corruption; ``positions`` (ascending) and the original ``labels``."""

    input_ids: list[int]
    positions: list[int]
    labels: list[int]


def mask_tokens(input_ids: Sequence[int], spec: MaskingSpec, rng) -> MaskedTokens:
    """Choose and corrupt prediction positions of one instance (see the module docstring).

    ``input_ids`` is the full instance including [CLS]/[SEP]; ``rng`` is a ``random.Random`` or
    ``numpy.random.Generator``. The input is not modified.
    """
    r = as_rng(rng)
    ids = [int(t) for t in input_ids]
    candidates: list[list[int]] = []
    for i, t in enumerate(ids):
        if t in spec.special_ids:
            continue
        # A continuation joins the previous word only when contiguous (not right after [SEP]).
        if (
            spec.whole_word_mask
            and candidates
            and spec.is_continuation[t]
            and candidates[-1][-1] == i - 1
        ):
            candidates[-1].append(i)
            continue
        candidates.append([i])
    n_predict = spec.num_to_predict(len(ids))
    p_mask, p_same, p_random = spec.mask_ratios
    p_keep = p_same / (p_same + p_random) if p_same + p_random > 0 else 1.0
    output = list(ids)
    positions: list[int] = []
    n = len(candidates)
    for k in range(n):
        if len(positions) >= n_predict:
            break
        j = r.randint(k, n - 1)  # lazy Fisher-Yates: candidates[k] is a uniform pick of the rest
        candidates[k], candidates[j] = candidates[j], candidates[k]
        word = candidates[k]
        if len(positions) + len(word) > n_predict:
            continue  # never split a word to hit the count exactly
        for i in word:
            if r.random() < p_mask:
                output[i] = spec.mask_id
            elif r.random() < p_keep:
                pass  # keep the original token
            else:
                output[i] = r.randint(0, spec.vocab_size - 1)
            positions.append(i)
    positions.sort()
    return MaskedTokens(output, positions, [ids[i] for i in positions])
