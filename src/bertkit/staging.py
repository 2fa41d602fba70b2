"""A set of files written as one, so that a reader never sees some files of one write beside
some of another (a model folder's new weights beside its old config.json).

:func:`staged_folder` writes the files into a hidden work folder inside the output folder, then
renames each into place, the file that marks the set complete last (its old copy removed
first); :func:`swap_folder` replaces a folder that is all one output (prepared shards, a
converted checkpoint, a training checkpoint) whole. Both flush every file to disk before the
renames. Single files: :func:`bertkit.io.atomic_write`. :func:`removed_unless_finished`: a work
folder removed unless its block finishes (an error, a SIGTERM, a watchdog ending the process).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from bertkit.errors import BertkitError, InputError
from bertkit.io import fsync_dir, make_folder


def fsync_file(path: str | Path) -> None:
    """Flush the file ``path``'s content to disk (a writer that does not, such as a copy or a
    third-party ``save``, wrote it)."""
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def staged_folder(
    folder: str | Path, last: str | None = None, drop: Iterable[str] = ()
) -> Iterator[Path]:
    """Write a set of files into ``folder`` as one: yields an empty hidden work folder inside it
    to write them into (subfolders too); when the block ends without error every file there is
    fsynced and renamed to the same place in ``folder``, ``last`` after all the others. On an
    error nothing in ``folder`` changes. The work folder is removed either way.

    ``last``: the file whose presence says the set is complete (``config.json`` of a model
    folder). Its old copy is removed before the first rename, so that a crash between the renames
    leaves a folder without it, which a reader refuses, never the old one beside new files or the
    new one beside old files. ``drop``: files of an older layout that this set does not have (a
    stale task file), removed with it. Other files already in ``folder`` are left as they are.

    Raises BertkitError naming ``folder`` when it cannot be created or the renames fail. An
    error of the block that names a file of the work folder (a writer's BertkitError, or an
    OSError such as a full disk) is raised naming that file's place in ``folder`` instead, as
    the same class (a BertkitError for an OSError), the original chained: the work folder is
    gone by then, and the user knows only the output folder.
    """
    folder = make_folder(folder)
    try:
        work = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder))
    except OSError as e:
        raise BertkitError(f"{folder}: cannot write here ({e.strerror or e})") from e
    try:
        yield work
        _move_in(work, folder, last, drop)
    except (BertkitError, OSError) as e:
        final = _named_in(e, work, folder)
        if final is None:
            raise
        raise final from e
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _named_in(e: BertkitError | OSError, work: Path, folder: Path) -> BertkitError | None:
    """``e`` reworded to name ``folder``'s files where it names ``work``'s
    (``DIR/.staging-x/model.safetensors: write failed`` -> ``DIR/model.safetensors: ...``);
    None when it names no file of ``work`` (the block's input failed: it stays as it was)."""
    if isinstance(e, BertkitError):
        text = str(e)
    elif e.filename is not None:  # a third-party writer's own OSError
        text = f"{e.filename}: write failed ({e.strerror or e})"
    else:
        return None
    if str(work) not in text:
        return None
    here = text.replace(str(work), str(folder))
    if isinstance(e, InputError):  # the same class, from its fields
        path = None if e.path is None else e.path.replace(str(work), str(folder))
        return type(e)(path, e.line, e.message.replace(str(work), str(folder)))
    if isinstance(e, BertkitError):
        try:  # the same class (a CheckpointError stays one) where it takes one message
            return type(e)(here)
        except TypeError:
            pass
    return BertkitError(here)


def _move_in(work: Path, folder: Path, last: str | None, drop: Iterable[str]) -> None:
    """Rename every file of ``work`` to the same place in ``folder`` (see :func:`staged_folder`)."""
    files = sorted(p.relative_to(work) for p in work.rglob("*") if p.is_file())
    marker = Path(last) if last is not None and Path(last) in files else None
    try:
        for rel in files:
            fsync_file(work / rel)
        for name in [*([marker] if marker else []), *drop]:
            (folder / name).unlink(missing_ok=True)
        touched = {folder}
        for rel in sorted(files, key=lambda r: r == marker):
            if rel == marker:  # every other file is on disk before the marker appears
                for d in sorted(touched):
                    fsync_dir(d)
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(work / rel, target)
            touched.add(target.parent)
        for d in sorted(touched):
            fsync_dir(d)
    except OSError as e:
        raise BertkitError(f"{folder}: cannot write the files ({e.strerror or e})") from e


def swap_folder(work: str | Path, output: str | Path, aside: str | Path | None = None) -> None:
    """Rename the finished folder ``work`` (a sibling of ``output``) to ``output``, replacing
    whatever is there: every file of ``work`` is fsynced first; the old ``output`` is renamed
    to ``aside`` (default: the hidden sibling ``.NAME.old-PID``), put back if the rename fails,
    and removed once the new one is in place. Raises OSError when a rename fails (``output``
    then is as it was)."""
    work, output = Path(work), Path(output)
    for p in work.rglob("*"):
        if p.is_file():
            fsync_file(p)
    fsync_dir(work)
    old = Path(aside) if aside is not None else output.parent / f".{output.name}.old-{os.getpid()}"
    moved = output.exists() or output.is_symlink()
    if moved:
        os.replace(output, old)
    try:
        os.replace(work, output)
    except OSError:
        if moved:  # put the previous folder back
            os.replace(old, output)
        raise
    fsync_dir(output.parent)
    if moved:
        with contextlib.suppress(OSError):
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()


_GUARDED: dict[Path, int] = {}
"""Work folders a :func:`removed_unless_finished` block guards now, with the pid that made each."""


@contextlib.contextmanager
def removed_unless_finished(work: str | Path) -> Iterator[None]:
    """Remove the work folder ``work`` unless the block finishes: on any exception leaving it
    (re-raised), on a SIGTERM (the process then ends with status 143, 128 + SIGTERM, as without
    a handler), and when a watchdog ends a stuck process through :func:`remove_guarded`. A block
    that finishes has moved ``work`` into place or still owns it: nothing is removed.

    torchrun's agent stops the other ranks with SIGTERM when one fails, and a rank stuck in a
    collective is ended by its watchdog with ``os._exit``: without this both left the work folder
    behind. The signal handler is set only in the main thread (where Python runs handlers) and
    removes only in this process (not in a forked child); the previous handler comes back when
    the block ends."""
    work = Path(work)
    owner = os.getpid()

    def stop(signum: int, frame: object) -> None:
        if os.getpid() == owner:
            shutil.rmtree(work, ignore_errors=True)
        raise SystemExit(128 + signum)

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main else None
    _GUARDED[work] = owner
    try:
        yield
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        _GUARDED.pop(work, None)
        if main:
            signal.signal(signal.SIGTERM, previous)


def remove_guarded() -> None:
    """Remove every work folder this process guards with :func:`removed_unless_finished`: for a
    caller about to end the process without clean-up (``os._exit`` from a watchdog thread)."""
    for work, owner in list(_GUARDED.items()):
        if owner == os.getpid():
            shutil.rmtree(work, ignore_errors=True)
