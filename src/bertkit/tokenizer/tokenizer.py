"""BertTokenizer: BERT's WordPiece tokenization with offsets, pairs, truncation and batching.

Speed comes from working word by word: one precompiled regex finds the words of the original
text (see normalize.py), and a per-tokenizer word cache (words.py) maps each distinct word
string to its wordpiece ids and relative offsets, so the per-character work (normalization,
greedy matching) runs once per distinct word, not once per occurrence. transformers' calling
conventions (``tok(...)``, ``decode``) come from :class:`conventions.TransformersConventions`.
"""

from __future__ import annotations

import logging
import re
from array import array
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any, overload

from bertkit import hub
from bertkit.errors import ConfigError
from bertkit.tokenizer.batch import TokenArrays
from bertkit.tokenizer.conventions import VERY_LARGE_INTEGER, TransformersConventions, write_config
from bertkit.tokenizer.encoding import Encoding, Segment, encode_segments
from bertkit.tokenizer.folder import folder_arguments
from bertkit.tokenizer.normalize import Normalizer
from bertkit.tokenizer.tokenizer_json import write_tokenizer_json
from bertkit.tokenizer.wordpiece import SPECIAL_TOKENS, Vocab
from bertkit.tokenizer.words import WordCache

log = logging.getLogger(__name__)

_FIRST = itemgetter(0)


class BertTokenizer(TransformersConventions):
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
            where = "the vocabulary" if isinstance(vocab_or_path, Vocab) else vocab_or_path
            # e.g. a .tsv passed as --vocab: name the file
            raise ConfigError(f"{where}: no [UNK] token (expected a WordPiece vocab.txt)")
        self.unk_token_id: int = unk
        self.cls_token_id = v.special_id("[CLS]")
        self.sep_token_id = v.special_id("[SEP]")
        self.mask_token_id = v.special_id("[MASK]")
        specials = [t for t in SPECIAL_TOKENS if t in v]
        self.all_special_ids = frozenset(v.token_to_id[t] for t in specials)
        # special tokens are matched in the raw text, case-sensitively, longest first
        alternatives = "|".join(re.escape(t) for t in sorted(specials, key=len, reverse=True))
        self._special_re = re.compile(alternatives) if specials else None
        self.words = WordCache(
            v, self.normalizer, unk, max_input_chars_per_word, cache_size, self.all_special_ids
        )

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, directory: str | Path, **overrides: Any) -> BertTokenizer:
        """Load a folder's tokenizer: the vocabulary from ``vocab.txt``, or from
        ``tokenizer.json`` when the folder has no vocab.txt (where both exist vocab.txt is the
        source, and a tokenizer.json that disagrees is logged once); the settings from
        tokenizer.json's normalizer, then tokenizer_config.json (``do_lower_case``,
        ``strip_accents``, ``tokenize_chinese_chars``, ``model_max_length``), then
        ``overrides``, each winning over the one before (see ``tokenizer.folder.folder_arguments``).

        As in transformers, config.json (``max_position_embeddings``) is not consulted: without
        ``model_max_length`` in tokenizer_config.json there is no limit.
        """
        directory = hub.resolve(directory)  # a folder, or a Hub id
        vocab, kwargs = folder_arguments(directory)
        kwargs.update(overrides)
        return cls(vocab, **kwargs)

    def lowercased(self) -> BertTokenizer:
        """This tokenizer lowercasing every text first, its accents kept as they were: what
        sentence-transformers makes of a cased tokenizer when ``sentence_bert_config.json`` says
        ``do_lower_case`` (a ``Lowercase`` normalizer before the tokenizer's own, which strips no
        accent it did not strip before). Itself when it lowercases already."""
        if self.do_lower_case:
            return self
        return BertTokenizer(
            self.vocab,
            do_lower_case=True,
            strip_accents=self.normalizer.strip,
            tokenize_chinese_chars=self.tokenize_chinese_chars,
            max_input_chars_per_word=self.max_input_chars_per_word,
            cache_size=self.cache_size,
            model_max_length=self.model_max_length,
            split_special_tokens=self.split_special_tokens,
        )

    def save_pretrained(self, directory: str | Path) -> None:
        """Write vocab.txt, tokenizer.json and tokenizer_config.json, each atomically: what
        bertkit, transformers (``AutoTokenizer`` gives the fast tokenizer) and
        text-embeddings-inference read."""
        directory = Path(directory)
        self.vocab.save(directory / "vocab.txt")
        write_tokenizer_json(self, directory)
        write_config(
            directory,
            self.do_lower_case,
            self.strip_accents,
            self.tokenize_chinese_chars,
            self.model_max_length,
        )

    def __len__(self) -> int:
        return len(self.vocab)

    # --- words --------------------------------------------------------------------------------

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
                k = self.words.scan(text, start, end, k, ids, offsets, words)
        return Segment(ids, array("I", offsets), words)

    def encode_words(self, text: str) -> list[list[int]]:
        """Wordpiece ids grouped by basic-tokenizer word (for whole-word masking); no specials."""
        out: list[list[int]] = []
        for start, end, special in self._pieces(text):
            if special:
                out.append([self.vocab.token_to_id[text[start:end]]])
            else:
                sub = text if (start, end) == (0, len(text)) else text[start:end]
                out += [list(e[0]) for e in self.words.entries(sub) if e[0]]
        return out

    def encode_ids(self, text: str) -> list[int]:
        """Wordpiece ids of ``text`` without special tokens or offsets (the fastest path)."""
        pieces = self._pieces(text)
        if len(pieces) == 1 and not pieces[0][2]:
            return list(chain.from_iterable(map(_FIRST, self.words.entries(text))))
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
