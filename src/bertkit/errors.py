"""Errors that reach users as one clear line (file, line, what was expected)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def first_few(items: Sequence[str], limit: int = 4, sep: str = ", ") -> str:
    """``items`` joined by ``sep``, the first ``limit`` of them and how many more, so an error
    that names keys or shapes stays a line a reader can take in (a config of another model
    mismatches every tensor: a hundred names).

    >>> first_few(["a", "b", "c", "d", "e", "f"])
    'a, b, c, d and 2 more'
    """
    shown = sep.join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


class BertkitError(Exception):
    """Base class for errors bertkit reports to users without a traceback (unless --debug)."""


class InputError(BertkitError, ValueError):
    """Bad input data: names the file, the 1-based line when known, and what was expected.

    Also a ``ValueError`` (and :class:`MissingFileError` a ``FileNotFoundError``), so code
    written against transformers, which raises those, catches it.

    >>> str(InputError("train.tsv", 12, "expected 2 tab-separated columns, got 3"))
    'train.tsv:12: expected 2 tab-separated columns, got 3'
    >>> str(InputError(None, None, "unknown GLUE task 'MRPCX'"))  # no "<input>: " before it
    "unknown GLUE task 'MRPCX'"
    """

    def __init__(self, path: str | Path | None, line: int | None, message: str) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.message = message
        if self.path is None and line is None:  # no place to name (a flag's value): the message
            super().__init__(message)
            return
        where = self.path or "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")

    def __reduce__(self):  # rebuilt from its fields when sent between processes
        return (type(self), (self.path, self.line, self.message))


class MissingFileError(InputError, FileNotFoundError):
    """An input file or folder that does not exist."""


class ConfigError(BertkitError, ValueError):
    """A configuration value or combination that cannot work."""


class CheckpointError(BertkitError, OSError):
    """A checkpoint that is missing, corrupt, unsafe to load, or does not match the model (an
    ``OSError``, as transformers' ``from_pretrained`` raises)."""


program = "bertkit"
"""How error lines printed outside the CLI's handler begin (``bertkit COMMAND``; set by the CLI)."""
