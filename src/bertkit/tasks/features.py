"""Feature conversion for classification, pairs, multiple choice and token tagging, plus padding.

Classification and pairs: ``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with segment (token type)
ids 0 for the first part and 1 for the second. An input longer than ``max_length`` becomes
several windows (:mod:`bertkit.tasks.windows`: one segment of a pair kept whole, the other slid
over), each carrying the input's index and label; with ``truncate`` pairs lose tokens from the
longer side first (google's ``_truncate_seq_pair``) and single texts their end.

Multiple choice keeps truncation (a window of an ending without the context, or of the context
without the ending, scores nothing): each choice is cut longest-first, and the inputs cut are
counted (``EncodedInput.truncated``).

Token tagging (NER), the BERT paper's recipe: each word is split into word pieces and its label
goes on the FIRST piece; the other pieces get -100 (ignored by the loss), so one prediction per
word is read back from its first piece. A sentence (or, with document context, a document) with
more pieces than fit in one window (``max_length - 2``) is windowed over its pieces with the
SQuAD rule; training labels every first piece in every window that holds it, prediction reads
each word from the window where its first piece has the maximum context
(:func:`word_predictions`), so every word gets exactly one prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bertkit.data.tasks.conll import TaggedSentence
from bertkit.data.tasks.glue import ClassificationExample
from bertkit.data.tasks.swag import MultipleChoiceExample
from bertkit.tasks.windows import WindowConfig, plan_pair, slices
from bertkit.tokenizer.encoding import truncation_lengths
from bertkit.tokenizer.protocol import Tokenizer

IGNORE_INDEX = -100


@dataclass(frozen=True)
class EncodedInput:
    """Token ids, segment ids and mask of one sequence (unpadded), with its label if any;
    ``example_index`` is the input it is a window of, ``truncated`` whether that input was cut,
    ``input_length`` the tokens of that whole input (specials included: what a length limit on
    inputs checks, read from the one tokenization)."""

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    label: int | float | None = None
    example_index: int = 0
    truncated: bool = False
    input_length: int = 0


def encode_classification(
    tokenizer: Tokenizer,
    examples: Sequence[ClassificationExample],
    max_length: int,
    windows: WindowConfig | None = None,
    *,
    text_pair_max_tokens: int | None = None,
    max_windows: int | None = None,
) -> list[EncodedInput]:
    """Encode single texts or pairs (segment ids 0/1) into windows of at most ``max_length``
    tokens (see the module doc); with ``windows.truncate`` one per example, cut longest-first.
    Each text is tokenized once.

    Two caps bound what one input costs (the server's rerank APIs), both off by default:
    ``text_pair_max_tokens`` keeps the first N word pieces of a pair's second text (its own: no
    query, no specials) before anything else, so it is read as that text cut after its N-th
    piece would be (WordPiece matches longest-first from a word's start: a prefix of pieces
    tokenizes to itself); ``max_windows`` keeps each input's first N windows, and the input is
    read as if cut where the N-th ends (``input_length`` counts that). A cut input is
    ``truncated``. Example (max_length 16, a 2-piece query, room 11 per window, stride 5): a 30-piece document
    makes windows over pieces 0-10, 6-16, 12-22, 18-28, 24-29; ``max_windows=2`` reads the
    first two (pieces 0-16: input_length 2 + 17 + 3 = 22); ``text_pair_max_tokens=14`` reads
    pieces 0-13 in the windows 0-10 and 6-13.
    """
    windows = windows or WindowConfig()
    out: list[EncodedInput] = []
    for i, ex in enumerate(examples):
        a, b = _segments(tokenizer, ex.text_a, ex.text_b)
        cut_b = b is not None and text_pair_max_tokens is not None and len(b) > text_pair_max_tokens
        b = None if b is None else b[:text_pair_max_tokens]
        if windows.truncate:
            found = [_cut_pair(tokenizer, a, b, max_length, ex.label, i)]
        else:
            found = _pair_windows(tokenizer, a, b, ex.label, i, max_length, windows, max_windows)
        out.extend(replace(f, truncated=True) if cut_b else f for f in found)
    return out


def _segments(
    tokenizer: Tokenizer, text_a: str, text_b: str | None
) -> tuple[list[int], list[int] | None]:
    """The word-piece ids of a text (and its pair), without special tokens."""
    a = list(tokenizer.encode_ids(text_a))
    return a, None if text_b is None else list(tokenizer.encode_ids(text_b))


def _assembled(
    tokenizer: Tokenizer, first: list[int], second: list[int] | None, **fields: Any
) -> EncodedInput:
    """``[CLS] first [SEP]`` (``second [SEP]``), segment ids 0 then 1."""
    ids = [tokenizer.cls_token_id, *first, tokenizer.sep_token_id]
    types = [0] * len(ids)
    if second is not None:
        ids += [*second, tokenizer.sep_token_id]
        types += [1] * (len(second) + 1)
    return EncodedInput(ids, types, [1] * len(ids), **fields)


def _whole_length(a: list[int], b: list[int] | None) -> int:
    return len(a) + 2 + (0 if b is None else len(b) + 1)


def _cut_pair(
    tokenizer: Tokenizer,
    a: list[int],
    b: list[int] | None,
    max_length: int,
    label: Any,
    index: int,
) -> EncodedInput:
    """One sequence of at most ``max_length`` tokens, cut longest-first as
    ``tokenizer.encode(a, b, max_length=..., truncation="longest_first")`` cuts it."""
    room = max_length - (2 if b is None else 3)
    if room < 0:
        raise ValueError(f"max_length={max_length} leaves no room for the special tokens")
    keep_a, keep_b = truncation_lengths(
        len(a), None if b is None else len(b), room, "longest_first"
    )
    whole = _whole_length(a, b)
    second = None if b is None else b[:keep_b]
    return _assembled(
        tokenizer,
        a[:keep_a],
        second,
        label=label,
        example_index=index,
        truncated=whole > max_length,
        input_length=whole,
    )


def _pair_windows(
    tokenizer: Tokenizer,
    a: list[int],
    b: list[int] | None,
    label: Any,
    index: int,
    max_length: int,
    windows: WindowConfig,
    max_windows: int | None = None,
) -> list[EncodedInput]:
    stride = windows.stride(max_length)
    plan = plan_pair(len(a), None if b is None else len(b), max_length, stride)
    slid, kept = (a, None) if b is None else (b, a) if plan.slide == "b" else (a, b)
    kept = None if kept is None else kept[: plan.keep_len]
    room = max_length - 2 - (0 if kept is None else len(kept) + 1)
    whole = _whole_length(a, b)
    read = slices(len(slid), room, stride, mode=windows.stride_mode)
    dropped = max_windows is not None and len(read) > max_windows
    if dropped:  # read as the input cut where the last window kept ends
        read = read[:max_windows]
        whole -= len(slid) - read[-1].stop
    out = []
    for sl in read:
        piece = slid[sl.start : sl.stop]
        first, second = (piece, kept) if kept is None or plan.slide == "a" else (kept, piece)
        out.append(
            _assembled(
                tokenizer,
                first,
                second,
                label=label,
                example_index=index,
                truncated=plan.cut or dropped,
                input_length=whole,
            )
        )
    return out


def encode_multiple_choice(
    tokenizer: Tokenizer, examples: Sequence[MultipleChoiceExample], max_length: int
) -> list[list[EncodedInput]]:
    """Encode each example's choices as pairs (context, start + ending), cut longest-first to
    ``max_length`` (``truncated`` marks the cut choices); label on every choice."""
    out = []
    for i, ex in enumerate(examples):
        choices = []
        for first, second in ex.choices():
            a, b = _segments(tokenizer, first, second)
            choices.append(_cut_pair(tokenizer, a, b, max_length, ex.label, i))
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


def widen(batch: dict[str, np.ndarray], length: int, pad_id: int = 0) -> dict[str, np.ndarray]:
    """A collated batch whose token arrays (``input_ids``, ``token_type_ids``,
    ``attention_mask``: (..., T)) are padded on to ``length`` positions (T <= length)."""
    out = dict(batch)
    for key, fill in (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0)):
        extra = length - out[key].shape[-1]
        if extra > 0:
            width = [(0, 0)] * (out[key].ndim - 1) + [(0, extra)]
            out[key] = np.pad(out[key], width, constant_values=fill)
    return out


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
    """One window of a tagged sentence (or document).

    ``word_ids[i]`` is the word of token i (None for [CLS]/[SEP]); ``labels[i]`` the tag id on the
    first piece of each word whose first piece is in the window and -100 elsewhere (all -100 without
    tags). ``max_context[i]`` is True where token i has its maximum context in this window,
    ``first_piece[i]`` where it is its word's first piece; a word is read back
    (:func:`word_predictions`) from the window where its first piece has the maximum context.
    ``truncated``: the sentence was cut (``truncate``), its later words unseen.
    """

    sentence_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    labels: list[int]
    word_ids: list[int | None]
    max_context: list[bool]
    first_piece: list[bool]
    truncated: bool = False
    input_length: int = 0
    """Pieces of the whole sentence (or document) plus [CLS] and [SEP]."""

    @property
    def example_index(self) -> int:
        return self.sentence_index

    def label_positions(self) -> list[tuple[int, int]]:
        """``(token position, word index)`` of each word's first piece read from this window."""
        return [
            (pos, w)
            for pos, (w, best, first) in enumerate(
                zip(self.word_ids, self.max_context, self.first_piece)
            )
            if w is not None and best and first
        ]


