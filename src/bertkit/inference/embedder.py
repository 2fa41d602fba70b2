"""Sentence vectors from any BERT folder: length-sorted batches, pooling, precision, progress.

Pooling and normalisation come from the folder when it is a sentence-transformers model
(``modules.json`` with a ``Pooling`` module and its ``config.json``; a ``Normalize`` module; the
``max_seq_length`` of ``sentence_bert_config.json``), so ``Embedder.load(minilm)`` gives the
vectors sentence-transformers gives. Otherwise mean pooling without normalisation, up to the
model's position limit. Explicit arguments win over the folder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import hardware
from bertkit import precision as P
from bertkit.errors import CheckpointError, ConfigError
from bertkit.interop import load_with_report
from bertkit.model.batching import collate, length_batches
from bertkit.model.pooling import POOLINGS, pool
from bertkit.model.quantize import for_precision
from bertkit.progress import progress
from bertkit.tokenizer import BertTokenizer
from bertkit.tokenizer.encoding import Encoding
from bertkit.tokenizer.protocol import Tokenizer


@dataclass(frozen=True)
class PoolingSpec:
    """How token vectors become one vector, and the token limit of the inputs."""

    pooling: str = "mean"
    normalize: bool = False
    max_length: int | None = None


def sentence_transformers_spec(directory: str | Path) -> PoolingSpec | None:
    """The pooling a sentence-transformers folder declares, or None for a plain BERT folder."""
    root = Path(directory)
    modules_file = root / "modules.json"
    if not modules_file.is_file():
        return None
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        kinds = {m["type"].rsplit(".", 1)[-1]: m.get("path", "") for m in modules}
        spec: dict[str, Any] = {"normalize": "Normalize" in kinds}
        if "Pooling" in kinds:
            cfg = json.loads((root / kinds["Pooling"] / "config.json").read_text(encoding="utf-8"))
            modes = [
                m
                for m in ("cls", "mean", "max")
                if cfg.get(f"pooling_mode_{m}_token" if m == "cls" else f"pooling_mode_{m}_tokens")
            ]
            if len(modes) != 1:
                raise CheckpointError(
                    f"{root}: pooling {modes or 'none'} is not supported (one of {POOLINGS})"
                )
            spec["pooling"] = modes[0]
        st = root / "sentence_bert_config.json"
        if st.is_file():
            spec["max_length"] = json.loads(st.read_text(encoding="utf-8")).get("max_seq_length")
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{root}: unreadable sentence-transformers config ({e})") from e
    return PoolingSpec(**spec)


@dataclass
class Embedder:
    """One vector per text. Build with :meth:`load`; call with a list of texts."""

    model: torch.nn.Module
    tokenizer: Tokenizer
    spec: PoolingSpec
    precision: str = "fp32"
    batch_size: int = 32
    show_progress: bool | None = None

    @classmethod
    def load(cls, directory: str | Path, *, pooling: str | None = None, normalize: bool | None = None,
             max_length: int | None = None, device: str | None = None, precision: str = P.DEFAULT,
             batch_size: int = 32, allow_pickle: bool = False,
             split_special_tokens: bool = False, model: torch.nn.Module | None = None) -> Embedder:  # fmt: skip
        """``model``: an encoder already loaded from ``directory`` (e.g. a fill-mask model's
        ``bert``), used instead of loading the weights a second time."""
        if pooling is not None and pooling not in POOLINGS:
            raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {batch_size}")
        dev = hardware.resolve_device(device)
        if model is None:
            model, _ = load_with_report(directory, "BertModel", allow_pickle=allow_pickle)
        model.to(dev)
        limit = model.config.max_position_embeddings
        if max_length is not None and not 2 <= max_length <= limit:
            raise ConfigError(
                f"max length {max_length} is outside 2..{limit} (the model's position limit)"
            )
        base = sentence_transformers_spec(directory) or PoolingSpec()
        spec = PoolingSpec(
            pooling if pooling is not None else base.pooling,
            normalize if normalize is not None else base.normalize,
            min(max_length or base.max_length or limit, limit),
        )
        tokenizer = BertTokenizer.from_pretrained(
            directory, split_special_tokens=split_special_tokens
        )
        chosen = P.choose(precision, dev)
        return cls(for_precision(model, chosen), tokenizer, spec, chosen, batch_size)

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def max_length(self) -> int:
        return int(self.spec.max_length or self.model.config.max_position_embeddings)

    def encode(self, texts: Sequence[str], truncate: bool = True) -> list[Encoding]:
        """Token ids of ``texts``, cut to the input limit (``truncate``) or whole (the caller then
        checks their lengths against :attr:`max_length`)."""
        return self.tokenizer.encode_batch(
            list(texts), max_length=self.max_length if truncate else None
        )

    @torch.inference_mode()
    def embed_encodings(self, encodings: Sequence[Encoding]) -> np.ndarray:
        """(N, H) float32 vectors of already encoded inputs, in their order."""
        device = next(self.model.parameters()).device
        vectors = np.zeros((len(encodings), self.dim), dtype=np.float32)
        batches = length_batches([len(e.input_ids) for e in encodings], self.batch_size)
        pad = self.tokenizer.pad_token_id or 0
        with P.autocast(self.precision, device):
            for idx in progress(batches, desc="embed", unit="batch", enabled=self.show_progress):
                batch = collate([encodings[i].input_ids for i in idx],
                                [encodings[i].token_type_ids for i in idx], pad)  # fmt: skip
                batch = {k: v.to(device) for k, v in batch.items()}
                hidden = self.model(**batch).last_hidden_state
                out = pool(
                    hidden.float(), batch["attention_mask"], self.spec.pooling, self.spec.normalize
                )
                vectors[idx] = out.cpu().numpy()
        return vectors

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """(N, H) float32 vectors, in the order of ``texts`` (cut to the input limit)."""
        return self.embed_encodings(self.encode(texts))
