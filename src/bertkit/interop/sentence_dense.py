"""sentence-transformers ``Dense`` modules: a linear layer and an activation after the pooling.

Models such as LaBSE project the pooled vector (``Pooling -> Dense -> Normalize``); a folder's
``modules.json`` names each ``Dense`` module's sub-folder (``2_Dense``), which holds:

- ``config.json``: ``in_features``, ``out_features``, ``bias`` and ``activation_function``, the
  activation's class path (``torch.nn.modules.activation.Tanh``, sentence-transformers' default;
  ``torch.nn.modules.linear.Identity``);
- the weights ``linear.weight`` (out, in) and ``linear.bias`` in ``model.safetensors``
  (``pytorch_model.bin`` in older folders: read only with ``allow_pickle``, as every checkpoint).

A ``Dropout`` module among them (``config.json``: ``{"dropout": 0.1}``, sentence-transformers'
default 0.2) does nothing at inference and drops values of the vector in training.

:func:`read_dense` and :func:`read_dropout` read one module's config, :func:`dense_head` builds
the layers of a chain of them, :func:`save_head` writes them so that sentence-transformers loads
them. An activation bertkit does not name here is a CheckpointError naming the folder and the
class: computing something else would give other vectors than sentence-transformers without a
word.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from bertkit.errors import CheckpointError
from bertkit.io import atomic_write_bytes, atomic_write_text

ACTIVATIONS: dict[str, type[torch.nn.Module]] = {
    "Identity": torch.nn.Identity,
    "Tanh": torch.nn.Tanh,
    "ReLU": torch.nn.ReLU,
    "GELU": torch.nn.GELU,
    "Sigmoid": torch.nn.Sigmoid,
    "SiLU": torch.nn.SiLU,
}
"""The activations a Dense module may name (by the last part of its class path)."""
_PATHS = {
    "Identity": "torch.nn.modules.linear.Identity",
    **{n: f"torch.nn.modules.activation.{n}" for n in ("Tanh", "ReLU", "GELU", "Sigmoid", "SiLU")},
}


@dataclass(frozen=True)
class DenseModule:
    """One Dense module of a folder: where it is and what its config says."""

    path: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str
    """A key of :data:`ACTIVATIONS`."""


@dataclass(frozen=True)
class DropoutModule:
    """One Dropout module of a folder: the probability of zeroing a value while training."""

    path: Path
    dropout: float


PostPooling = DenseModule | DropoutModule
"""A module between the pooling and the (normalised) vector."""
DROPOUT_DEFAULT = 0.2
"""sentence-transformers' ``Dropout(dropout=0.2)`` default, for a config without the key."""


