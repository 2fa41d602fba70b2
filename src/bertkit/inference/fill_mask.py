"""Masked-token prediction: the top-k tokens and probabilities for every ``[MASK]`` of a text.

Only the masked positions go through the MLM head (the vocabulary projection is the costly part),
over length-sorted batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit import precision as P
from bertkit.errors import CheckpointError, ConfigError, InputError
from bertkit.inference.loading import load_for_inference
from bertkit.model import BertForMaskedLM
from bertkit.model.batching import collate, length_batches
from bertkit.progress import progress
from bertkit.tokenizer.protocol import Tokenizer

Candidates = list[tuple[str, float]]
"""(token, probability) pairs, most likely first."""

BATCH_SIZE = 32
"""Texts per forward pass, batched by length (the default of ``load`` and of the CLI)."""


class MaskCutError(InputError):
    """A text with a ``[MASK]`` past the model's positions: :meth:`FillMasker.fill` cuts each
    text to them, and that ``[MASK]`` would get no candidates (an answer with fewer lists than
    the text has ``[MASK]`` tokens). ``index``: the text's, from 0 (``line``: from 1)."""

    def __init__(self, index: int, limit: int) -> None:
        self.index, self.limit = index, limit
        super().__init__(
            None,
            index + 1,
            f"its [MASK] lies beyond the model's maximum length ({limit} tokens, [CLS] and "
            "[SEP] included): put it earlier or shorten the text",
        )

    def __reduce__(self):
        return (type(self), (self.index, self.limit))


@dataclass
class FillMasker:
    """Build with :meth:`load` (a folder with MLM head weights) or from a loaded model."""

    model: Any
    """A model with ``bert`` (the encoder) and ``mlm`` (the head): BertForMaskedLM / ForPreTraining."""
    tokenizer: Tokenizer
    precision: str = "fp32"
    batch_size: int = BATCH_SIZE
    show_progress: bool | None = False

    @classmethod
    def load(
        cls,
        directory: str | Path,
        *,
        device: str | None = None,
        precision: str = P.DEFAULT,
        batch_size: int = BATCH_SIZE,
        allow_pickle: bool = False,
    ) -> FillMasker:
        """``directory``: a folder or a Hub id (:func:`bertkit.hub.resolve`)."""
        loaded = load_for_inference(
            directory,
            BertForMaskedLM,
            device=device,
            precision=precision,
            allow_pickle=allow_pickle,
            warn_unused=False,
        )
        model, report = loaded.model, loaded.report
        if model.config.is_decoder:
            raise CheckpointError(
                f"{loaded.directory}: a left-to-right model (is_decoder: true) predicts the next "
                "token from the ones before it; it cannot fill a [MASK] from both sides"
            )
        if report is not None and any(k.startswith("mlm.") for k in report.missing):
            raise CheckpointError(
                f"{loaded.directory}: the checkpoint has no masked-LM head weights (cls.predictions.*)"
            )
        return cls(model, loaded.tokenizer, loaded.placement.precision, batch_size, None)

    def __call__(self, texts: Sequence[str], top_k: int = 5) -> list[list[Candidates]]:
        """For each text, one candidate list per ``[MASK]`` (in order; [] for a text without);
        a text longer than the model's positions is cut at its end (:class:`MaskCutError` if
        that drops a ``[MASK]``)."""
        return self.fill(self.encode(texts), top_k)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """The token ids of each text, whole ([CLS] ... [SEP], not cut): check them, then
        :meth:`fill` them."""
        return [list(e.input_ids) for e in self.tokenizer.encode_batch(list(texts))]

    @torch.inference_mode()
    def fill(self, ids: Sequence[Sequence[int]], top_k: int = 5) -> list[list[Candidates]]:
        """:meth:`__call__` on token ids from :meth:`encode` (each cut to the model's positions,
        its last token kept: the tokenizer's truncation); :class:`MaskCutError` for the first
        text whose cut drops a ``[MASK]``, before any forward pass."""
        if top_k < 1:
            raise ConfigError(f"top-k must be >= 1, got {top_k}")
        tok, model = self.tokenizer, self.model
        model.eval()
        device = next(model.parameters()).device
        limit = model.config.max_position_embeddings
        encodings = [list(x) if len(x) <= limit else [*x[: limit - 1], x[-1]] for x in ids]
        for i, whole in enumerate(ids):  # the cut drops whole[limit - 1 : -1]
            if len(whole) > limit and tok.mask_token_id in whole[limit - 1 : -1]:
                raise MaskCutError(i, limit)
        results: list[list[Candidates]] = [[] for _ in encodings]
        k = min(top_k, model.config.vocab_size)
        batches = length_batches([len(e) for e in encodings], self.batch_size)
        with P.autocast(self.precision, device):
            for idx in progress(
                batches, desc="fill-mask", unit="batch", enabled=self.show_progress
            ):
                batch = collate([encodings[i] for i in idx], None, tok.pad_token_id or 0)
                batch = {key: v.to(device) for key, v in batch.items()}
                is_mask = batch["input_ids"] == tok.mask_token_id  # (B, T)
                if not bool(is_mask.any()):
                    continue
                hidden = model.bert(**batch).last_hidden_state[is_mask]  # (M, H) masked rows only
                probs = model.mlm(hidden, model.bert.embeddings.word.weight).float().softmax(-1)
                top = probs.topk(k, dim=-1)
                rows = is_mask.nonzero()[:, 0].tolist()
                for r, p, i in zip(rows, top.values.tolist(), top.indices.tolist()):
                    results[idx[r]].append(list(zip(tok.convert_ids_to_tokens(i), p)))
        return results
