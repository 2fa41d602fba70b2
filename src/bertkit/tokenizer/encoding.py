"""Encodings of one text or a pair: special tokens, truncation with overflow windows, padding.

The rules reproduce Hugging Face BertTokenizerFast (the Rust ``tokenizers`` post-processing):

- single: ``[CLS] A [SEP]``; pair: ``[CLS] A [SEP] B [SEP]``; token types 0 up to and including
  the first [SEP], 1 for B and the last [SEP]; specials have offsets (0, 0), word id None.
- truncation works on the sequences without their specials (``max_length - 2`` or ``- 3``).
  ``longest_first`` shortens the longer sequence first and splits evenly when both must go
  (the originally longer one keeps the odd token); ``only_first``/``only_second`` cut one
  sequence and fail if it is too short.
- a truncated sequence of n tokens cut to m gives windows starting at 0, m - stride,
  2 (m - stride), ... until one reaches the end. For a pair the first encoding is (A0, B0) and
  ``overflowing`` lists (A1, B0), (A1, B1), ..., (A2, B0), ..., then (A0, B1), (A0, B2), ...
  With ``only_second`` (SQuAD) that is the question with each window of the context.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

Span = tuple[int, int]


def pairs(flat: Sequence[int]) -> list[Span]:
    """``[s0, e0, s1, e1, ...]`` -> ``[(s0, e0), (s1, e1), ...]``."""
    it = iter(flat)
    return list(zip(it, it))


@dataclass(slots=True)
class Segment:
    """One sequence (A or B) before special tokens: ids, offsets and word index of each token.

    Offsets are kept flat in a uint32 array (typecode ``"I"``),
    ``flat_offsets = [s0, e0, s1, e1, ...]``: no tuple and no int object per token, nothing that
    Python's cyclic garbage collector must scan (a batch of per-token tuples cost ~30% of its
    time in collections; a tuple is 56 bytes plus two int objects, against 8 bytes here).
    ``"I"`` rather than ``"i"`` because CPython converts a list of ints to an unsigned array ~3x
    faster (no format-string parsing per item).
    """

    ids: list[int]
    flat_offsets: array
    word_ids: list[int]

    @property
    def offsets(self) -> list[Span]:
        """``(start, end)`` character span of each token (built on each access)."""
        return pairs(self.flat_offsets)

    def window(self, start: int, stop: int) -> Segment:
        if start == 0 and stop >= len(self.ids):
            return self
        return Segment(
            self.ids[start:stop], self.flat_offsets[2 * start : 2 * stop], self.word_ids[start:stop]
        )


_NO_OFFSETS = array("I", (0, 0))


class Encoding:
    """Model inputs for one text or pair, plus alignment back to the text.

    Attributes: ``input_ids``, ``token_type_ids``, ``attention_mask``, ``special_tokens_mask``,
    ``offsets`` (character spans into the original string; into text B for B's tokens; (0, 0)
    for added specials), ``word_ids`` (BERT basic-tokenizer word index within each sequence,
    None for added specials), ``sequence_ids`` (0 for A, 1 for B, None for added specials) and
    ``overflowing`` (the extra windows when truncation with ``return_overflowing_tokens`` cut
    something off).

    ``input_ids`` and ``flat_offsets`` (the offsets as a uint32 ``array``
    ``[s0, e0, s1, e1, ...]``) are built eagerly; ``offsets`` and the other per-token lists follow
    from them and the two sequences' lengths and are built on first access (most callers never
    read them all; the flat form keeps a batch free of per-token objects until then).
    """

    __slots__ = ("_cache", "_na", "_nb", "_special", "_wa", "_wb", "flat_offsets", "input_ids")
    __slots__ += ("overflowing",)

    def __init__(
        self,
        a: Segment,
        b: Segment | None,
        cls_id: int | None,
        sep_id: int | None,
        add_special: bool,
    ) -> None:
        self._special = add_special
        # only the word indices of the segments are kept: their ids and offsets are copied below
        self._na, self._wa = len(a.ids), a.word_ids
        self._nb, self._wb = (None, None) if b is None else (len(b.ids), b.word_ids)
        self._cache: dict[str, list] = {}
        self.overflowing: list[Encoding] = []
        if not add_special:
            self.input_ids = a.ids + b.ids if b is not None else list(a.ids)
            self.flat_offsets = (
                a.flat_offsets + b.flat_offsets if b is not None else a.flat_offsets[:]
            )
            return
        if cls_id is None or sep_id is None:
            raise ValueError("the vocabulary has no [CLS]/[SEP]; pass add_special_tokens=False")
        ids = [cls_id, *a.ids, sep_id]
        offsets = _NO_OFFSETS + a.flat_offsets
        offsets += _NO_OFFSETS
        if b is not None:
            ids += b.ids
            ids.append(sep_id)
            offsets += b.flat_offsets
            offsets += _NO_OFFSETS
        self.input_ids = ids
        self.flat_offsets = offsets

    def __len__(self) -> int:
        return len(self.input_ids)

    def __repr__(self) -> str:
        return f"Encoding(input_ids={self.input_ids}, offsets={self.offsets})"

    @property
    def offsets(self) -> list[Span]:
        got = self._cache.get("offsets")
        if got is None:
            got = self._cache["offsets"] = pairs(self.flat_offsets)
        return got

    def _pattern(self, name: str, outer: object, in_a: object, in_b: object) -> list:
        """``[outer] + [in_a]*len(A) + [outer] (+ [in_b]*len(B) + [outer])``, cached by name."""
        got = self._cache.get(name)
        if got is None:
            na, nb = self._na, self._nb
            if self._special:
                got = [outer, *([in_a] * na), outer]
                if nb is not None:
                    got += [in_b] * nb
                    got.append(outer)
            else:
                got = [in_a] * na + [in_b] * (nb or 0)
            self._cache[name] = got
        return got

    @property
    def token_type_ids(self) -> list[int]:
        got = self._cache.get("types")
        if got is None:
            na, nb = self._na, self._nb
            if self._special:
                got = [0] * (na + 2) + [1] * (nb + 1 if nb is not None else 0)
            else:
                got = [0] * na + [1] * (nb or 0)
            self._cache["types"] = got
        return got

    @property
    def attention_mask(self) -> list[int]:
        return self._pattern("attention", 1, 1, 1)

    @property
    def special_tokens_mask(self) -> list[int]:
        return self._pattern("special", 1, 0, 0)

    @property
    def sequence_ids(self) -> list[int | None]:
        return self._pattern("sequence", None, 0, 1)

    @property
    def word_ids(self) -> list[int | None]:
        got = self._cache.get("words")
        if got is None:
            wa, wb = self._wa, self._wb
            if self._special:
                got = [None, *wa, None]
                if wb is not None:
                    got += wb
                    got.append(None)
            else:
                got = wa + wb if wb is not None else list(wa)
            self._cache["words"] = got
        return got

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Encoding):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in (*FIELDS, "overflowing"))

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> tuple:
        # compact pickling for worker processes: int buffers instead of lists of ints
        def packed(xs: list[int] | None) -> bytes | None:
            return None if xs is None else array("q", xs).tobytes()

        return (
            packed(self.input_ids),
            self.flat_offsets.tobytes(),
            packed(self._wa),
            packed(self._wb),
            self._na,
            self._nb,
            self._special,
            self.overflowing,
        )

    def __setstate__(self, state: tuple) -> None:
        ids, flat, wa, wb, self._na, self._nb, self._special, self.overflowing = state
        self.input_ids = _unpacked(ids)
        self.flat_offsets = array("I")
        self.flat_offsets.frombytes(flat)
        self._wa, self._wb = _unpacked(wa), (None if wb is None else _unpacked(wb))
        self._cache = {}


def _unpacked(b: bytes) -> list[int]:
    a = array("q")
    a.frombytes(b)
    return a.tolist()


# the per-token lists of an Encoding, in the order Hugging Face returns them
FIELDS = (
    "input_ids",
    "token_type_ids",
    "attention_mask",
    "special_tokens_mask",
    "offsets",
    "word_ids",
    "sequence_ids",
)


def windows(n: int, max_len: int, stride: int) -> list[Span]:
    """Token ranges of a sequence of ``n`` tokens cut to ``max_len`` with ``stride`` overlap.

    >>> windows(10, 4, 1)
    [(0, 4), (3, 7), (6, 10)]
    """
    if max_len >= n:
        return [(0, n)]
    if max_len == 0:
        return [(0, 0), (0, n)]
    if stride >= max_len:
        raise ValueError(
            f"stride ({stride}) must be smaller than the room left for the truncated sequence "
            f"({max_len} tokens after special tokens and the other sequence)"
        )
    out = []
    start = 0
    while True:
        stop = min(start + max_len, n)
        out.append((start, stop))
        if stop == n:
            return out
        start += max_len - stride


def truncation_lengths(
    n1: int, n2: int | None, max_len: int, strategy: str
) -> tuple[int, int | None]:
    """Lengths A and B keep when ``n1 + n2`` tokens must fit ``max_len`` (specials excluded)."""
    total = n1 + (n2 or 0)
    if total <= max_len:
        return n1, n2
    to_remove = total - max_len
    if strategy == "longest_first":
        if n2 is None:
            return max_len, None
        short, long_, swapped = (n2, n1, True) if n1 > n2 else (n1, n2, False)
        long_ = short if short > max_len else max(short, max_len - short)
        if short + long_ > max_len:
            short = max_len // 2
            long_ = short + max_len % 2
        return (long_, short) if swapped else (short, long_)
    if strategy == "only_first":
        if n1 <= to_remove:
            raise ValueError(_too_short("first", n1, to_remove))
        return n1 - to_remove, n2
    if strategy == "only_second":
        if n2 is None:
            raise ValueError("truncation='only_second' needs a second sequence")
        if n2 <= to_remove:
            raise ValueError(_too_short("second", n2, to_remove))
        return n1, n2 - to_remove
    raise ValueError(f"unknown truncation strategy {strategy!r}")


def _too_short(which: str, n: int, to_remove: int) -> str:
    return (
        f"the {which} sequence has {n} tokens, too few to remove the {to_remove} needed "
        "to respect max_length"
    )


def assemble(
    a: Segment, b: Segment | None, cls_id: int | None, sep_id: int | None, add_special: bool
) -> Encoding:
    """Join A (and B) with [CLS]/[SEP] into an Encoding (no overflow)."""
    return Encoding(a, b, cls_id, sep_id, add_special)


def encode_segments(
    a: Segment,
    b: Segment | None,
    *,
    cls_id: int | None,
    sep_id: int | None,
    add_special_tokens: bool,
    max_length: int | None,
    truncation: str | bool,
    stride: int,
    return_overflowing_tokens: bool,
) -> Encoding:
    """Truncate (with overflow windows) and assemble, following BertTokenizerFast exactly."""
    if truncation is True:
        truncation = "longest_first"
    if not truncation or max_length is None:
        return assemble(a, b, cls_id, sep_id, add_special_tokens)
    n_special = (2 if b is None else 3) if add_special_tokens else 0
    room = max_length - n_special
    if room < 0:
        raise ValueError(f"max_length={max_length} leaves no room after {n_special} special tokens")
    if stride >= room and stride > 0:
        raise ValueError(
            f"stride ({stride}) must be smaller than max_length minus special tokens ({room})"
        )
    na, nb = len(a.ids), (None if b is None else len(b.ids))
    keep_a, keep_b = truncation_lengths(na, nb, room, truncation)
    wa = windows(na, keep_a, stride)
    wb = (
        windows(nb, keep_b, stride)
        if b is not None and nb is not None and keep_b is not None
        else [None]
    )
    if not return_overflowing_tokens:
        wa, wb = wa[:1], wb[:1]

    def build(ra: Span, rb: Span | None) -> Encoding:
        sb = None if b is None or rb is None else b.window(*rb)
        return assemble(a.window(*ra), sb, cls_id, sep_id, add_special_tokens)

    main = build(wa[0], wb[0])
    for ra in wa[1:]:
        for rb in wb:
            main.overflowing.append(build(ra, rb))
    for rb in wb[1:]:
        main.overflowing.append(build(wa[0], rb))
    return main
