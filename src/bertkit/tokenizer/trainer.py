"""WordPiece vocabulary training: streaming word counts, then BPE-style merges with ``##``.

Algorithm (the one Hugging Face's WordPieceTrainer uses, written from scratch here):

1. **Count words, streaming.** Each text is split into BERT words with the tokenizer's own
   regex (so training and tokenization agree on word boundaries), and raw word strings are
   counted. Memory is bounded by ``max_words``: when the table grows past it, the rarest words
   are dropped (every word at or below a count threshold that rises as needed). A pruned word
   that comes back restarts from zero, so counts of very rare words are lower bounds; the
   frequent words that decide the vocabulary are exact in practice.
2. **Normalize and filter.** Raw words are normalized (lowercase / accents as configured) and
   merged; the ``limit_alphabet`` most frequent characters form the alphabet, and every one of
   them enters the vocabulary twice, as ``c`` and ``##c``, so that any word of known characters
   can always be tokenized. Words with other characters are left out of the merges.
3. **Merge.** Each word starts as ``c0 ##c1 ##c2 ...``. Repeatedly, the most frequent adjacent
   pair (ties: lower ids first) with count >= ``min_frequency`` is merged into one token
   (``un`` + ``##want`` -> ``unwant``), until the vocabulary has ``vocab_size`` tokens. Pair
   counts are updated incrementally: only the words containing the merged pair are revisited
   (an index pair -> words finds them), and a heap with lazy invalidation yields the next pair.

Why BPE-style merges rather than Google's likelihood-scored WordPiece: frequency merges give
near-identical vocabularies for greedy longest-match tokenization, are simple to update
incrementally, and match what ``tokenizers`` users already get; the tokens-per-word of the
result is measured against the MiniLM (bert-base-uncased) vocabulary in docs/tokenizer.md.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import ConfigError
from bertkit.progress import progress
from bertkit.tokenizer.normalize import Normalizer
from bertkit.tokenizer.wordpiece import PREFIX, SPECIAL_TOKENS, Vocab


@dataclass(frozen=True)
class WordPieceSettings:
    """What a WordPiece vocabulary is trained to: the defaults of :func:`train_wordpiece` and the
    flags of ``bertkit train-vocab``."""

    vocab_size: int = 30522
    """Tokens in the vocabulary, special tokens and alphabet included."""
    min_frequency: int = 2
    """A pair of tokens merges only if it occurs at least this often."""
    limit_alphabet: int = 1000
    """The most frequent characters kept as base tokens (each also as ##c)."""
    max_words: int = 1_000_000
    """Distinct words held while counting (bounds memory: past it the rarest are dropped)."""


@dataclass
class TrainStats:
    """Summary of one training run."""

    texts: int
    words: int
    distinct_words: int
    prunes: int
    alphabet: int
    merges: int
    vocab_size: int


def count_words(
    texts: Iterable[str], normalizer: Normalizer, max_words: int, show_progress: bool | None = None
) -> tuple[Counter[str], int, int, int]:
    """Counts of raw (unnormalized) words, pruned to stay under ``max_words`` entries.

    Returns (counts, number of texts, number of words, number of prunes).
    """
    counts: Counter[str] = Counter()
    findall = normalizer.word_re.findall
    n_texts = n_words = prunes = 0
    threshold = 1
    bar = progress(texts, desc="counting words", unit=" texts", enabled=show_progress)
    for text in bar:
        words = findall(text)
        counts.update(words)
        n_texts += 1
        n_words += len(words)
        if len(counts) > max_words:
            prunes += 1
            while len(counts) > max_words // 2:
                for w in [w for w, c in counts.items() if c <= threshold]:
                    del counts[w]
                if len(counts) > max_words // 2:
                    threshold += 1
    return counts, n_texts, n_words, prunes


def _merged(a: str, b: str) -> str:
    return a + (b[len(PREFIX) :] if b.startswith(PREFIX) else b)


def learn_merges(
    word_counts: dict[str, int],
    alphabet: list[str],
    budget: int,
    min_frequency: int,
    show_progress: bool | None = None,
) -> list[str]:
    """New tokens (at most ``budget``), in merge order, from BPE merges over ``word_counts``.

    ``alphabet`` lists the base characters; every word must consist of them.
    """
    tokens: list[str] = []
    index: dict[str, int] = {}

    def token_id(s: str) -> int:
        i = index.get(s)
        if i is None:
            i = index[s] = len(tokens)
            tokens.append(s)
        return i

    for c in alphabet:
        token_id(c)
        token_id(PREFIX + c)
    n_base = len(tokens)
    words: list[list[int]] = []
    freq: list[int] = []
    for w, c in word_counts.items():
        words.append([index[w[0]], *(index[PREFIX + ch] for ch in w[1:])])
        freq.append(c)
    pair_count: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for wi, syms in enumerate(words):
        c = freq[wi]
        for p in itertools.pairwise(syms):
            pair_count[p] = pair_count.get(p, 0) + c
            where.setdefault(p, set()).add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    bar = progress(total=budget, desc="merging", unit=" tokens", enabled=show_progress)
    while len(tokens) - n_base < budget and heap:
        neg, pair = heapq.heappop(heap)
        current = pair_count.get(pair, 0)
        if current != -neg:
            if current > 0:
                heapq.heappush(heap, (-current, pair))
            continue
        if current < min_frequency:
            break
        a, b = pair
        before = len(tokens)
        new = token_id(_merged(tokens[a], tokens[b]))
        if len(tokens) > before:
            bar.update(1)
        touched: dict[tuple[int, int], int] = {}
        for wi in where.pop(pair, ()):
            syms = words[wi]
            if len(syms) < 2:
                continue
            out = []
            i = 0
            n = len(syms)
            changed = False
            while i < n:
                if i + 1 < n and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                    changed = True
                else:
                    out.append(syms[i])
                    i += 1
            if not changed:
                continue
            c = freq[wi]
            for p in itertools.pairwise(syms):
                pair_count[p] -= c
            for p in itertools.pairwise(out):
                pair_count[p] = pair_count.get(p, 0) + c
                if new in p:
                    touched[p] = 1
                    where.setdefault(p, set()).add(wi)
            words[wi] = out
        pair_count.pop(pair, None)
        for p in touched:
            if pair_count.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_count[p], p))
    bar.close()
    return tokens[n_base:]


