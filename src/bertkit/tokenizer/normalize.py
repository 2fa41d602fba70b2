"""BERT's basic tokenization: clean, CJK spacing, lowercase/strip accents, punctuation split.

Semantics follow Hugging Face BertTokenizerFast (BertNormalizer + BertPreTokenizer):

- NUL, U+FFFD, control (Cc except tab/LF/CR), format (Cf) and private-use (Co) characters are
  dropped; whitespace becomes a space. Lone surrogates (which Rust strings cannot hold) are
  dropped too.
- CJK ideographs become one-character words.
- Stripping accents is NFD followed by dropping nonspacing marks (Mn); lowercasing happens
  after it, one character at a time (so a final capital sigma becomes "σ", not "ς").
- Punctuation (ASCII symbols + Unicode P*) becomes one-character words.

Every step maps one original character to zero or more normalized characters, so instead of
normalizing whole texts we split the ORIGINAL text into words with one regular expression and
normalize word by word (cached by the caller). A word's normalized characters each remember
the index of the original character they came from, which gives exact offsets.

The character classes come from `unicode_tables.py`, measured from the Rust implementation
(its Unicode tables are older than Python's ``unicodedata``; see scripts/gen_unicode_tables.py).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

from bertkit.tokenizer import unicode_tables as tables

# BERT's "Chinese character" blocks, as BertNormalizer defines them (note 0x2B920, not 0x2B820).
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0x2F800, 0x2FA1F),
)

_SURROGATES = ((0xD800, 0xDFFF),)
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_ASCII_REMOVED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # REMOVED below 0x80


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    """A regex character-class body (no brackets) for inclusive code point ranges."""
    parts = []
    for a, b in ranges:
        parts.append(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}")
    return "".join(parts)


def _expand(ranges: tuple[tuple[int, int], ...]) -> frozenset[str]:
    return frozenset(chr(cp) for a, b in ranges for cp in range(a, b + 1))


def _word_pattern(
    space: tuple[tuple[int, int], ...],
    isolated: tuple[tuple[int, int], ...],
    limit: int,
    with_gap: bool,
) -> re.Pattern[str]:
    """Words (runs of non-space, non-isolated characters, or one isolated character), for texts
    whose characters are all below ``limit``; with ``with_gap`` also the spaces before each."""
    sp = _char_class(tuple((a, min(b, limit - 1)) for a, b in space if a < limit))
    iso = _char_class(tuple((a, min(b, limit - 1)) for a, b in isolated if a < limit))
    word = f"[^{sp}{iso}]+|[{iso}]"
    return re.compile(f"([{sp}]*)({word})" if with_gap else word)


@lru_cache(maxsize=1)
def _marks() -> frozenset[str]:
    return _expand(tables.NONSPACING_MARKS)


@lru_cache(maxsize=1)
def _strip_exceptions() -> dict[str, str]:
    return {chr(cp): s for cp, s in tables.STRIP_EXCEPTIONS.items()}


@lru_cache(maxsize=1)
def _lower_exceptions() -> dict[str, str]:
    return {chr(cp): s for cp, s in tables.LOWER_EXCEPTIONS.items()}


@dataclass(frozen=True)
class Normalizer:
    """Word splitting and per-word normalization for one tokenizer configuration.

    Args:
        lowercase: lowercase every character (BERT "uncased").
        strip_accents: NFD + drop nonspacing marks; None means "same as lowercase", as in BERT.
        tokenize_chinese_chars: make each CJK ideograph its own word.
    """

    lowercase: bool = True
    strip_accents: bool | None = None
    tokenize_chinese_chars: bool = True
    word_re: re.Pattern[str] = field(init=False, repr=False, compare=False)
    gap_word_res: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    word_res: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    removed_re: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        isolated = tables.PUNCTUATION
        if self.strip:
            isolated = isolated + tables.STRIPS_TO_PUNCTUATION
        if self.tokenize_chinese_chars:
            isolated = isolated + CJK_RANGES
        space = tables.WHITESPACE
        # A word is a run of characters that are neither spaces nor isolated; characters that
        # normalization drops stay inside the run, because dropping them joins their neighbours
        # ("a\u200bb" is one word "ab").
        object.__setattr__(self, "word_re", _word_pattern(space, isolated, 0x110000, False))
        # (spaces before, word): the lengths of both give every word's offsets without a
        # Python-level loop (see BertTokenizer.segment). Narrower character classes make the
        # regex much faster (sre scans supplementary-plane ranges one by one), so texts that
        # are ASCII, or within the BMP, get patterns restricted to those characters.
        object.__setattr__(
            self,
            "gap_word_res",
            tuple(_word_pattern(space, isolated, lim, True) for lim in (0x80, 0x10000, 0x110000)),
        )
        object.__setattr__(
            self,
            "word_res",
            tuple(_word_pattern(space, isolated, lim, False) for lim in (0x80, 0x10000, 0x110000)),
        )
        object.__setattr__(
            self, "removed_re", re.compile(f"[{_char_class(tables.REMOVED + _SURROGATES)}]")
        )

    def gap_word_re(self, text: str) -> re.Pattern[str]:
        """The (spaces, word) pattern for ``text``: ``findall`` gives [(spaces, word), ...]."""
        return self.gap_word_res[self._width(text)]

    def words_re(self, text: str) -> re.Pattern[str]:
        """The fastest word pattern valid for ``text`` (same matches as ``word_re``)."""
        return self.word_res[self._width(text)]

    @staticmethod
    def _width(text: str) -> int:
        if text.isascii():
            return 0
        return 1 if _ASTRAL.search(text) is None else 2

    @property
    def strip(self) -> bool:
        return self.lowercase if self.strip_accents is None else self.strip_accents

    def normalize_word(self, word: str) -> tuple[str, list[int] | None]:
        """Normalize one word found by ``word_re``.

        Returns ``(normalized, align)`` where ``align[k]`` is the index in ``word`` of the
        character that produced ``normalized[k]``, or ``align is None`` when the mapping is the
        identity (same length, character k from character k).

        >>> Normalizer(lowercase=True).normalize_word("Cafe\\u0301")
        ('cafe', [0, 1, 2, 3])
        """
        if word.isascii():
            removed = _ASCII_REMOVED.search(word) is not None
            if not removed:
                return (word.lower() if self.lowercase else word), None
        else:
            removed = self.removed_re.search(word) is not None
        strip, lower = self.strip, self.lowercase
        marks = _marks() if strip else frozenset()
        strip_exc = _strip_exceptions()
        lower_exc = _lower_exceptions()
        removed_re = self.removed_re
        out: list[str] = []
        align: list[int] = []
        for i, c in enumerate(word):
            if removed and removed_re.match(c):
                continue
            s = c
            if strip and not c.isascii():
                s = strip_exc.get(c) or unicodedata.normalize("NFD", c)
                if len(s) > 1 or s in marks:
                    s = "".join(x for x in s if x not in marks)
            if lower:
                # per character: Rust lowercases without final-sigma context
                s = (
                    "".join(lower_exc.get(x) or x.lower() for x in s)
                    if len(s) > 1
                    else (lower_exc.get(s) or s.lower())
                )
            out.append(s)
            align.extend([i] * len(s))
        normalized = "".join(out)
        if len(align) == len(word) and align == list(range(len(word))):
            return normalized, None
        return normalized, align
