"""SQuAD feature conversion: question + context windows with answer token positions.

Each example becomes one or more windows ``[CLS] question [SEP] context-slice [SEP]`` of at most
``max_seq_length`` tokens (the adapter's, 384 by default: :data:`SQUAD_MAX_SEQ_LENGTH`). The
question is cut to ``max_query_length`` tokens. The context is tokenized once (offsets give each
token's characters in the ORIGINAL context) and cut into slices of
``max_seq_length - len(question) - 3`` tokens.

The windows are :func:`bertkit.tasks.windows.slices` over the context, with the
:class:`~bertkit.tasks.windows.WindowConfig` every family shares (``doc_stride``, ``stride_mode``),
so ``--doc-stride`` means the same thing everywhere:

* ``stride_mode="overlap"`` (default; Hugging Face's ``stride`` in ``run_qa.py``): consecutive
  slices share ``doc_stride`` tokens, i.e. the next slice starts ``slice_len - doc_stride`` later.
  These are exactly the windows of ``tokenizer(question, context, truncation="only_second",
  stride=doc_stride, return_overflowing_tokens=True)`` (checked by scripts/squad_features_parity.py).
  A stride at least as long as the slice is lowered to ``slice_len - 1``, as for every family.
* ``stride_mode="step"`` (google-research/bert ``run_squad.py``): the next slice starts
  ``doc_stride`` tokens later (more, more overlapping windows).

SQuAD's default stride (:func:`squad_doc_stride`) is the references' 128 at the paper's 384
tokens and up, and shrinks with shorter windows so that they still slide: a third of the window
(the other families' default), and at most half the context a longest question leaves.

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
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bertkit.data.tasks.squad import SquadExample
from bertkit.errors import ConfigError
from bertkit.tasks.windows import WindowConfig, slices
from bertkit.tokenizer.protocol import Tokenizer

SQUAD_MAX_SEQ_LENGTH = 384
"""Tokens per SQuAD window, question and specials included (the BERT paper's SQuAD setting)."""
SQUAD_DOC_STRIDE = 128
"""SQuAD's default ``doc_stride`` at 384 tokens and up (google's ``run_squad.py`` and Hugging
Face's ``run_qa.py``); :func:`squad_doc_stride` lowers it for shorter windows."""
_LEGACY_WINDOW_KEYS = ("doc_stride", "stride_mode")
"""Keys of the context windows in the flat layout saved before SQuAD shared WindowConfig."""


def squad_doc_stride(max_seq_length: int, max_query_length: int) -> int:
    """The default ``doc_stride`` (overlap mode): ``min(128, max_seq_length // 3, room // 2)``,
    at least 1, where ``room = max_seq_length - max_query_length - 3`` is the context a longest
    question leaves in a window.

    128 (:data:`SQUAD_DOC_STRIDE`) at the paper's 384 and longer windows, as both references; a
    third of a shorter window, the other families' default; and never more than half the room,
    so each window starts at least half a slice after the last (the references' fixed 128 at 128
    tokens would start each window one token after the last, a hundred windows per question).

    Examples: (384, 64) -> 128; (256, 64) -> 85; (128, 64) -> 30 (room 61); (128, 32) -> 42.
    """
    room = max_seq_length - max_query_length - 3
    return max(1, min(SQUAD_DOC_STRIDE, max_seq_length // 3, room // 2))


@dataclass(frozen=True)
class SquadFeatureConfig:
    """SQuAD's window settings: the :class:`WindowConfig` every family shares, plus the question's
    length (defaults: the BERT paper's SQuAD settings). ``max_seq_length`` is the adapter's."""

    window: WindowConfig = field(default_factory=WindowConfig)
    """How the context is cut: ``doc_stride`` (None: :func:`squad_doc_stride`) and ``stride_mode``; ``truncate``
    and ``window_pooling`` do not apply (every window is read, the best span kept)."""
    max_query_length: int = 64
    """Question tokens kept (longer questions are cut to this many)."""

    def __post_init__(self) -> None:
        window = WindowConfig.of(self.window)  # a dict from bertkit_task.json
        if window.truncate or window.window_pooling != WindowConfig.window_pooling:
            raise ConfigError(
                "truncate, window_pooling: SQuAD reads every window of a long context and keeps "
                "the best span; only doc_stride and stride_mode apply"
            )
        object.__setattr__(self, "window", window)

    def check_fits(self, max_seq_length: int) -> None:
        """ConfigError unless a window of ``max_seq_length`` leaves room for context tokens."""
        if self.max_query_length + 3 >= max_seq_length:
            raise ConfigError(
                f"max_query_length + 3 ({self.max_query_length + 3}) must be below "
                f"max_seq_length ({max_seq_length}): room for the context"
            )

    def stride(self, max_seq_length: int) -> int:
        """The stride of windows of ``max_seq_length`` tokens: ``doc_stride`` when given, else
        :func:`squad_doc_stride`."""
        if self.window.doc_stride is not None:
            return self.window.doc_stride
        return squad_doc_stride(max_seq_length, self.max_query_length)

    def with_stride(self, max_seq_length: int) -> SquadFeatureConfig:
        """This config with its stride at ``max_seq_length`` made explicit (what a saved model
        records)."""
        return replace(self, window=replace(self.window, doc_stride=self.stride(max_seq_length)))

    def check_stride(self, max_seq_length: int) -> None:
        """ConfigError when ``doc_stride`` (overlap mode) is not below the context slice of a
        question at ``max_query_length``: such windows would each start one token after the last
        (:func:`~bertkit.tasks.windows.slices` lowers the stride to the slice length - 1), about
        a hundred windows per SQuAD question at 128 tokens. Hugging Face's tokenizer refuses
        that stride too; this is what fine-tuning checks before reading any data.

        Example: max_seq_length 128, max_query_length 64 -> slices of 61 tokens, so
        ``--doc-stride 128`` is refused (the hint: the default there, 30) and 60 is not.
        """
        slice_len = max_seq_length - self.max_query_length - 3
        stride = self.stride(max_seq_length)
        if self.window.stride_mode != "overlap" or stride < slice_len:
            return
        hint = squad_doc_stride(max_seq_length, self.max_query_length)
        fix = f"--doc-stride {hint} or " if hint < slice_len else ""
        raise ConfigError(
            f"--doc-stride {stride} leaves no room to slide at --max-seq-length "
            f"{max_seq_length}: a question of --max-query-length {self.max_query_length} tokens "
            f"leaves {slice_len} context tokens per window, so each window would start one token "
            f"after the last; pass {fix}a smaller --max-query-length"
        )

    @classmethod
    def of(cls, value: SquadFeatureConfig | dict[str, Any] | None) -> SquadFeatureConfig:
        """From a saved state (``bertkit_task.json`` holds a dict), None meaning the defaults.

        Also reads the layout saved before SQuAD shared :class:`WindowConfig`:
        ``{"max_seq_length", "doc_stride", "max_query_length", "stride_mode"}`` (the length was
        always the adapter's own, so it is dropped here).
        """
        if isinstance(value, SquadFeatureConfig):
            return value
        state = dict(value or {})
        state.pop("max_seq_length", None)
        legacy = {k: state.pop(k) for k in _LEGACY_WINDOW_KEYS if k in state}
        window = state.pop("window", None)
        if legacy:
            window = {**asdict(WindowConfig.of(window)), **legacy}
        return cls(window=WindowConfig.of(window), **state)


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
    max_seq_length: int,
    config: SquadFeatureConfig | None = None,
    *,
    is_training: bool = False,
) -> list[SquadFeature]:
    """Turn examples into windows of at most ``max_seq_length`` tokens (see the module doc);
    ``is_training`` fills answer positions.

    ``tokenizer`` is a :class:`bertkit.tokenizer.BertTokenizer` (``encode`` with offsets).
    The context of consecutive examples that share it is tokenized once.
    """
    config = config or SquadFeatureConfig()
    config.check_fits(max_seq_length)
    window = config.window
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
        slice_len = max_seq_length - len(q_ids) - 3
        stride = config.stride(max_seq_length)
        answer = ex.answers[0] if (is_training and ex.answers and not ex.is_impossible) else None
        head = [cls_id, *q_ids, sep_id]
        for sl in slices(len(ctx_ids), slice_len, stride, mode=window.stride_mode):
            start, stop = sl.start, sl.stop
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
                    token_is_max_context=[False] * len(head) + sl.is_max + [False],
                    start_position=s_pos,
                    end_position=e_pos,
                    doc_offset=len(head),
                    truncated=len(q_all) > len(q_ids),
                    input_length=len(q_all) + len(ctx_ids) + 3,
                )
            )
    return features
