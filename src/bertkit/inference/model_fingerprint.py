"""A model folder's fingerprint: the sha256 over the files that decide its output, which a
corpus run's manifest records (:mod:`bertkit.inference.sharded`) so that a resumed run, or a
search over an embedded index, refuses a model that changed since."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from bertkit.io import sha256_file

# The files that decide a model folder's output: config, weights, tokenizer and the
# sentence-transformers module configs (pooling, normalisation, max length).
MODEL_SUFFIXES = (".json", ".txt", ".safetensors", ".bin", ".onnx", ".model")


def model_fingerprint(directory: str | Path | None) -> dict[str, Any]:
    """``{"path", "sha256", "files"}`` of a model folder: the sha256 over the name, size and full
    content sha256 of every top-level ``*.json, *.txt, *.safetensors, *.bin, *.onnx, *.model``
    file, every ``*/config.json`` one level down, and every such file of a sentence-transformers
    module folder (named by ``modules.json`` or a Router's ``router_config.json``: a ``Dense``
    layer's or a route's own weights), in name order; hidden files and folders are left out (a
    ``.staging-*`` work folder an interrupted save left).

    Whole contents rather than sizes or mtimes: a copy keeps the fingerprint, a retrained model
    with the same shapes changes it. Hashing costs about a second per GB of weights, once per
    run. ``directory`` None (an Embedder built in memory): no fingerprint, so resume cannot check
    the model and only the settings are compared.
    """
    if directory is None:
        return {"path": None, "sha256": None, "files": 0}
    root = Path(directory)
    modules = [p for name in _module_folders(root) for p in (root / name).glob("*")]
    files = sorted(
        {
            p
            for p in [*root.iterdir(), *root.glob("*/config.json"), *modules]
            if p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(root).parts)
            and p.suffix.lower() in MODEL_SUFFIXES
        }
    )
    h = hashlib.sha256()
    for p in files:
        rel = p.relative_to(root).as_posix()
        h.update(f"{rel}\0{p.stat().st_size}\0{sha256_file(p)}\n".encode())
    return {"path": str(root.absolute()), "sha256": h.hexdigest(), "files": len(files)}


def _module_folders(root: Path) -> list[str]:
    """The sub-folders holding sentence-transformers modules: ``modules.json``'s paths and a
    Router's module ids (unreadable files name none: the model loader reports them)."""
    names: list[str] = []
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        names += [m.get("path") or "" for m in modules if isinstance(m, dict)]
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    try:
        router = json.loads((root / "router_config.json").read_text(encoding="utf-8"))
        names += list(router.get("types", {}))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return [n for n in names if isinstance(n, str) and n and (root / n).is_dir()]
