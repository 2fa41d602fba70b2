"""A pre-tokenized input of an :class:`~bertkit.inference.embedder.Embedder` (what
text-embeddings-inference and OpenAI's embeddings API accept as token ids), and the error for one
the model cannot read as it is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bertkit.errors import InputError


@dataclass(frozen=True)
class TokenIds:
    """A pre-tokenized input: the model's input ids exactly, no special tokens added (the caller
    includes [CLS] and [SEP] when it wants them), token types 0. ``input_ids`` as
    :class:`~bertkit.tokenizer.encoding.Encoding` names them, so lengths read alike."""

    input_ids: Sequence[int]


def outside_vocabulary(ids: Sequence[int], vocab_size: int) -> str | None:
    """Why ``ids`` cannot be read by a model of ``vocab_size`` tokens (the first id outside
    ``0 .. vocab_size - 1``), or None."""
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    return (
        None if bad is None else f"token id {bad} is outside the vocabulary (0..{vocab_size - 1})"
    )


class TokenIdsError(InputError):
    """A :class:`TokenIds` input the model cannot read as it is: empty, an id outside the
    vocabulary, or (``too_long``) longer than :attr:`Embedder.max_length` where it may not be
    cut. ``index``: the input's, from 0 (``line``: from 1)."""

    def __init__(self, index: int, message: str, too_long: bool = False) -> None:
        self.index, self.too_long = index, too_long
        super().__init__(None, index + 1, message)

    def __reduce__(self):
        return (type(self), (self.index, self.message, self.too_long))
