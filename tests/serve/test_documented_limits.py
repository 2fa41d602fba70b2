"""docs/serve.md's table of limits ("TEI's names and defaults") and `bertkit serve`'s defaults agree:
every flag the table names has the default it gives (max-batch-tokens 16,384 was pinned by nothing)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from bertkit.cli.main import build_parser
from bertkit.serve.settings import ServeSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "serve.md"


def documented_limits() -> dict[str, str]:
    """flag -> its default cell, from the rows of the "## Limits" table that name a flag."""
    section = DOC.read_text(encoding="utf-8").split("## Limits", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `--([a-z-]+)[^`]*` \| ([^|]+) \|", section, flags=re.M)
    return {flag: cell.strip() for flag, cell in rows}


def as_value(cell: str) -> int | float | None:
    """'2,000,000 bytes' -> 2000000, '60 s' -> 60, 'none' -> None."""
    if cell == "none":
        return None
    return float(cell.split()[0].replace(",", ""))


def test_the_documented_limits_are_the_defaults() -> None:
    doc = documented_limits()
    assert set(doc) == {
        "payload-limit",
        "max-client-batch-size",
        "max-input-tokens",
        "max-concurrent-requests",
        "request-timeout",
        "api-key",
        "max-batch-tokens",
    }
    args = build_parser().parse_args(["serve", "--model", "m"])
    defaults = {f.name: f.default for f in dataclasses.fields(ServeSettings)}
    for flag, cell in doc.items():
        name = flag.replace("-", "_")
        assert getattr(args, name) == defaults[name] == as_value(cell), flag
    assert defaults["max_batch_tokens"] == 16384  # TEI's default, as the table says
