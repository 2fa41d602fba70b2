"""The word cache: each distinct word of the text -> its wordpiece ids and character offsets.

BertTokenizer works word by word: one precompiled regex finds the words of the original text
(see normalize.py), and this cache maps each distinct word string to its wordpiece ids and
offsets relative to the word, so the per-character work (normalization, greedy matching) runs
once per distinct word, not once per occurrence. The cache is bounded (cleared when full) and
seeded with the vocabulary's whole-word tokens; worker processes start with an empty one.
"""

from __future__ import annotations

from collections.abc import Collection
from itertools import accumulate, chain, compress, islice, repeat
from operator import add, is_, itemgetter
from typing import Any

from bertkit.tokenizer.normalize import Normalizer
from bertkit.tokenizer.wordpiece import PREFIX, Vocab, continuation_table, wordpiece

# cache entry: (ids, offsets relative to the word, flattened (s0, e0, s1, e1, ...))
Entry = tuple[tuple[int, ...], tuple[int, ...]]
_CACHEABLE_CHARS = 64
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


class WordCache:
    """Wordpieces of words, remembered per distinct word string (up to ``cache_size`` words).

    Args:
        vocab: the vocabulary.
        normalizer: the normalization and word regexes of the tokenizer.
        unk_token_id: the id a word without pieces (or longer than
            ``max_input_chars_per_word`` after normalization) becomes.
        cache_size: distinct words remembered (the cache is cleared when it is full).
        special_ids: ids never seeded as words (the special tokens).
    """

    def __init__(
        self,
        vocab: Vocab,
        normalizer: Normalizer,
        unk_token_id: int,
        max_input_chars_per_word: int,
        cache_size: int,
        special_ids: Collection[int] = (),
    ) -> None:
        self.vocab = vocab
        self.normalizer = normalizer
        self.unk_token_id = unk_token_id
        self.max_input_chars_per_word = max_input_chars_per_word
        self.cache_size = cache_size
        self._max_token_chars = max(
            (len(t) - len(PREFIX) if t.startswith(PREFIX) else len(t)) for t in vocab.id_to_token
        )
        self._continuations = continuation_table(vocab.token_to_id)
        self._cache: dict[str, Entry] = {}
        # words that are one token spanning the whole match: word -> id (the fast path)
        self._single: dict[str, int] = {}
        self._prefill(frozenset(special_ids))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}  # worker processes rebuild their own cache
        state["_single"] = {}
        return state

    def _prefill(self, special_ids: frozenset[int]) -> None:
        """Seed the cache with the vocabulary's whole-word tokens that text can contain as is
        (one regex word that normalizes to itself): the most frequent words never miss."""
        fullmatch = self.normalizer.word_re.fullmatch
        normalize = self.normalizer.normalize_word
        for tok, i in self.vocab.token_to_id.items():
            too_long = len(tok) > min(_CACHEABLE_CHARS, self.max_input_chars_per_word)
            if too_long or tok.startswith(PREFIX) or i in special_ids:
                continue
            if fullmatch(tok) and normalize(tok) == (tok, None):
                self._cache[tok] = ((i,), (0, len(tok)))
                self._single[tok] = i

    def entry(self, word: str) -> Entry:
        """Wordpiece ids and offsets (relative to the word) of one regex match; cached."""
        if self.normalizer.lowercase and word.isascii():
            lower = word.lower()
            if lower != word:
                # same entry as the lowercased word (ASCII lowercasing keeps every position):
                # "The", "Anarchism" reuse "the", "anarchism"
                entry = self._cache.get(lower) or self.entry(lower)
                self._remember(word, entry)
                return entry
        norm, align = self.normalizer.normalize_word(word)
        if not norm:
            entry: Entry = ((), ())
        else:
            pieces = None
            if len(norm) <= self.max_input_chars_per_word:
                pieces = wordpiece(
                    norm, self.vocab.token_to_id, self._max_token_chars, self._continuations
                )
            if pieces is None:
                pieces = [(self.unk_token_id, 0, len(norm))]
            if align is None:
                flat = tuple(chain.from_iterable(p[1:] for p in pieces))
            else:
                flat = tuple(
                    chain.from_iterable((align[s], align[e - 1] + 1) for _, s, e in pieces)
                )
            entry = (tuple(map(_FIRST, pieces)), flat)
        self._remember(word, entry)
        return entry

    def _remember(self, word: str, entry: Entry) -> None:
        if len(word) <= _CACHEABLE_CHARS:
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
                self._single.clear()
            self._cache[word] = entry
            if len(entry[0]) == 1 and entry[1] == (0, len(word)):
                self._single[word] = entry[0][0]

    def scan(
        self,
        text: str,
        start: int,
        end: int,
        k: int,
        ids: list[int],
        offsets: list[int],
        words: list[int],
    ) -> int:
        """Append the tokens of ``text[start:end]`` (no specials inside) to ``ids``, the flat
        ``offsets`` (s0, e0, s1, e1, ...) and ``words``; returns the next word index. The
        common case (every word one cached token) runs in C-level builtins only: the
        cumulative lengths of the (spaces, word) matches ARE the flat word offsets.
        """
        found = self.normalizer.gap_word_re(text).findall(text, start, end)
        if not found:
            return k
        # cum = [start, s0, e0, s1, e1, ...]: word i spans cum[2i+1]..cum[2i+2]
        cum = list(accumulate(map(len, chain.from_iterable(found)), initial=start))
        single = self._single.get
        word_ids = list(map(single, map(_SECOND, found)))
        n = len(word_ids)
        if None not in word_ids:
            ids += word_ids
            offsets += islice(cum, 1, None)
            words += range(k, k + n)
            return k + n
        get = self._cache.get
        miss = self.entry
        prev = 0
        # only the words that are not a single cached token take the Python-level path (this
        # beats handling every word's cache entry with chained C-level iterators: ~1.7x)
        for i in compress(range(n), map(is_, word_ids, repeat(None))):
            if i > prev:
                ids += word_ids[prev:i]
                offsets += cum[2 * prev + 1 : 2 * i + 1]
                words += range(k, k + i - prev)
                k += i - prev
            prev = i + 1
            w = found[i][1]
            entry = get(w) or miss(w)
            pieces = entry[0]
            if not pieces:
                continue  # only dropped characters: no word
            ids += pieces
            offsets += map(add, entry[1], repeat(cum[2 * i + 1]))
            words += repeat(k, len(pieces))
            k += 1
        if n > prev:
            ids += word_ids[prev:]
            offsets += islice(cum, 2 * prev + 1, None)
            words += range(k, k + n - prev)
            k += n - prev
        return k

    def entries(self, text: str) -> list[Entry]:
        """Cache entries of the words of ``text`` (no specials inside), misses filled in."""
        entries = list(map(self._cache.get, self.normalizer.words_re(text).findall(text)))
        if None in entries:
            words = self.normalizer.words_re(text).findall(text)
            for i in compress(range(len(entries)), map(is_, entries, repeat(None))):
                entries[i] = self.entry(words[i])
        return entries  # type: ignore[return-value]