def train_wordpiece(
    texts: Iterable[str],
    vocab_size: int = WordPieceSettings.vocab_size,
    min_frequency: int = WordPieceSettings.min_frequency,
    special_tokens: tuple[str, ...] | list[str] = SPECIAL_TOKENS,
    lowercase: bool = True,
    *,
    strip_accents: bool | None = None,
    limit_alphabet: int = WordPieceSettings.limit_alphabet,
    max_words: int = WordPieceSettings.max_words,
    output: str | Path | None = None,
    show_progress: bool | None = None,
) -> tuple[Vocab, TrainStats]:
    """Train a WordPiece vocabulary from an iterator of texts (see the module docstring).

    Args:
        texts: any iterable of strings, consumed once (streaming).
        vocab_size, min_frequency, limit_alphabet, max_words: the fields of
            :class:`WordPieceSettings` (their defaults are its).
        special_tokens: first ids of the vocabulary, in this order.
        lowercase: uncased vocabulary (lowercase + strip accents, like BERT uncased).
        output: when given, vocab.txt is written there atomically.

    Returns the Vocab and a TrainStats summary.
    """
    normalizer = Normalizer(lowercase, strip_accents, tokenize_chinese_chars=True)
    raw, n_texts, n_words, prunes = count_words(texts, normalizer, max_words, show_progress)
    counts: Counter[str] = Counter()
    for w, c in raw.items():
        norm, _ = normalizer.normalize_word(w)
        if 0 < len(norm) <= 100:
            counts[norm] += c
    del raw
    chars: Counter[str] = Counter()
    for w, c in counts.items():
        for ch in w:
            chars[ch] += c
    alphabet = [ch for ch, _ in chars.most_common(limit_alphabet)]
    alphabet.sort()
    known = set(alphabet)
    usable = {w: c for w, c in counts.items() if known.issuperset(w)}
    specials = list(dict.fromkeys(special_tokens))
    budget = vocab_size - len(specials) - 2 * len(alphabet)
    if budget < 0:
        raise ConfigError(  # a ValueError too; the CLI prints it as one line
            f"vocab_size={vocab_size} is smaller than the specials plus the alphabet "
            f"({len(specials)} + 2 x {len(alphabet)}); lower limit_alphabet or raise vocab_size"
        )
    merged = learn_merges(usable, alphabet, budget, min_frequency, show_progress)
    base = alphabet + [PREFIX + c for c in alphabet]
    tokens = list(dict.fromkeys(specials + base + merged))
    vocab = Vocab(tokens[:vocab_size])
    if output is not None:
        vocab.save(output)
    stats = TrainStats(
        n_texts, n_words, len(counts), prunes, len(alphabet), len(merged), len(vocab)
    )
    return vocab, stats
