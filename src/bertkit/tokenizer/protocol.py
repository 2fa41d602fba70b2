"""``Tokenizer``: the interface bertkit code needs from a tokenizer, as a typing Protocol.

:class:`bertkit.tokenizer.BertTokenizer` satisfies it; annotate parameters with ``Tokenizer``
rather than ``Any`` (or the concrete class) so that what a function may call is written down
and checked. Members are exactly what library code uses:

- special ids (``cls``/``sep`` for task features, ``pad`` for collation, ``mask`` for fill-mask,
  ``unk`` for words without pieces), ``len(tok)`` (vocabulary size), ``model_max_length``;
- ``vocab`` (``vocab.id_to_token``: the tokenize command);
- ``tokenize``, ``convert_tokens_to_ids``, ``convert_ids_to_tokens``;
- ``encode`` (task features, fill-mask, worker processes), ``encode_ids`` (pre-training data,
  tagging), ``encode_batch`` (embed, fill-mask);
- ``save_pretrained`` (model folders written by fine-tuning).

The batch call ``tok(text, ...)`` is not part of it: library code encodes through ``encode`` /
``encode_batch`` with explicit lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, overload, runtime_checkable

if TYPE_CHECKING:
    from bertkit.tokenizer.encoding import Encoding
    from bertkit.tokenizer.wordpiece import Vocab


@runtime_checkable
class Tokenizer(Protocol):
    """What bertkit code uses of a tokenizer (``BertTokenizer`` is one).

    ``isinstance(x, Tokenizer)`` checks only that the members exist (a runtime-checkable
    Protocol), not their signatures; a type checker checks those.
    """

    pad_token_id: int | None
    unk_token_id: int
    cls_token_id: int | None
    sep_token_id: int | None
    mask_token_id: int | None
    model_max_length: int
    vocab: Vocab

    def __len__(self) -> int:
        """Vocabulary size."""
        ...

    def tokenize(self, text: str) -> list[str]: ...

    @overload
    def convert_tokens_to_ids(self, tokens: str) -> int: ...  # type: ignore[overload-overlap]
    @overload
    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]: ...

    @overload
    def convert_ids_to_tokens(self, ids: int) -> str: ...
    @overload
    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]: ...

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
    ) -> Encoding: ...

    def encode_ids(self, text: str) -> list[int]: ...

    def encode_batch(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        *,
        num_workers: int = 1,
        chunk_size: int = 256,
        **kwargs: Any,
    ) -> list[Encoding]: ...

    def save_pretrained(self, directory: str | Path) -> None: ...
