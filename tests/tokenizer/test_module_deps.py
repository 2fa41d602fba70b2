"""tokenizer.py builds on its parts, never the reverse: conventions.py (``tok(...)``, ``decode``,
tokenizer_config.json) and words.py (the word cache) do not import tokenizer.py, not even for
type checking (the circle they once made)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOM = Path(__file__).resolve().parents[2] / "src" / "bertkit" / "tokenizer"


def _imported(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize("part", ["conventions.py", "words.py"])
def test_parts_do_not_import_the_tokenizer(part: str) -> None:
    assert "bertkit.tokenizer.tokenizer" not in _imported(ROOM / part)


def test_the_tokenizer_takes_call_and_decode_from_conventions() -> None:
    from bertkit.tokenizer import BertTokenizer
    from bertkit.tokenizer.conventions import TransformersConventions

    assert issubclass(BertTokenizer, TransformersConventions)
    assert BertTokenizer.__call__ is TransformersConventions.__call__