def read_dropout(path: Path) -> DropoutModule:
    """A Dropout module folder's config; CheckpointError for an unreadable one or a probability
    outside [0, 1)."""
    config = path / "config.json"
    try:
        cfg = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
        p = float(cfg.get("dropout", DROPOUT_DEFAULT))
    except (OSError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{config}: unreadable Dropout module config ({e})") from e
    if not 0 <= p < 1:
        raise CheckpointError(f"{config}: dropout {p} is not a probability in [0, 1)")
    return DropoutModule(path, p)


def read_dense(path: Path) -> DenseModule:
    """A Dense module folder's config; CheckpointError for an unreadable one or an activation
    not in :data:`ACTIVATIONS`."""
    config = path / "config.json"
    try:
        cfg = json.loads(config.read_text(encoding="utf-8"))
        activation = str(cfg.get("activation_function", _PATHS["Tanh"])).rsplit(".", 1)[-1]
        module = DenseModule(
            path,
            int(cfg["in_features"]),
            int(cfg["out_features"]),
            bool(cfg.get("bias", True)),
            activation,
        )
    except (OSError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{config}: unreadable Dense module config ({e})") from e
    if activation not in ACTIVATIONS:
        raise CheckpointError(
            f"{config}: activation {cfg.get('activation_function')!r} is not computed by bertkit "
            f"(it computes {', '.join(ACTIVATIONS)})"
        )
    return module


def dense_head(modules: Sequence[PostPooling], width: int, allow_pickle: bool = False):
    """The chain as one fp32 ``torch.nn.Sequential`` (linear, activation, dropout, ...) taking
    vectors of ``width``, in eval mode; CheckpointError when a module's weights are missing,
    pickled without ``allow_pickle``, or do not fit its config or the vector before it."""
    from bertkit.interop.pretrained import read_state_dict

    layers: list[torch.nn.Module] = []
    for m in modules:
        if isinstance(m, DropoutModule):
            layers.append(torch.nn.Dropout(m.dropout))
            continue
        if m.in_features != width:
            raise CheckpointError(
                f"{m.path}: the Dense module takes {m.in_features} values, the vector before it "
                f"has {width}"
            )
        state = read_state_dict(m.path, allow_pickle)
        linear = torch.nn.Linear(m.in_features, m.out_features, bias=m.bias)
        want = {"linear.weight": tuple(linear.weight.shape)}
        if m.bias:
            want["linear.bias"] = (m.out_features,)
        got = {k: tuple(state[k].shape) for k in want if k in state}
        if got != want:
            raise CheckpointError(f"{m.path}: expected weights {want}, found {got or 'none'}")
        with torch.no_grad():
            linear.weight.copy_(state["linear.weight"].float())
            if m.bias:
                linear.bias.copy_(state["linear.bias"].float())
        layers += [linear, ACTIVATIONS[m.activation]()]
        width = m.out_features
    return torch.nn.Sequential(*layers).eval()


def dense_width(modules: Sequence[PostPooling], width: int) -> int:
    """The vector size after the chain (``width`` when it has no Dense module)."""
    dense = [m for m in modules if isinstance(m, DenseModule)]
    return dense[-1].out_features if dense else width


def save_head(root: Path, head: torch.nn.Module | None, first: int) -> list[tuple[str, str]]:
    """Write ``head``'s layers (as :func:`dense_head` builds them: a linear layer followed by
    its activation, or a dropout) as modules ``{first}_Dense``, ``{first + 1}_Dropout`` ... of
    ``root``; returns their (kind, folder) for ``modules.json``."""
    layers, modules = list(head or ()), []
    while layers:
        layer = layers.pop(0)
        kind = "Dropout" if isinstance(layer, torch.nn.Dropout) else "Dense"
        folder = root / f"{first + len(modules)}_{kind}"
        if kind == "Dropout":
            save_dropout(folder, layer.p)
        else:
            save_dense(folder, layer, layers.pop(0))
        modules.append((kind, folder.name))
    return modules


def save_dropout(folder: Path, dropout: float) -> None:
    """One Dropout module in ``folder`` (config.json, atomically), as sentence-transformers
    writes it."""
    atomic_write_text(
        folder / "config.json", json.dumps({"dropout": float(dropout)}, indent=2) + "\n"
    )


def save_dense(folder: Path, linear: torch.nn.Linear, activation: torch.nn.Module) -> None:
    """One Dense module in ``folder`` (config.json, model.safetensors), each file atomically."""
    from safetensors.torch import save

    name = type(activation).__name__
    if name not in _PATHS:
        raise CheckpointError(f"cannot save a Dense module with activation {name}")
    tensors = {"linear.weight": linear.weight.detach().float().cpu().contiguous()}
    if linear.bias is not None:
        tensors["linear.bias"] = linear.bias.detach().float().cpu().contiguous()
    config = {
        "in_features": linear.in_features,
        "out_features": linear.out_features,
        "bias": linear.bias is not None,
        "activation_function": _PATHS[name],
    }
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / "model.safetensors", save(tensors))
    atomic_write_text(folder / "config.json", json.dumps(config, indent=2) + "\n")
