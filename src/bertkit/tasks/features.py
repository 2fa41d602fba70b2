"""Feature conversion for classification, pairs, multiple choice and token tagging, plus padding.

Classification and pairs: ``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with segment (token type)
ids 0 for the first part and 1 for the second; pairs that are too long lose tokens from the
longer side first (google's ``_truncate_seq_pair``).

Token tagging (NER), the BERT paper's recipe: each word is split into word pieces and its label
goes on the FIRST piece; the other pieces get -100 (ignored by the loss), so one prediction per
word is read back from its first piece.

Long sentences are never cut silently. When a sentence has more pieces than fit in one window
(``max_length - 2``), it is split at word boundaries into several windows:

1. Words are grouped, left to right, into consecutive *core* groups of at most
   ``max_length - 2 - 2 * context`` pieces (a word longer than a whole window keeps only its
   first pieces; its label is still on its first piece).
2. Each window holds one core group plus up to ``context`` pieces of the neighbouring words on
   each side (whole words only), so core words near a cut still see their neighbours.
3. Only core words are labelled (and read back), so every word is labelled in exactly one window
   and :func:`word_predictions` rebuilds one prediction per word.

A sentence that fits in one window gives one window with no context words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertkit.data.tasks.conll import TaggedSentence
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.data.tasks.swag import MultipleChoiceExample
from bertkit.tokenizer.protocol import Tokenizer

IGNORE_INDEX = -100


@dataclass(frozen=True)
class EncodedInput:
    """Token ids, segment ids and mask of one sequence (unpadded), with its label if any."""

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    label: int | float | None = None


def encode_classification(
    tokenizer: Tokenizer, examples: Sequence[ClassificationExample], max_length: int
) -> list[EncodedInput]:
    """Encode single texts or pairs (segment ids 0/1), truncating the longer side first."""
    out = []
    for ex in examples:
        enc = tokenizer.encode(
            ex.text_a, ex.text_b, max_length=max_length, truncation="longest_first"
        )
        out.append(
            EncodedInput(
                list(enc.input_ids), list(enc.token_type_ids), list(enc.attention_mask), ex.label
            )
        )
    return out


def encode_multiple_choice(
    tokenizer: Tokenizer, examples: Sequence[MultipleChoiceExample], max_length: int
) -> list[list[EncodedInput]]:
    """Encode each example's choices as pairs (context, start + ending); label on every choice."""
    out = []
    for ex in examples:
        choices = []
        for first, second in ex.choices():
            enc = tokenizer.encode(first, second, max_length=max_length, truncation="longest_first")
            choices.append(
                EncodedInput(
                    list(enc.input_ids),
                    list(enc.token_type_ids),
                    list(enc.attention_mask),
                    ex.label,
                )
            )
        out.append(choices)
    return out


def pad_batch(
    items: Sequence[EncodedInput], pad_id: int = 0, length: int | None = None
) -> dict[str, np.ndarray]:
    """Pad to the longest item (or ``length``): ``input_ids, token_type_ids, attention_mask`` (B, T)
    int64, plus ``labels`` (B,) when every item has a label (float32 if any label is a float)."""
    t = length if length is not None else max(len(x.input_ids) for x in items)
    ids = np.full((len(items), t), pad_id, dtype=np.int64)
    types = np.zeros((len(items), t), dtype=np.int64)
    mask = np.zeros((len(items), t), dtype=np.int64)
    for i, x in enumerate(items):
        n = len(x.input_ids)
        ids[i, :n], types[i, :n], mask[i, :n] = x.input_ids, x.token_type_ids, x.attention_mask
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    labels = [x.label for x in items]
    if items and all(y is not None for y in labels):
        is_float = any(isinstance(y, float) for y in labels)
        batch["labels"] = np.asarray(labels, dtype=np.float32 if is_float else np.int64)
    return batch


def pad_multiple_choice(
    items: Sequence[Sequence[EncodedInput]], pad_id: int = 0
) -> dict[str, np.ndarray]:
    """Pad a batch of choice lists to (B, C, T) arrays; ``labels`` (B,) when labelled."""
    t = max(len(c.input_ids) for x in items for c in x)
    per = [pad_batch(list(x), pad_id, t) for x in items]
    batch = {
        k: np.stack([p[k] for p in per]) for k in ("input_ids", "token_type_ids", "attention_mask")
    }
    if all("labels" in p for p in per):
        batch["labels"] = np.asarray([int(p["labels"][0]) for p in per], dtype=np.int64)
    return batch


@dataclass(frozen=True)
class TokenWindow:
    """One window of a tagged sentence.

    ``word_ids[i]`` is the sentence word of token i (None for [CLS]/[SEP]). ``labels[i]`` is the
    tag id on the first piece of each core word and -100 elsewhere (all -100 without tags).
    Core words are ``range(*core)``; only they are read back by :func:`word_predictions`.
    """

    sentence_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    labels: list[int]
    word_ids: list[int | None]
    core: tuple[int, int]

    def label_positions(self) -> list[tuple[int, int]]:
        """``(token position, word index)`` of the first piece of every core word."""
        out, seen = [], set()
        for pos, w in enumerate(self.word_ids):
            if w is not None and self.core[0] <= w < self.core[1] and w not in seen:
                seen.add(w)
                out.append((pos, w))
        return out


