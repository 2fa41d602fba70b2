"""Chunks of a tag sequence with conlleval semantics: the spans entity scoring counts.

IOB1, IOB2/BIO and IOBES all read the same way: ``I-X`` after ``O`` or after another type
starts a chunk (conlleval's startOfChunk / endOfChunk).
"""

from __future__ import annotations

from collections.abc import Sequence


def split_tag(tag: str) -> tuple[str, str]:
    """``"B-PER" -> ("B", "PER")``, ``"O" -> ("O", "")``; a bare prefix has an empty type."""
    if tag == "O":
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def _chunk_ends(prev: str, prev_kind: str, tag: str, kind: str) -> bool:
    """conlleval's endOfChunk: does the chunk holding the previous token end before this one?"""
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev != "O" and prev_kind != kind


def _chunk_starts(prev: str, prev_kind: str, tag: str, kind: str) -> bool:
    """conlleval's startOfChunk: does a chunk start at this token?

    ``I-`` or ``E-`` after ``O`` (or after a chunk of another type) starts a chunk, as in
    conlleval; so does any ``B-`` or ``S-``.
    """
    if tag in ("B", "S"):
        return True
    if tag in ("I", "E") and prev in ("O", "E", "S"):
        return True
    return tag != "O" and prev_kind != kind


def tag_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entity spans ``(type, start, end_exclusive)`` of one sentence, with conlleval semantics.

    Works for IOB1, IOB2/BIO and IOBES. Example: ``["B-PER", "I-PER", "O", "I-LOC", "B-LOC"]``
    -> ``[("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5)]``.
    """
    spans: list[tuple[str, int, int]] = []
    prev, prev_kind, start = "O", "", -1
    for i, tag in enumerate([*tags, "O"]):  # the trailing O closes a chunk open at the end
        cur, kind = split_tag(tag)
        if start >= 0 and _chunk_ends(prev, prev_kind, cur, kind):
            spans.append((prev_kind, start, i))
            start = -1
        if _chunk_starts(prev, prev_kind, cur, kind):
            start = i
        prev, prev_kind = cur, kind
    return spans
