"""BertTokenizer: BERT's WordPiece tokenization with offsets, pairs, truncation and batching.

Speed comes from working word by word: one precompiled regex finds the words of the original
text (see normalize.py), and a per-tokenizer cache maps each distinct word string to its
wordpiece ids and relative offsets, so the per-character work (normalization, greedy matching)
runs once per distinct word, not once per occurrence. The cache is bounded (cleared when full).
"""

from __future__ import annotations

import logging
import re
from array import array
from collections.abc import Sequence
from itertools import accumulate, chain, compress, islice, repeat
from operator import add, is_, itemgetter
from pathlib import Path
from typing import Any, overload

from bertkit import hub
from bertkit.errors import ConfigError
from bertkit.tokenizer import conventions
from bertkit.tokenizer.batch import TokenArrays
from bertkit.tokenizer.conventions import VERY_LARGE_INTEGER, write_config
from bertkit.tokenizer.encoding import Encoding, Segment, encode_segments
from bertkit.tokenizer.normalize import Normalizer
from bertkit.tokenizer.tokenizer_json import folder_arguments, write_tokenizer_json
from bertkit.tokenizer.wordpiece import (
    PREFIX,
    SPECIAL_TOKENS,
    Vocab,
    continuation_table,
    wordpiece,
)

log = logging.getLogger(__name__)

# cache entry: (ids, offsets relative to the word, flattened (s0, e0, s1, e1, ...))
_Entry = tuple[tuple[int, ...], tuple[int, ...]]
_CACHEABLE_CHARS = 64
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


