"""Atomic file output: write to a temporary file in the same folder, fsync, then rename.

A crash (or SIGKILL) at any moment leaves either the old file or the complete new one, never a
half-written file under the final name. A set of files read as one: :mod:`bertkit.staging`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from bertkit.errors import BertkitError
from bertkit.input_files import open_error


def fsync_dir(path: str | Path) -> None:
    """Flush a directory entry (the rename itself) to disk where the OS allows it."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | Path, mode: str = "w", encoding: str | None = "utf-8"
) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; on success fsync and rename it over ``path``.

    On any exception the temporary file is removed and ``path`` is left untouched.
    Raises BertkitError naming ``path`` (or the other file an OSError of the block names).
    """
    path = Path(path)
    binary = "b" in mode
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise BertkitError(f"{path}: cannot write here ({e.strerror or e})") from e
    try:
        # mkstemp creates 0600 files; give the result the permissions open() would have.
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):  # another file named: the block's input failed, not this
            other = e.filename not in (None, tmp, str(path))
            what = f"{e.filename}: cannot read" if other else f"{path}: write failed"
            raise BertkitError(f"{what} ({e.strerror or e})") from e
        raise


def make_folder(path: str | Path) -> Path:
    """Create the output folder ``path`` (and its parents); BertkitError naming it when that
    cannot be done (a file of that name, a read-only disk, no permission)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BertkitError(f"{path}: cannot create the output folder ({e.strerror or e})") from e
    return path


def check_folder_creatable(path: str | Path) -> None:
    """Refuse, before any work is done, an output folder that :func:`make_folder` could not
    make: a file of that name, or a nearest existing folder above it that is a file or cannot
    be written (read-only). Creates nothing."""
    path = Path(path)
    here = path
    while not here.exists() and here.parent != here:
        here = here.parent
    if not here.is_dir():
        raise BertkitError(f"{path}: cannot create the output folder ({here} is a file)")
    if not os.access(here, os.W_OK | os.X_OK):
        raise BertkitError(f"{path}: cannot create the output folder ({here} is not writable)")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_write(path, "w") as f:
        f.write(text)


