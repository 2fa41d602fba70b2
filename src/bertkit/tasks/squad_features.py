"""SQuAD feature conversion: question + context windows with answer token positions.

Each example becomes one or more windows ``[CLS] question [SEP] context-slice [SEP]`` of at most
``max_seq_length`` tokens. The question is cut to ``max_query_length`` tokens. The context is
tokenized once (offsets give each token's characters in the ORIGINAL context) and cut into
slices of ``max_seq_length - len(question) - 3`` tokens.

The slicing and the max-context rule are :mod:`bertkit.tasks.windows`'s, shared by every family.
``doc_stride`` semantics differ between the two reference implementations, so both are offered:

* ``stride_mode="overlap"`` (default; Hugging Face's ``stride`` in ``run_qa.py``): consecutive
  slices share ``doc_stride`` tokens, i.e. the next slice starts ``slice_len - doc_stride`` later.
  These are exactly the windows of ``tokenizer(question, context, truncation="only_second",
  stride=doc_stride, return_overflowing_tokens=True)`` (checked by scripts/squad_features_parity.py).
* ``stride_mode="step"`` (google-research/bert ``run_squad.py``): the next slice starts
  ``doc_stride`` tokens later (more, more overlapping windows).

Answer positions follow the offsets: the start token is the last context token starting at or
before the answer's first character, the end token the first one ending at or after its last
character. When the answer is not wholly inside a window, or the question is unanswerable, both
positions are 0 (the [CLS] token), as in both references.

A token seen by several windows is "max context" only in the window where
``min(tokens left, tokens right) + 0.01 * slice_len`` is largest (google's
``_check_is_max_context``); span search only starts answers at max-context tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bertkit.data.tasks.squad import SquadExample
from bertkit.errors import ConfigError
from bertkit.tasks.windows import max_context_flags, slice_starts
from bertkit.tokenizer.protocol import Tokenizer


@dataclass(frozen=True)
class SquadFeatureConfig:
    """Windowing settings (defaults: the BERT paper's SQuAD settings)."""

    max_seq_length: int = 384
    """Tokens per window, question and specials included."""
    doc_stride: int = 128
    """Context tokens shared by neighbouring windows of a long context."""
    max_query_length: int = 64
    """Question tokens kept (longer questions are cut to this many)."""
    stride_mode: Literal["overlap", "step"] = "overlap"

    def __post_init__(self) -> None:
        if self.stride_mode not in ("overlap", "step"):
            raise ConfigError(f"stride_mode must be 'overlap' or 'step', got {self.stride_mode!r}")
        if self.max_query_length + 3 >= self.max_seq_length:
            raise ConfigError(
                f"max_query_length + 3 ({self.max_query_length + 3}) must be below "
                f"max_seq_length ({self.max_seq_length}): room for the context"
            )
        if self.doc_stride < 1:
            raise ConfigError(f"doc_stride must be at least 1, got {self.doc_stride}")


@dataclass(frozen=True)
class SquadFeature:
    """One window of one example.

    ``offsets[i]`` is the (start, end) character span in the example's context of token i, or
    None for question and special tokens. ``token_is_max_context[i]`` is True for context tokens
    whose best window is this one. ``start_position``/``end_position`` index ``input_ids``
    (0 = [CLS] = no answer here). ``doc_offset`` is the index of the first context token.
    """

    example_index: int
    qas_id: str
    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    offsets: list[tuple[int, int] | None]
    token_is_max_context: list[bool]
    start_position: int
    end_position: int
    doc_offset: int
    truncated: bool = False
    """The question was cut to ``max_query_length`` tokens (counted in the window summary)."""
    input_length: int = 0
    """Tokens of the whole (question, context) pair, specials included."""


def answer_token_span(
    offsets: Sequence[tuple[int, int]], start_char: int, end_char: int
) -> tuple[int, int] | None:
    """Token indices (inclusive) of the characters ``[start_char, end_char)`` within ``offsets``.

    None when the answer is not wholly covered by these tokens. Example: offsets
    [(0,3), (4,9), (9,12)] and the answer "9ab" at (4, 12) -> (1, 2).
    """
    if not offsets or offsets[0][0] > start_char or offsets[-1][1] < end_char:
        return None
    start = max(i for i, (a, _) in enumerate(offsets) if a <= start_char)
    end = min(i for i, (_, b) in enumerate(offsets) if b >= end_char)
    return start, max(start, end)


def convert_squad_examples(
    tokenizer: Tokenizer,
    examples: Sequence[SquadExample],
    config: SquadFeatureConfig | None = None,
    *,
    is_training: bool = False,
) -> list[SquadFeature]:
    """Turn examples into windows (see the module doc); ``is_training`` fills answer positions.

    ``tokenizer`` is a :class:`bertkit.tokenizer.BertTokenizer` (``encode`` with offsets).
    The context of consecutive examples that share it is tokenized once.
    """
    config = config or SquadFeatureConfig()
    features: list[SquadFeature] = []
    cache_key, ctx_ids, ctx_offsets = None, [], []
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    for ex_index, ex in enumerate(examples):
        if ex.context != cache_key:
            enc = tokenizer.encode(ex.context, add_special_tokens=False)
            cache_key, ctx_ids, ctx_offsets = (
                ex.context,
                list(enc.input_ids),
                [tuple(o) for o in enc.offsets],
            )
        q_all = list(tokenizer.encode(ex.question, add_special_tokens=False).input_ids)
        q_ids = q_all[: config.max_query_length]
        slice_len = config.max_seq_length - len(q_ids) - 3
        starts = slice_starts(len(ctx_ids), slice_len, config.doc_stride, config.stride_mode)
        flags = max_context_flags(starts, len(ctx_ids), slice_len)
        answer = ex.answers[0] if (is_training and ex.answers and not ex.is_impossible) else None
        head = [cls_id, *q_ids, sep_id]
        for start, is_max in zip(starts, flags):
            stop = min(start + slice_len, len(ctx_ids))
            ids = head + ctx_ids[start:stop] + [sep_id]
            n_ctx = stop - start
            offsets: list[tuple[int, int] | None] = (
                [None] * len(head) + list(ctx_offsets[start:stop]) + [None]
            )
            s_pos = e_pos = 0
            if answer is not None:
                span = answer_token_span(ctx_offsets[start:stop], answer.start, answer.end)
                if span is not None:
                    s_pos, e_pos = span[0] + len(head), span[1] + len(head)
            features.append(
                SquadFeature(
                    example_index=ex_index,
                    qas_id=ex.qas_id,
                    input_ids=ids,
                    token_type_ids=[0] * len(head) + [1] * (n_ctx + 1),
                    attention_mask=[1] * len(ids),
                    offsets=offsets,
                    token_is_max_context=[False] * len(head) + is_max + [False],
                    start_position=s_pos,
                    end_position=e_pos,
                    doc_offset=len(head),
                    truncated=len(q_all) > len(q_ids),
                    input_length=len(q_all) + len(ctx_ids) + 3,
                )
            )
    return features