class BertTokenizer:
    """BERT tokenizer with Hugging Face BertTokenizerFast semantics (ids, types, offsets).

    Args:
        vocab_or_path: a Vocab or the path of a vocab.txt.
        do_lower_case: lowercase (and, unless ``strip_accents`` says otherwise, strip accents).
        strip_accents: None follows ``do_lower_case``, as in BERT.
        tokenize_chinese_chars: split CJK ideographs into one-character words.
        max_input_chars_per_word: longer words (after normalization) become [UNK].
        cache_size: distinct words remembered (the cache is cleared when it is full).
        model_max_length: the longest input (in tokens, specials included) the model takes;
            ``tok(...)`` truncates to it with ``truncation=True`` and no ``max_length``, pads to
            it with ``padding="max_length"``, and warns once when an untruncated row is longer.
            The default, ``VERY_LARGE_INTEGER`` (``int(1e30)``, as in transformers), means no
            limit; ``None`` means the same. ``from_pretrained`` reads it from
            tokenizer_config.json.
        split_special_tokens: treat literal special tokens in the text as text (False, the
            transformers default, turns "[MASK]" typed by a user into the mask token).
    """

    def __init__(
        self,
        vocab_or_path: Vocab | str | Path,
        do_lower_case: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        max_input_chars_per_word: int = 100,
        cache_size: int = 1 << 19,
        model_max_length: int | None = VERY_LARGE_INTEGER,
        split_special_tokens: bool = False,
    ) -> None:
        if model_max_length is None:
            model_max_length = VERY_LARGE_INTEGER
        if isinstance(model_max_length, bool) or not isinstance(model_max_length, int):
            raise ConfigError(f"model_max_length must be an integer, got {model_max_length!r}")
        if model_max_length < 0:
            raise ConfigError(f"model_max_length must be >= 0, got {model_max_length}")
        self.model_max_length = model_max_length
        self.split_special_tokens = bool(split_special_tokens)
        # the "longer than the model's maximum" warning is given once per tokenizer
        self._warned_too_long = False
        self.vocab = (
            vocab_or_path if isinstance(vocab_or_path, Vocab) else Vocab.from_file(vocab_or_path)
        )
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.max_input_chars_per_word = max_input_chars_per_word
        self.cache_size = cache_size
        self.normalizer = Normalizer(do_lower_case, strip_accents, tokenize_chinese_chars)
        v = self.vocab
        self.pad_token_id = v.special_id("[PAD]")
        unk = v.special_id("[UNK]")
        if unk is None:
            raise ConfigError("the vocabulary has no [UNK] token")
        self.unk_token_id: int = unk
        self.cls_token_id = v.special_id("[CLS]")
        self.sep_token_id = v.special_id("[SEP]")
        self.mask_token_id = v.special_id("[MASK]")
        specials = [t for t in SPECIAL_TOKENS if t in v]
        self.all_special_ids = frozenset(v.token_to_id[t] for t in specials)
        # special tokens are matched in the raw text, case-sensitively, longest first
        alternatives = "|".join(re.escape(t) for t in sorted(specials, key=len, reverse=True))
        self._special_re = re.compile(alternatives) if specials else None
        self._max_token_chars = max(
            (len(t) - len(PREFIX) if t.startswith(PREFIX) else len(t)) for t in v.id_to_token
        )
        self._continuations = continuation_table(v.token_to_id)
        self._cache: dict[str, _Entry] = {}
        # words that are one token spanning the whole match: word -> id (the fast path)
        self._single: dict[str, int] = {}
        self._prefill()

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, directory: str | Path, **overrides: Any) -> BertTokenizer:
        """Load a folder's tokenizer: the vocabulary from ``vocab.txt``, or from
        ``tokenizer.json`` when the folder has no vocab.txt (where both exist vocab.txt is the
        source, and a tokenizer.json that disagrees is logged once); the settings from
        tokenizer.json's normalizer, then tokenizer_config.json (``do_lower_case``,
        ``strip_accents``, ``tokenize_chinese_chars``, ``model_max_length``), then
        ``overrides``, each winning over the one before (see ``tokenizer_json.folder_arguments``).

        As in transformers, config.json (``max_position_embeddings``) is not consulted: without
        ``model_max_length`` in tokenizer_config.json there is no limit.
        """
        directory = hub.resolve(directory)  # a folder, or a Hub id
        vocab, kwargs = folder_arguments(directory)
        kwargs.update(overrides)
        return cls(vocab, **kwargs)

    def save_pretrained(self, directory: str | Path) -> None:
        """Write vocab.txt, tokenizer.json and tokenizer_config.json, each atomically: what
        bertkit, transformers (``AutoTokenizer`` gives the fast tokenizer) and
        text-embeddings-inference read."""
        directory = Path(directory)
        self.vocab.save(directory / "vocab.txt")
        write_tokenizer_json(self, directory)
        write_config(directory, self.do_lower_case, self.strip_accents, self.tokenize_chinese_chars,
                     self.model_max_length)  # fmt: skip

    def __len__(self) -> int:
        return len(self.vocab)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}  # worker processes rebuild their own cache
        state["_single"] = {}

        return state

    def _prefill(self) -> None:
        """Seed the cache with the vocabulary's whole-word tokens that text can contain as is
        (one regex word that normalizes to itself): the most frequent words never miss."""
        fullmatch = self.normalizer.word_re.fullmatch
        normalize = self.normalizer.normalize_word
        for tok, i in self.vocab.token_to_id.items():
            too_long = len(tok) > min(_CACHEABLE_CHARS, self.max_input_chars_per_word)
            if too_long or tok.startswith(PREFIX) or i in self.all_special_ids:
                continue
            if fullmatch(tok) and normalize(tok) == (tok, None):
                self._cache[tok] = ((i,), (0, len(tok)))
                self._single[tok] = i

    # --- words --------------------------------------------------------------------------------

    def _word_entry(self, word: str) -> _Entry:
        """Wordpiece ids and offsets (relative to the word) of one regex match; cached."""
        if self.normalizer.lowercase and word.isascii():
            lower = word.lower()
            if lower != word:
                # same entry as the lowercased word (ASCII lowercasing keeps every position):
                # "The", "Anarchism" reuse "the", "anarchism"
                entry = self._cache.get(lower) or self._word_entry(lower)
                self._remember(word, entry)
                return entry
        norm, align = self.normalizer.normalize_word(word)
        if not norm:
            entry: _Entry = ((), ())
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

    def _remember(self, word: str, entry: _Entry) -> None:
        if len(word) <= _CACHEABLE_CHARS:
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
                self._single.clear()
            self._cache[word] = entry
            if len(entry[0]) == 1 and entry[1] == (0, len(word)):
                self._single[word] = entry[0][0]

    def _pieces(self, text: str) -> list[tuple[int, int, bool]]:
        """(start, end, is_special) ranges of ``text``: special tokens and the text between.

        With ``split_special_tokens`` a literal ``[CLS]`` (etc.) in the text is ordinary text
        (split by the basic tokenizer like any other), as Google's original tokenizer and
        transformers' ``split_special_tokens=True`` treat it: untrusted text cannot inject one.
        """
        if self._special_re is None or self.split_special_tokens or "[" not in text:
            return [(0, len(text), False)]
        out = []
        pos = 0
        for m in self._special_re.finditer(text):
            if m.start() > pos:
                out.append((pos, m.start(), False))
            out.append((m.start(), m.end(), True))
            pos = m.end()
        if pos < len(text):
            out.append((pos, len(text), False))
        return out

    def segment(self, text: str) -> Segment:
        """Wordpiece ids, character offsets and word indices of ``text`` (no special tokens)."""
        ids: list[int] = []
        offsets: list[int] = []
        words: list[int] = []
        k = 0
        tok_to_id = self.vocab.token_to_id
        for start, end, special in self._pieces(text):
            if special:
                ids.append(tok_to_id[text[start:end]])
                offsets += (start, end)
                words.append(k)
                k += 1
            else:
                k = self._scan(text, start, end, k, ids, offsets, words)
        return Segment(ids, array("I", offsets), words)

    def _scan(
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
        miss = self._word_entry
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

    def _word_entries(self, text: str) -> list[_Entry]:
        """Cache entries of the words of ``text`` (no specials inside), misses filled in."""
        entries = list(map(self._cache.get, self.normalizer.words_re(text).findall(text)))
        if None in entries:
            words = self.normalizer.words_re(text).findall(text)
            for i in compress(range(len(entries)), map(is_, entries, repeat(None))):
                entries[i] = self._word_entry(words[i])
        return entries  # type: ignore[return-value]

    def encode_words(self, text: str) -> list[list[int]]:
        """Wordpiece ids grouped by basic-tokenizer word (for whole-word masking); no specials."""
        out: list[list[int]] = []
        for start, end, special in self._pieces(text):
            if special:
                out.append([self.vocab.token_to_id[text[start:end]]])
            else:
                sub = text if (start, end) == (0, len(text)) else text[start:end]
                out += [list(e[0]) for e in self._word_entries(sub) if e[0]]
        return out

    def encode_ids(self, text: str) -> list[int]:
        """Wordpiece ids of ``text`` without special tokens or offsets (the fastest path)."""
        pieces = self._pieces(text)
        if len(pieces) == 1 and not pieces[0][2]:
            return list(chain.from_iterable(map(_FIRST, self._word_entries(text))))
        return [i for word in self.encode_words(text) for i in word]

    def tokenize(self, text: str) -> list[str]:
        """Wordpiece strings of ``text`` (special tokens found in the text are kept whole)."""
        itos = self.vocab.id_to_token
        return [itos[i] for i in self.encode_ids(text)]

    @overload
    def convert_tokens_to_ids(self, tokens: str) -> int: ...  # type: ignore[overload-overlap]
    @overload
    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]: ...

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Ids of tokens (unknown tokens map to [UNK]); a single string gives a single id."""
        get = self.vocab.token_to_id.get
        unk = self.unk_token_id
        if isinstance(tokens, str):
            return get(tokens, unk)
        return [get(t, unk) for t in tokens]

    @overload
    def convert_ids_to_tokens(self, ids: int) -> str: ...
    @overload
    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]: ...

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        """Tokens of ids; a single id gives a single token. Raises IndexError for bad ids."""
        itos = self.vocab.id_to_token
        if isinstance(ids, int):
            return itos[ids]
        return [itos[int(i)] for i in ids]

    # --- encodings ----------------------------------------------------------------------------

    def encode(
        self,
        text: str,
        text_pair: str | None = None,
        *,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        truncation: str | bool = "longest_first",
        stride: int = 0,
        return_overflowing_tokens: bool = False,
    ) -> Encoding:
        """Encode a text or a pair like BertTokenizerFast (see encoding.py for the rules).

        Truncation applies only when ``max_length`` is given; ``max_length`` counts the special
        tokens. With ``return_overflowing_tokens`` the windows cut off (each overlapping the
        previous by ``stride`` tokens) are in ``Encoding.overflowing``.
        """
        a = self.segment(text)
        b = None if text_pair is None else self.segment(text_pair)
        return encode_segments(
            a,
            b,
            cls_id=self.cls_token_id,
            sep_id=self.sep_token_id,
            add_special_tokens=add_special_tokens,
            max_length=max_length,
            truncation=truncation,
            stride=stride,
            return_overflowing_tokens=return_overflowing_tokens,
        )

    def encode_batch(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        *,
        num_workers: int = 1,
        chunk_size: int = 256,
        **kwargs: Any,
    ) -> list[Encoding]:
        """``encode`` over many texts (or pairs), in ``num_workers`` processes when > 1.

        Results are in input order. Worker processes each keep their own word cache; the pool
        lives only for this call. ``kwargs`` are those of ``encode``. The cyclic garbage
        collector is paused while the batch runs (see ``parallel.gc_paused``): a batch is
        ~1.7x faster than calling ``encode`` in a loop.
        """
        from bertkit.tokenizer.parallel import encode_batch

        return encode_batch(self, texts, text_pairs, num_workers, chunk_size, kwargs)

    def encode_arrays(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        *,
        num_workers: int = 1,
        chunk_size: int = 2048,
        **kwargs: Any,
    ) -> TokenArrays:
        """``encode`` over many texts, returned as flat numpy arrays (``TokenArrays``: ids,
        token types, offsets, row boundaries): the fast path for corpus and file tokenization,
        because workers send back a few buffers instead of millions of Python objects.
        ``kwargs`` are those of ``encode`` (no overflow windows). ``chunk_size`` texts go to a
        worker at a time (2048 Wikipedia lines: the parent's per-chunk cost drops to ~5% of
        the work, from ~10% with 512).
        """
        from bertkit.tokenizer.parallel import encode_arrays

        return encode_arrays(self, texts, text_pairs, num_workers, chunk_size, kwargs)

    __call__ = conventions.call
    decode = conventions.decode