def report_json(obj: Any) -> str:
    """``obj`` (metrics: dicts, lists, numbers, numpy scalars) as indented JSON that strict
    parsers read: a NaN or infinite value (Pearson of constant scores, say) becomes ``null``,
    where ``json.dumps`` would write the ``NaN`` that JSON does not have."""

    def finite(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: finite(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [finite(v) for v in x]
        if isinstance(x, float) or type(x).__module__ == "numpy":
            try:
                f = float(x)
            except (TypeError, ValueError):
                return x
            return f if f == f and f not in (float("inf"), float("-inf")) else None
        return x

    return json.dumps(finite(obj), indent=2, default=float, allow_nan=False)


def write_json_manifest(
    path: str | Path, format_name: str, version: int, body: dict[str, Any]
) -> dict:
    """Write a manifest (``{"format", "version", **body}``, indented JSON) atomically; returns
    what was written."""
    manifest = {"format": format_name, "version": version, **body}
    atomic_write_text(path, json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_json_manifest(
    path: str | Path, format_name: str, version: int, what: str
) -> dict[str, Any]:
    """A manifest written by :func:`write_json_manifest`, checked to be ``format_name`` at
    ``version``; one InputError line naming the file otherwise (``what``: the folder expected,
    for the not-found message)."""
    from bertkit.errors import InputError

    path = Path(path)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise InputError(path, None, f"not found (expected {what})") from e
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(path, None, f"expected a JSON manifest ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != format_name:
        raise InputError(path, None, f"expected a manifest with format {format_name!r}")
    if manifest.get("version") != version:
        raise InputError(path, None, f"expected format version {version}")
    return manifest


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


ENCODING_ERRORS = ("strict", "replace")
"""What invalid UTF-8 becomes (``--encoding-errors``): an error naming file and line, or U+FFFD."""


def read_text_lines(
    path: str | Path,
    errors: str = "strict",
    span: tuple[int, int] | None = None,
    *,
    replace_hint: bool = False,
    drop_bom: bool = False,
) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line_without_newline)`` from a UTF-8 file, streaming; ``.xz``,
    ``.gz`` and ``.bz2`` files are decompressed on the fly.

    With ``errors="strict"`` invalid UTF-8 raises InputError naming the file and line; with
    ``errors="replace"`` the bad bytes become U+FFFD. A corrupt or truncated compressed file is
    an InputError naming the line reached.

    ``span=(start, end)``: only the lines starting in bytes ``[start, end)`` of an uncompressed
    file, where ``start`` is a line start; they are numbered from 1 (the caller knows where the
    span begins: :func:`lines_before` turns a number back into the file's).

    ``replace_hint``: the invalid-UTF-8 error suggests ``--encoding-errors replace`` (for the
    commands that have that flag). ``drop_bom``: a UTF-8 byte-order mark that starts the file
    (editors on Windows write one) is not part of its first line.
    """
    path = Path(path)
    if span is not None and path.suffix.lower() in COMPRESSED_SUFFIXES:
        raise ValueError(f"{path}: a byte span of a compressed file cannot be read")
    try:
        f = _open_maybe_compressed(path)
    except OSError as e:
        raise open_error(path, e) from e
    with f:
        if span is None:
            yield from _decoded_lines(f, path, errors, replace_hint, drop_bom)
        else:
            f.seek(span[0])
            lines = _lines_until(f, span[1] - span[0])
            yield from _decoded_lines(lines, path, errors, replace_hint, drop_bom and not span[0])


COMPRESSED_SUFFIXES = (".xz", ".gz", ".bz2")
"""Suffixes of the files read through a decompressor (whole: they have no byte spans)."""


def _uncompressed_name(path: str | Path) -> Path:
    """``path``'s name without a compression suffix: ``train.csv`` for ``train.csv.gz``."""
    path = Path(path)
    return Path(path.stem) if path.suffix.lower() in COMPRESSED_SUFFIXES else Path(path.name)


def format_suffix(path: str | Path) -> str:
    """The lower-case suffix that names a file's format, looking through a compression suffix:
    ``.csv`` for ``train.csv``, ``train.CSV.gz`` and ``train.csv.xz`` alike (what
    :func:`read_text_lines` decompresses is read like the plain file)."""
    return _uncompressed_name(path).suffix.lower()


def format_stem(path: str | Path) -> str:
    """A file's name without its format suffix, nor a compression suffix before that: ``train``
    for ``train.csv`` and ``train.csv.gz`` alike (a task's default name)."""
    return _uncompressed_name(path).stem


def read_bytes(path: str | Path) -> bytes:
    """The whole content of the input file ``path``, decompressed by suffix like
    :func:`read_text_lines` (for the formats read whole, such as SQuAD's JSON); a one-line
    InputError when it cannot be opened (:func:`open_error`) or decompressed."""
    import lzma

    from bertkit.errors import InputError

    path = Path(path)
    try:
        f = _open_maybe_compressed(path)
    except OSError as e:
        raise open_error(path, e) from e
    with f:
        try:
            return f.read()
        except (EOFError, OSError, lzma.LZMAError) as e:
            if path.suffix.lower() not in COMPRESSED_SUFFIXES:
                raise InputError(
                    path, None, f"cannot read ({getattr(e, 'strerror', None) or e})"
                ) from e
            raise InputError(path, None, f"cannot decompress ({e})") from e


def _lines_until(f: Iterable[bytes], size: int) -> Iterator[bytes]:
    """The lines of ``f`` that start within its next ``size`` bytes."""
    read = 0
    for raw in f:
        if read >= size:
            return
        read += len(raw)
        yield raw


def lines_before(path: str | Path, offset: int, chunk: int = 1 << 20) -> int:
    """How many lines of an uncompressed file end before byte ``offset`` (a line start): what
    turns a line number within a span starting there into the file's."""
    n, left = 0, offset
    with open(path, "rb") as f:
        while left > 0 and (block := f.read(min(chunk, left))):
            n += block.count(b"\n")
            left -= len(block)
    return n


def read_input_lines(
    path: str | Path | None, errors: str = "strict", *, replace_hint: bool = False
) -> Iterator[tuple[int, str]]:
    """The lines of ``path`` (:func:`read_text_lines`), or of standard input when ``path`` is
    None, read as bytes and decoded by the same rules, ``<stdin>`` naming it in errors: the
    one reader of the CLI's "lines from a file or stdin" inputs."""
    import sys

    if path is not None:
        return read_text_lines(path, errors, replace_hint=replace_hint)
    return _decoded_lines(sys.stdin.buffer, "<stdin>", errors, replace_hint)


def _decoded_lines(
    f: Iterable[bytes],
    where: str | Path,
    errors: str,
    replace_hint: bool = False,
    drop_bom: bool = False,
) -> Iterator[tuple[int, str]]:
    import lzma

    from bertkit.errors import InputError

    n = 0
    lines = iter(f)
    while True:
        try:
            raw = next(lines)
        except StopIteration:
            return
        except (EOFError, OSError, lzma.LZMAError) as e:
            raise InputError(where, n + 1, f"cannot decompress ({e})") from e
        n += 1
        try:
            line = raw.decode("utf-8", errors=errors)
        except UnicodeDecodeError as e:
            hint = "; pass --encoding-errors replace to substitute U+FFFD" if replace_hint else ""
            raise InputError(
                where, n, f"invalid UTF-8 at byte {e.start} of the line (expected UTF-8 text{hint})"
            ) from e
        if n == 1 and drop_bom:
            line = line.removeprefix("\ufeff")
        yield n, line.rstrip("\r\n")


def count_lines(path: str | Path, chunk: int = 1 << 20) -> int | None:
    """Lines of an uncompressed text file, counted by newline bytes without decoding (about a
    second per GB; a last line without a newline counts); None for compressed files, whose
    count would cost a full decompression, and for anything but a regular file."""
    path = Path(path)
    if path.suffix.lower() in COMPRESSED_SUFFIXES or not path.is_file():
        return None  # a FIFO or a device: counting would consume what the command is to read
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb") as f:
        f.seek(size - 1)
        unterminated = f.read(1) != b"\n"
    return lines_before(path, size, chunk) + unterminated


def _open_maybe_compressed(path: Path):
    """A binary file object, decompressing by suffix (.xz, .gz, .bz2)."""
    suffix = path.suffix.lower()
    if suffix == ".xz":
        import lzma

        return lzma.open(path, "rb")
    if suffix == ".gz":
        import gzip

        return gzip.open(path, "rb")
    if suffix == ".bz2":
        import bz2

        return bz2.open(path, "rb")
    return open(path, "rb")
