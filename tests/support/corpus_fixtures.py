"""The hand-made pre-training corpus fixtures, one per format (the same six documents, each
file written in its format's way)."""

from __future__ import annotations

from pathlib import Path

FIX = Path(__file__).resolve().parents[1] / "fixtures"

FORMAT_FIXTURES = [
    ("pt_wiki.txt", "wikiextractor"),
    ("pt_bert.txt", "bert"),
    ("pt_docs.jsonl", "jsonl"),
    ("pt_paragraphs.txt", "paragraphs"),
]
"""(file name in tests/fixtures, its format)."""
