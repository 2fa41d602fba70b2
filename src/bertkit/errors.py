"""Errors that reach users as one clear line (file, line, what was expected)."""

from __future__ import annotations

from pathlib import Path


class BertkitError(Exception):
    """Base class for errors bertkit reports to users without a traceback (unless --debug)."""


class InputError(BertkitError, ValueError):
    """Bad input data: names the file, the 1-based line when known, and what was expected.

    Also a ``ValueError`` (and :class:`MissingFileError` a ``FileNotFoundError``), so code
    written against transformers, which raises those, catches it.

    >>> str(InputError("train.tsv", 12, "expected 2 tab-separated columns, got 3"))
    'train.tsv:12: expected 2 tab-separated columns, got 3'
    """

    def __init__(self, path: str | Path | None, line: int | None, message: str) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.message = message
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