def word_pieces(tokenizer: Tokenizer, words: Sequence[str]) -> list[list[int]]:
    """Piece ids of each word; a word that yields no piece (e.g. only control characters) gets
    [UNK] so every word keeps a position and a prediction."""
    out = []
    for w in words:
        ids = list(tokenizer.encode_ids(w))
        out.append(ids or [tokenizer.unk_token_id])
    return out


def encode_tagged(
    tokenizer: Tokenizer,
    sentences: Sequence[TaggedSentence] | Sequence[Sequence[str]],
    label_to_id: dict[str, int] | None = None,
    *,
    max_length: int,
    windows: WindowConfig | None = None,
) -> list[TokenWindow]:
    """Encode tagged sentences (or plain word lists) into windows; see the module doc.

    With ``label_to_id`` and :class:`TaggedSentence` input, the first piece of each word gets
    its tag id (a tag outside ``label_to_id`` raises ValueError naming it and the sentence's
    line). Windows hold ``max_length - 2`` pieces and overlap by ``windows.stride(max_length)``.
    """
    windows = windows or WindowConfig()
    room = max_length - 2
    if room < 1:
        raise ValueError(f"windows of {max_length} tokens leave no room for a word piece")
    stride = windows.stride(max_length)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    out: list[TokenWindow] = []
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
        ids: list[int] = []
        wids: list[int] = []
        labels: list[int] = []
        firsts: list[bool] = []
        for w, pieces in enumerate(word_pieces(tokenizer, words)):
            for k, piece in enumerate(pieces):
                ids.append(piece)
                wids.append(w)
                firsts.append(k == 0)
                labelled = tags is not None and k == 0
                labels.append(label_to_id[tags[w]] if labelled else IGNORE_INDEX)  # type: ignore[index]
        cut = windows.truncate and len(ids) > room
        for sl in slices(
            len(ids), room, stride, mode=windows.stride_mode, truncate=windows.truncate
        ):
            a, b = sl.start, sl.stop
            win_ids = [cls_id, *ids[a:b], sep_id]
            # a word whose first piece lies before the window is not labelled here
            win_labels = [IGNORE_INDEX, *labels[a:b], IGNORE_INDEX]
            n = len(win_ids)
            out.append(
                TokenWindow(
                    s_index,
                    win_ids,
                    [0] * n,
                    [1] * n,
                    win_labels,
                    [None, *wids[a:b], None],
                    [False, *sl.is_max, False],
                    [False, *firsts[a:b], False],
                    cut,
                    len(ids) + 2,
                )
            )
    return out


def word_predictions(
    windows: Sequence[TokenWindow],
    token_predictions: Sequence[Sequence[int]],
    num_words: Sequence[int],
    fill: int | None = None,
) -> list[list[int]]:
    """Per-sentence, per-word predictions read from each word's first piece in its max-context
    window.

    ``token_predictions[i]`` holds one predicted id per token of ``windows[i]`` (it may be
    padded longer); ``num_words[s]`` is the word count of sentence s. A word that got no
    prediction (cut by truncation) gets ``fill``; with ``fill=None`` that raises ValueError.
    """
    out: list[dict[int, int]] = [{} for _ in num_words]
    for win, preds in zip(windows, token_predictions):
        for pos, w in win.label_positions():
            out[win.sentence_index][w] = int(preds[pos])
    result = []
    for i, (d, n) in enumerate(zip(out, num_words)):
        if len(d) != n and fill is None:
            raise ValueError(f"sentence {i}: some words got no prediction")
        result.append([d.get(w, fill) for w in range(n)])  # type: ignore[misc]
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
