"""transformers' tokenizer conventions: ``tok(...)`` shapes and defaults, tokenizer_config.json,
the over-maximum warning and ``decode``'s clean-up.

:class:`TransformersConventions` holds ``__call__`` and ``decode`` over the members it declares
(encode_batch, the vocabulary, the special ids, ``model_max_length``); BertTokenizer inherits
them. This module knows nothing of BertTokenizer: tokenizer.py imports it, never the reverse.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.errors import InputError
from bertkit.io import atomic_write_text
from bertkit.tokenizer.encoding import Encoding
from bertkit.tokenizer.wordpiece import PREFIX, Vocab

log = logging.getLogger("bertkit.tokenizer.tokenizer")

# transformers' "no maximum" model_max_length (tokenization_utils_base.VERY_LARGE_INTEGER), and
# the threshold above which a model_max_length means "no limit" (LARGE_INTEGER there)
VERY_LARGE_INTEGER = int(1e30)
LARGE_INTEGER = int(1e20)
_PADDINGS = ("longest", "max_length", "do_not_pad")
_TRUNCATIONS = ("longest_first", "only_first", "only_second", "do_not_truncate")

# the Hugging Face WordPiece decoder's clean-up, applied to each token (with its leading space)
_CLEANUP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def resolve_strategies(
    padding: bool | str | None,
    truncation: bool | str | None,
    max_length: int | None,
    model_max_length: int,
) -> tuple[str | None, str | None, int | None]:
    """(padding, truncation, max_length) resolved as transformers'
    ``_get_padding_truncation_strategies`` does: None for "do not pad" / "do not truncate",
    and ``model_max_length`` standing in for a missing ``max_length`` when it is set."""
    if max_length is not None and padding is False and truncation is None:
        truncation = "longest_first"  # transformers' backward-compatible rule
    if padding is True:
        if max_length is not None and truncation in (None, False, "do_not_truncate"):
            warnings.warn(
                "`max_length` is ignored when `padding`=`True` and there is no truncation "
                "strategy. To pad to max length, use `padding='max_length'`.",
                stacklevel=3,
            )
        padding = "longest"
    if padding not in (False, None, *_PADDINGS):
        raise ValueError(
            f"unknown padding {padding!r}; expected True, False, 'longest', 'max_length' "
            "or 'do_not_pad'"
        )
    if truncation is True:
        truncation = "longest_first"
    if truncation not in (False, None, *_TRUNCATIONS):
        raise ValueError(
            f"unknown truncation {truncation!r}; expected True, False, 'longest_first', "
            "'only_first', 'only_second' or 'do_not_truncate'"
        )
    pad = None if padding in (False, None, "do_not_pad") else str(padding)
    trunc = None if truncation in (False, None, "do_not_truncate") else str(truncation)
    if max_length is None:
        unlimited = model_max_length > LARGE_INTEGER
        if pad == "max_length":
            if unlimited:
                pad = None
            else:
                max_length = model_max_length
        if trunc is not None:
            if unlimited:
                trunc = None
            else:
                max_length = model_max_length
    return pad, trunc, max_length


def read_config(directory: Path) -> dict[str, Any]:
    """The BertTokenizer arguments tokenizer_config.json sets (``{}`` without the file)."""
    kwargs: dict[str, Any] = {}
    config_path = directory / "tokenizer_config.json"
    if config_path.exists():
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(config_path, None, f"expected a JSON object ({e})") from e
        if not isinstance(config, dict):
            raise InputError(config_path, None, "expected a JSON object")
        for key in (
            "do_lower_case",
            "strip_accents",
            "tokenize_chinese_chars",
            "split_special_tokens",
        ):
            if key in config:
                kwargs[key] = config[key]
        limit = config.get("model_max_length")
        if limit is not None:
            if isinstance(limit, float) and limit.is_integer():
                limit = int(limit)
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                raise InputError(
                    config_path,
                    None,
                    f"model_max_length must be a non-negative integer, got {limit!r}",
                )
            kwargs["model_max_length"] = limit
    return kwargs


def write_config(
    directory: Path,
    do_lower_case: bool,
    strip_accents: bool | None,
    tokenize_chinese_chars: bool,
    model_max_length: int,
) -> None:
    """Write tokenizer_config.json (readable by transformers too): the one writer of that file."""
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": do_lower_case,
        "strip_accents": strip_accents,
        "tokenize_chinese_chars": tokenize_chinese_chars,
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    if model_max_length <= LARGE_INTEGER:  # "no limit" is left out (transformers' default)
        config["model_max_length"] = model_max_length
    atomic_write_text(directory / "tokenizer_config.json", json.dumps(config, indent=2) + "\n")


class TransformersConventions:
    """``tok(...)`` and ``decode`` as transformers' BertTokenizerFast has them, for a tokenizer
    class that provides the members declared here (BertTokenizer does)."""

    vocab: Vocab
    model_max_length: int
    pad_token_id: int | None
    all_special_ids: frozenset[int]
    _warned_too_long: bool
    """The over-maximum warning is given once per tokenizer."""

    if TYPE_CHECKING:

        def encode_batch(
            self,
            texts: Sequence[str],
            text_pairs: Sequence[str] | None = None,
            *,
            num_workers: int = 1,
            chunk_size: int = 256,
            **kwargs: Any,
        ) -> list[Encoding]: ...

    def __call__(
        self,
        text: str | Sequence[str],
        text_pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        verbose: bool = True,
        num_workers: int = 1,
    ) -> dict[str, Any]:
        """Encode like transformers' ``PreTrainedTokenizerBase.__call__`` (BertTokenizerFast).

        Shapes: a single string (or a single pair ``text, text_pair`` of strings) gives flat
        lists (``out["input_ids"] == [101, ..., 102]``); a list of strings (and a list of pairs)
        gives a list of rows. With ``return_tensors`` (``"np"``: int64 arrays, ``"pt"``: torch
        tensors) or ``return_overflowing_tokens`` there is always a batch dimension.

        Keys: ``input_ids``, ``token_type_ids`` and ``attention_mask`` (unless
        ``return_token_type_ids`` / ``return_attention_mask`` is False), then, when asked,
        ``special_tokens_mask``, ``offset_mapping`` and ``overflow_to_sample_mapping``.

        Defaults follow transformers: **no padding and no truncation**.

        - ``padding``: False / ``"do_not_pad"``; True / ``"longest"`` (to the longest row);
          ``"max_length"`` (to ``max_length``, else to ``model_max_length`` when it is set,
          else no padding). Right side, with [PAD], type 0, attention 0, special mask 1,
          offsets (0, 0). Rows longer than the target are left as they are.
        - ``truncation``: True / ``"longest_first"``, ``"only_first"``, ``"only_second"``;
          False / ``"do_not_truncate"``. It cuts to ``max_length``, else to
          ``model_max_length`` when set (else nothing is cut). The default None is False,
          except that a ``max_length`` given without padding truncates (``"longest_first"``),
          as in transformers.
        - ``stride`` / ``return_overflowing_tokens``: the windows cut off by truncation come as
          extra rows, ``overflow_to_sample_mapping`` naming each row's input.

        Without truncation, a row longer than ``model_max_length`` is kept whole and logs, once
        per tokenizer (``verbose=False`` silences it), transformers' warning "Token indices
        sequence length is longer than the specified maximum sequence length for this model
        (N > M). ...". ``num_workers`` > 1 encodes in worker processes (see ``encode_batch``).
        """
        from bertkit.tokenizer.batch import batch_dict
        from bertkit.tokenizer.parallel import gc_paused

        batched = not isinstance(text, str)
        if batched:
            if isinstance(text_pair, str):
                raise TypeError(
                    "when tokenizing batches of text, `text_pair` must be a list or tuple with "
                    "the same length as `text`"
                )
            texts = list(text)
            pairs = None if text_pair is None else list(text_pair)
        else:
            if text_pair is not None and not isinstance(text_pair, str):
                raise TypeError("a single `text` takes a single string `text_pair`")
            texts = [text]  # type: ignore[list-item]
            # an empty pair string is no pair (transformers: ``[(text, text_pair)] if text_pair``)
            pairs = [text_pair] if text_pair else None
        pad, trunc, max_length = resolve_strategies(
            padding, truncation, max_length, self.model_max_length
        )
        if pad is not None and self.pad_token_id is None:
            raise ValueError("asking to pad, but the vocabulary has no [PAD] token")
        encodings = self.encode_batch(
            texts,
            pairs,
            num_workers=num_workers,
            add_special_tokens=add_special_tokens,
            max_length=max_length,
            truncation=trunc or False,
            stride=stride,
            return_overflowing_tokens=return_overflowing_tokens,
        )
        if max_length is None and verbose:
            self._warn_if_too_long(encodings, return_overflowing_tokens)
        with gc_paused():  # the padded rows are again millions of objects (see encode_batch)
            out = batch_dict(
                encodings,
                pad_id=self.pad_token_id if self.pad_token_id is not None else 0,
                padding=pad or False,
                max_length=max_length,
                return_token_type_ids=return_token_type_ids is not False,
                return_attention_mask=return_attention_mask is not False,
                return_overflowing_tokens=return_overflowing_tokens,
                return_offsets_mapping=return_offsets_mapping,
                return_special_tokens_mask=return_special_tokens_mask,
                return_tensors=return_tensors,
            )
        if not batched and return_tensors is None and not return_overflowing_tokens:
            out = {k: v[0] for k, v in out.items()}
        return out

    def _warn_if_too_long(self, encodings: Sequence[Encoding], with_overflow: bool) -> None:
        """transformers' one-time warning for a row longer than ``model_max_length``."""
        limit = self.model_max_length
        if self._warned_too_long or limit > LARGE_INTEGER or limit == 0:
            return
        for enc in encodings:
            rows = [enc, *enc.overflowing] if with_overflow else [enc]
            for row in rows:
                if len(row) > limit:
                    log.warning(
                        "Token indices sequence length is longer than the specified maximum "
                        f"sequence length for this model ({len(row)} > {limit}). Running this "
                        "sequence through the model will result in indexing errors"
                    )
                    self._warned_too_long = True
                    return

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Join wordpieces back into text: ``##`` pieces attach to the previous piece, others are
        separated by a space, then each token gets the HF decoder's clean-up (" ," -> "," ...).
        """
        itos = self.vocab.id_to_token
        skip = self.all_special_ids if skip_special_tokens else frozenset()
        parts: list[str] = []
        for i in ids:
            i = int(i)
            if i in skip:
                continue
            tok = itos[i]
            if parts:
                tok = tok[len(PREFIX) :] if tok.startswith(PREFIX) else " " + tok
            for old, new in _CLEANUP:
                tok = tok.replace(old, new)
            parts.append(tok)
        return "".join(parts)
