"""What an input path must be before a command reads it: a file (not nothing, not a folder), and
where the command reads it more than once a regular file (not a FIFO, nor a device); never a
socket, which no reader can open. One wording for each, whichever command reads the path."""

from __future__ import annotations

import os
import stat
from pathlib import Path

FOLDER_NOT_FILE = "is a folder, expected a file"
"""What an input that must be a file says when it is a folder (every reader and command alike)."""

NOT_REGULAR = "expected a regular file, which this command may read more than once"
"""Why a FIFO or a device is refused where a regular file is needed: a pipe is read once and a
device has no fixed content, so neither can be checked, counted, hashed or split first."""


SOCKET = "is a socket, not a file"
"""What a UNIX socket given as an input says: no reader can open one (the system's answer is
"No such device or address"), streaming or not."""


def special_kind(path: str | Path) -> str | None:
    """What ``path`` is when it exists but is neither a folder nor a regular file ("a FIFO",
    "a character device", ...); None otherwise. A symbolic link is followed."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"))
    kinds += ((stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((kind for test, kind in kinds if test(mode)), None)


def require_file(
    path: str | Path, not_found: str = "file not found", *, stream: bool = False
) -> Path:
    """``path``, checked to be a file before any work is done: MissingFileError ``not_found``
    when nothing is there, InputError :data:`FOLDER_NOT_FILE` for a folder (the one wording of
    both, whichever command reads the file).

    A FIFO or a device (:func:`special_kind`) is read where the command streams its input once,
    as stdin (``stream=True``: tokenize, train-vocab); elsewhere it is refused as ``is a FIFO,
    not a regular file; ``:data:`NOT_REGULAR`, never as "not found". A socket is refused
    everywhere (:data:`SOCKET`)."""
    from bertkit.errors import InputError, MissingFileError

    path = Path(path)
    if path.is_dir():
        raise InputError(path, None, FOLDER_NOT_FILE)
    if path.is_file():
        return path
    kind = special_kind(path)
    if kind is None:
        raise MissingFileError(path, None, not_found)
    if kind == "a socket":
        raise InputError(path, None, SOCKET)
    if not stream:
        raise InputError(path, None, f"is {kind}, not a regular file; {NOT_REGULAR}")
    return path


def open_error(path: str | Path, e: OSError) -> Exception:
    """The one-line error for ``e``, raised opening the input file ``path``: not found, a
    folder, a socket, or the system's reason (no permission, ...)."""
    from bertkit.errors import InputError, MissingFileError

    if isinstance(e, FileNotFoundError):
        return MissingFileError(path, None, "file not found")
    if isinstance(e, IsADirectoryError) or Path(path).is_dir():
        return InputError(path, None, FOLDER_NOT_FILE)
    if special_kind(path) == "a socket":
        return InputError(path, None, SOCKET)
    return InputError(path, None, f"cannot read ({e.strerror or e})")
