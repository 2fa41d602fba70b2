"""The layers of src/bertkit and what each may import (docs/architecture.md), read from the source.

Every ``bertkit.*`` import counts, at module level or inside a function, so a lazy import cannot
hide an upward arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "bertkit"

FOUNDATION = {
    "bertkit", "errors", "io", "progress", "config", "cpu", "probe_cache", "hardware", "precision",
    "hub",
}  # fmt: skip
# room -> the rooms it may import (besides itself); docs/architecture.md draws the same table
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "io": {"errors"},
    "progress": set(),
    "config": {"errors"},
    "cpu": set(),
    "probe_cache": {"errors", "io"},
    "hardware": {"bertkit", "errors", "io", "cpu", "probe_cache"},
    "precision": {"errors", "hardware"},
    "hub": {"errors"},
    "evaluation": set(),
    "tokenizer": FOUNDATION,
    "model": FOUNDATION,
    "interop": FOUNDATION | {"model", "tokenizer"},
    "data": FOUNDATION | {"tokenizer", "evaluation"},
    "tasks": FOUNDATION | {"tokenizer", "evaluation", "data"},
    "inference": FOUNDATION | {"tokenizer", "evaluation", "data", "tasks", "model", "interop"},
    "export": FOUNDATION | {"tokenizer", "evaluation", "data", "tasks", "model", "interop"},
    "training": FOUNDATION
    | {"tokenizer", "evaluation", "data", "tasks", "model", "interop", "inference"},
    "serve": FOUNDATION
    | {"tokenizer", "evaluation", "data", "tasks", "model", "interop", "inference", "export"},
    "recipes": FOUNDATION
    | {
        "tokenizer",
        "evaluation",
        "data",
        "tasks",
        "model",
        "interop",
        "inference",
        "export",
        "training",
    },
    "cli": FOUNDATION
    | {
        "tokenizer",
        "evaluation",
        "data",
        "tasks",
        "model",
        "interop",
        "inference",
        "export",
        "training",
        "serve",
        "recipes",
    },
    "__main__": {"cli"},
}


def _room(module: str) -> str:
    """``bertkit.tasks.glue`` -> ``tasks``; ``bertkit`` -> ``bertkit`` (the root package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "bertkit"


def _module_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    return ".".join(["bertkit", *(p for p in rel.parts if p != "__init__")])


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported bertkit module) for every bertkit import in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "bertkit":
                # ``from bertkit import precision`` names a room; ``__version__`` is the root's
                out += [
                    (node.lineno, "bertkit" if a.name.startswith("__") else f"bertkit.{a.name}")
                    for a in node.names
                ]
            elif node.module.startswith("bertkit."):
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("bertkit")]
    return out


def upward_arrows(root: Path = SRC) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        module = _module_of(path, root)
        room = _room(module) if "." in module else "bertkit"
        if room == "bertkit":  # the root package only names what the rooms export
            continue
        allowed = ALLOWED.get(room)
        if allowed is None:
            bad.append(f"{path.relative_to(root)}: room {room!r} is not in the layer table")
            continue
        for line, target in imports(path):
            other = _room(target)
            if other != room and other not in allowed:
                bad.append(f"{path.relative_to(root)}:{line}: {room} imports {target}")
    return bad


def test_no_module_imports_a_layer_above_it() -> None:
    assert upward_arrows() == []


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """Negative control: a model file importing training, or evaluation importing data, fails."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "bad.py").write_text(
        "def f():\n    from bertkit.training.loop import Trainer\n"
    )
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "bad.py").write_text(
        "from bertkit.data.tasks.conll import read_conll\n"
    )
    found = upward_arrows(tmp_path)
    assert found == [
        "evaluation/bad.py:1: evaluation imports bertkit.data.tasks.conll",
        "model/bad.py:2: model imports bertkit.training.loop",
    ]


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_every_room_in_the_table_exists(room: str) -> None:
    assert (SRC / room).is_dir() or (SRC / f"{room}.py").is_file() or room == "serve"