def word_pieces(tokenizer: Tokenizer, words: Sequence[str]) -> list[list[int]]:
    """Piece ids of each word; a word that yields no piece (e.g. only control characters) gets
    [UNK] so every word keeps a position and a prediction."""
    out = []
    for w in words:
        ids = list(tokenizer.encode_ids(w))
        out.append(ids or [tokenizer.unk_token_id])
    return out


def _core_groups(lengths: Sequence[int], budget: int) -> list[tuple[int, int]]:
    groups, start, used = [], 0, 0
    for i, n in enumerate(lengths):
        if used and used + n > budget:
            groups.append((start, i))
            start, used = i, 0
        used += n
    if lengths:
        groups.append((start, len(lengths)))
    return groups


def encode_tagged(
    tokenizer: Tokenizer,
    sentences: Sequence[TaggedSentence] | Sequence[Sequence[str]],
    label_to_id: dict[str, int] | None = None,
    *,
    max_length: int,
    context: int = 0,
) -> list[TokenWindow]:
    """Encode tagged sentences (or plain word lists) into windows; see the module doc.

    With ``label_to_id`` and :class:`TaggedSentence` input, the first piece of each core word
    gets its tag id (a tag outside ``label_to_id`` raises ValueError naming it and the
    sentence's line). ``context`` is the number of
    extra pieces of neighbouring words on each side of a split window (0: no overlap).
    """
    content = max_length - 2
    core_budget = content - 2 * context
    if core_budget < 1:
        raise ValueError(f"context {context} leaves no room in windows of {max_length} tokens")
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    windows: list[TokenWindow] = []
    for s_index, sent in enumerate(sentences):
        words = sent.tokens if isinstance(sent, TaggedSentence) else list(sent)
        tags = sent.tags if isinstance(sent, TaggedSentence) and label_to_id is not None else None
        if tags is not None and label_to_id is not None:
            unknown = next((t for t in tags if t not in label_to_id), None)
            if unknown is not None:
                raise ValueError(
                    f"sentence {s_index} (line {sent.line}): tag {unknown!r} is not in the label "
                    f"list {sorted(label_to_id)}"
                )
        pieces = [p[:content] for p in word_pieces(tokenizer, words)]
        lengths = [len(p) for p in pieces]
        groups = (
            [(0, len(words))] if sum(lengths) <= content else _core_groups(lengths, core_budget)
        )
        for a, b in groups:
            left, right, used = a, b, sum(lengths[a:b])
            while (
                left > 0
                and sum(lengths[left - 1 : a]) <= context
                and used + lengths[left - 1] <= content
            ):
                left -= 1
                used += lengths[left]
            while (
                right < len(words)
                and sum(lengths[b : right + 1]) <= context
                and used + lengths[right] <= content
            ):
                used += lengths[right]
                right += 1
            ids, wids, labels = [cls_id], [None], [IGNORE_INDEX]
            for w in range(left, right):
                for k, piece in enumerate(pieces[w]):
                    ids.append(piece)
                    wids.append(w)
                    labelled = tags is not None and k == 0 and a <= w < b
                    labels.append(label_to_id[tags[w]] if labelled else IGNORE_INDEX)
            ids.append(sep_id)
            wids.append(None)
            labels.append(IGNORE_INDEX)
            n = len(ids)
            windows.append(TokenWindow(s_index, ids, [0] * n, [1] * n, labels, wids, (a, b)))
    return windows


def word_predictions(
    windows: Sequence[TokenWindow],
    token_predictions: Sequence[Sequence[int]],
    num_words: Sequence[int],
) -> list[list[int]]:
    """Per-sentence, per-word predictions read from each word's first piece in its core window.

    ``token_predictions[i]`` holds one predicted id per token of ``windows[i]`` (it may be
    padded longer); ``num_words[s]`` is the word count of sentence s. Raises ValueError if some
    word received no prediction.
    """
    out: list[dict[int, int]] = [{} for _ in num_words]
    for win, preds in zip(windows, token_predictions):
        for pos, w in win.label_positions():
            out[win.sentence_index][w] = int(preds[pos])
    result = []
    for i, (d, n) in enumerate(zip(out, num_words)):
        if len(d) != n:
            raise ValueError(f"sentence {i}: some words got no prediction")
        result.append([d[w] for w in range(n)])
    return result


def pad_token_windows(windows: Sequence[TokenWindow], pad_id: int = 0) -> dict[str, np.ndarray]:
    """Pad windows to (B, T) arrays: ids, segment ids, mask and ``labels`` (-100 padding)."""
    t = max(len(w.input_ids) for w in windows)
    batch = pad_batch(
        [EncodedInput(w.input_ids, w.token_type_ids, w.attention_mask) for w in windows], pad_id, t
    )
    labels = np.full((len(windows), t), IGNORE_INDEX, dtype=np.int64)
    for i, w in enumerate(windows):
        labels[i, : len(w.labels)] = w.labels
    batch["labels"] = labels
    return batch
