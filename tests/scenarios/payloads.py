"""Crafted malicious checkpoint files: pickles that create a canary file when unpickled.

Each kind is a different way attackers smuggle code into "weights":

- ``pickle``: a bare pickle whose reduce calls ``builtins.exec``.
- ``torch``: ``torch.save`` zip format (what ``pytorch_model.bin`` normally is) with the same
  payload as a "tensor" value.
- ``legacy``: the pre-1.6 non-zip ``torch.save`` format.
- ``nested``: an outer pickle calling ``torch.storage._load_from_bytes`` on bytes that are
  themselves a torch-saved payload; ``_load_from_bytes`` runs ``torch.load(weights_only=False)``
  on them, so a loader that allows that one global executes the inner payload.

``payload_works`` is the positive control: unpickled unsafely, each file does create its canary,
so a test asserting that the canary never appears is not vacuous.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import torch

KINDS = ("pickle", "torch", "legacy", "nested")


class _Exec:
    """Unpickles as ``exec(code)``."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return (exec, (self.code,))


class _Nested:
    """Unpickles as ``torch.storage._load_from_bytes(inner)``."""

    def __init__(self, inner: bytes) -> None:
        self.inner = inner

    def __reduce__(self):
        return (torch.storage._load_from_bytes, (self.inner,))


def _code(canary: Path) -> str:
    return f"open({str(canary)!r}, 'w').write('code ran')"


def _torch_bytes(obj: object, legacy: bool = False) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    return buf.getvalue()


def payload_bytes(kind: str, canary: Path) -> bytes:
    """File contents of the ``kind`` payload; loading it unsafely creates ``canary``."""
    weights = {"bert.embeddings.word_embeddings.weight": _Exec(_code(canary))}
    if kind == "pickle":
        return pickle.dumps(weights, protocol=2)
    if kind == "torch":
        return _torch_bytes(weights)
    if kind == "legacy":
        return _torch_bytes(weights, legacy=True)
    if kind == "nested":
        inner = _torch_bytes(weights)
        return _torch_bytes({"bert.embeddings.word_embeddings.weight": _Nested(inner)})
    raise ValueError(kind)


def write_payload(path: Path, kind: str, canary: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload_bytes(kind, canary))
    return path


def payload_works(kind: str, tmp: Path) -> bool:
    """Positive control: unpickling the payload unsafely does run its code."""
    canary = tmp / f"control-{kind}.canary"
    data = payload_bytes(kind, canary)
    try:
        if kind == "pickle":
            pickle.loads(data)
        else:
            torch.load(io.BytesIO(data), weights_only=False)
    except Exception:  # the payload's "tensor" is None after exec; only the side effect matters
        pass
    return canary.exists()
