"""Feature-based use of an :class:`~bertkit.inference.embedder.Embedder` (paper section 5.3):
one vector per word piece of each text, with the piece and its character offsets, each taken from
the window where that piece has the most context; :func:`save_token_features` writes them as one
``.npy`` array and a JSONL index (``bertkit embed --per-token``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bertkit.io import atomic_write
from bertkit.staging import staged_folder
from bertkit.tasks.windows import WindowCounts

if TYPE_CHECKING:
    from bertkit.inference.embedder import Embedder


@dataclass
class TokenFeatures:
    """One text's word-piece vectors (n, D) without [CLS]/[SEP], with pieces and offsets."""

    vectors: np.ndarray
    tokens: list[str]
    offsets: list[tuple[int, int]]


@torch.inference_mode()
def token_features(
    embedder: Embedder, texts: Sequence[str]
) -> tuple[list[TokenFeatures], WindowCounts]:
    """Per text, one vector per word piece (no [CLS]/[SEP]) with its characters, each from
    the window where the piece has its maximum context (:meth:`Embedder.token_features`)."""
    encodings = embedder.encode(texts)
    windowed = embedder.window(encodings)
    feats = [
        TokenFeatures(
            np.zeros((len(e.input_ids) - 2, embedder.token_dim), dtype=np.float32),
            embedder.tokenizer.convert_ids_to_tokens(list(e.input_ids[1:-1])),
            [tuple(o) for o in e.offsets[1:-1]],
        )
        for e in encodings
    ]
    for idx, hidden, _mask in embedder._batches(windowed.inputs):
        rows = hidden.cpu().numpy()
        for r, w in enumerate(idx):
            owner, start, best = windowed.owners[w], windowed.starts[w], windowed.is_max[w]
            for k, is_best in enumerate(best):
                if is_best:
                    feats[owner].vectors[start + k] = rows[r, k + 1]  # +1: [CLS]
    if windowed.counts.truncated:  # cut by --truncate: the unseen pieces are left out
        for f, enc in zip(feats, encodings):
            n = min(len(enc.input_ids) - 2, embedder.max_length - 2)
            f.vectors, f.tokens, f.offsets = f.vectors[:n], f.tokens[:n], f.offsets[:n]
    return feats, windowed.counts


def save_token_features(path: str | Path, features: Sequence[TokenFeatures]) -> Path:
    """Write every text's piece vectors as one (total pieces, D) float32 ``.npy`` at ``path``
    and a JSONL index beside it (``path`` with ``.jsonl``): per text its ``line`` (1-based),
    first ``row`` in the array, ``tokens`` and character ``offsets``. Returns the index path.

    The two are one output (:func:`bertkit.staging.staged_folder`, the index last): a failed
    write leaves the previous pair, never new vectors with an old index whose rows no longer
    match."""
    path = Path(path)
    index = path.with_suffix(".jsonl")
    dim = features[0].vectors.shape[1] if features else 0
    rows = np.concatenate([f.vectors for f in features]) if features else np.zeros((0, dim))
    with staged_folder(path.parent, last=index.name) as work:
        _write_pair(work / path.name, work / index.name, rows, features)
    return index


def _write_pair(
    path: Path, index: Path, rows: np.ndarray, features: Sequence[TokenFeatures]
) -> None:
    with atomic_write(path, "wb") as f:
        np.save(f, rows.astype(np.float32))
    with atomic_write(index, "w") as f:
        row = 0
        for n, feat in enumerate(features, start=1):
            f.write(
                json.dumps(
                    {
                        "line": n,
                        "row": row,
                        "tokens": feat.tokens,
                        "offsets": [list(o) for o in feat.offsets],
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
            row += len(feat.tokens)
