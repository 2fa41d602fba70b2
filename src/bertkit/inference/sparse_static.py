"""Inference-free SPLADE queries: sentence-transformers' ``SparseStaticEmbedding``.

A text's vector holds, for each vocabulary id among its tokens, that id's learned weight (an
IDF-like table of one float per id): no transformer pass. As sentence-transformers computes it
(``SparseStaticEmbedding.forward``): the text is tokenized without [CLS]/[SEP], cut at the
tokenizer's ``model_max_length``, and a token seen twice counts once (presence, not counts).
Ids whose weight is 0 are left out; a negative weight stays (it is the model's).

Worked example: weights ``[0, 0, 0, 0, 0, 0.8, 0.4, 0.75, 0.57, ...]`` and "the cat cat sat"
(ids 5 6 6 8) give indices ``[5, 6, 8]``, values ``[0.8, 0.4, 0.57]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import CheckpointError
from bertkit.inference.sparse_vector import SparseVector
from bertkit.inference.token_ids import TokenIds, TokenIdsError, outside_vocabulary
from bertkit.tasks.windows import WindowCounts
from bertkit.tokenizer.conventions import LARGE_INTEGER

WEIGHTS = "model.safetensors"


@dataclass
class StaticSparseEmbedder:
    """One sparse vector per text from a weight per vocabulary id. Build with :meth:`load`."""

    weight: np.ndarray
    """(V,) float32: the weight of each vocabulary id."""
    tokenizer: Any
    max_length: int | None
    """Tokens kept per text (the tokenizer's ``model_max_length``; None: all)."""

    @classmethod
    def load(
        cls, directory: str | Path, *, split_special_tokens: bool = False
    ) -> StaticSparseEmbedder:
        """Read a ``SparseStaticEmbedding`` folder: ``model.safetensors`` (its ``weight``) and
        its own tokenizer. CheckpointError without them, or for a size that is not the
        tokenizer's vocabulary."""
        from safetensors.numpy import load_file

        from bertkit.tokenizer import BertTokenizer

        root = Path(directory)
        path = root / WEIGHTS
        if not path.is_file():
            raise CheckpointError(
                f"{root}: no {WEIGHTS} (a SparseStaticEmbedding's weights; an idf.json path in "
                "its config.json is not read: save the model with sentence-transformers first)"
            )
        try:
            weight = load_file(str(path))["weight"]
        except (OSError, KeyError, ValueError) as e:
            raise CheckpointError(f"{path}: no readable 'weight' tensor ({e})") from e
        tokenizer = BertTokenizer.from_pretrained(root, split_special_tokens=split_special_tokens)
        if weight.ndim != 1 or len(weight) < len(tokenizer):
            raise CheckpointError(
                f"{path}: weight of shape {tuple(weight.shape)}, expected ({len(tokenizer)},): "
                "one per vocabulary id"
            )
        limit = tokenizer.model_max_length
        return cls(weight.astype(np.float32), tokenizer, limit if limit <= LARGE_INTEGER else None)

    @property
    def vocab_size(self) -> int:
        return len(self.weight)

    def embed(self, texts: Sequence[str | TokenIds]) -> tuple[list[SparseVector], WindowCounts]:
        """One :class:`SparseVector` per text (a :class:`TokenIds`:
        its ids as they are), ids ascending, and how many texts were cut."""
        out, cut = [], []
        for n, text in enumerate(texts):
            if isinstance(text, TokenIds):
                ids = list(text.input_ids)
                bad = outside_vocabulary(ids, self.vocab_size)
                if bad:
                    raise TokenIdsError(n, bad)
            else:
                ids = self.tokenizer.encode(
                    text, add_special_tokens=False, truncation=False
                ).input_ids
            if self.max_length is not None and len(ids) > self.max_length:
                ids = ids[: self.max_length]
                cut.append(n)
            keys = np.unique(np.asarray(ids, dtype=np.int64))
            values = self.weight[keys]
            keep = values != 0
            out.append(SparseVector(keys[keep], values[keep].astype(np.float32)))
        return out, WindowCounts.of(range(len(out)), cut, len(out))
