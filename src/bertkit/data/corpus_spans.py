"""Where a corpus file can be cut into byte spans that read its documents exactly once: what
lets ``prepare-pretraining`` prepare one large file in pieces (:mod:`bertkit.data.prepare_files`)."""

from __future__ import annotations

from pathlib import Path

from bertkit.data.corpus import WIKITEXT_TITLE

SPLITTABLE_FORMATS = ("bert", "paragraphs", "wikiextractor", "wikitext", "jsonl")
"""The formats :func:`document_start` can cut (not Parquet, which is read by row groups)."""


def document_start(path: str | Path, fmt: str, lo: int, hi: int | None = None) -> int | None:
    """The first byte offset in ``[lo, hi)`` (``hi`` None: to the end) of an uncompressed text
    file in format ``fmt`` at which a document starts, or None: where a file can be cut so that
    reading the two spans gives the whole file's documents. A pure function of the file and the
    offsets, so two workers cutting at the same nominal offset agree. Offset 0 is always a start.

    A line start ``q`` is a document start when the line there is, by format:

    - ``bert``, ``paragraphs``: not blank, and the line before it is blank;
    - ``wikiextractor``: ``<doc ...`` (after leading whitespace);
    - ``wikitext``: an article title (`` = Title = ``);
    - ``jsonl``: any line (one document a line).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
    ...     _ = f.write(b"A b.\\nC d.\\n\\nE f.\\n")
    >>> document_start(f.name, "bert", 1), document_start(f.name, "bert", 1, 11)
    (11, None)
    >>> os.unlink(f.name)
    """
    if fmt not in SPLITTABLE_FORMATS:
        raise ValueError(f"format {fmt!r} has no byte spans (one of {SPLITTABLE_FORMATS})")
    if lo == 0:
        return 0
    with open(path, "rb") as f:
        f.seek(lo - 1)
        pos = lo - 1 + len(f.readline())  # the first line start at or after lo
        prev_blank = None  # the line before pos: read back only if the rule needs it
        while hi is None or pos < hi:
            raw = f.readline()
            if not raw:
                return None
            line = raw.decode("utf-8", "replace").rstrip("\r\n")  # as the readers see it
            text = line.strip()
            if fmt in ("bert", "paragraphs"):
                if prev_blank is None:
                    prev_blank = _blank_line_before(f, pos)
                    f.seek(pos + len(raw))
                if text and prev_blank:
                    return pos
                prev_blank = not text
            elif fmt == "jsonl" or (
                text.startswith("<doc") if fmt == "wikiextractor" else WIKITEXT_TITLE.match(line)
            ):
                return pos
            pos += len(raw)
    return None


def _blank_line_before(f, pos: int, chunk: int = 4096) -> bool:
    """Whether the line that ends at byte ``pos - 1`` (its newline) of binary file ``f`` is
    blank (whitespace only; the file's start counts as blank). Reads back only as far as that
    line's last non-whitespace byte."""
    end = pos - 1
    while end > 0:
        start = max(0, end - chunk)
        f.seek(start)
        block = f.read(end - start)
        cut = block.rfind(b"\n")
        # A multi-byte space cut by the chunk decodes to U+FFFD, "not blank": a missed cut
        # point, never a wrong one, and the same answer for every worker.
        if block[cut + 1 :].decode("utf-8", "replace").strip():
            return False
        if cut >= 0:
            return True
        end = start
    return True
