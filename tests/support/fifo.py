"""A named pipe (FIFO) that a thread fills once a reader opens it: the ``--input`` of the tests
of commands that stream their input, and of those that must refuse it without opening it."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def fed_fifo(path: Path, data: bytes) -> Iterator[Path]:
    """Make the FIFO ``path`` and write ``data`` into it from a thread as soon as a reader opens
    it (then close it: the reader sees the end). A command that never opens it leaves the thread
    polling until the block ends, so a test cannot hang on a FIFO nobody reads or writes."""
    os.mkfifo(path)
    done = threading.Event()

    def write() -> None:
        while not done.is_set():
            try:  # non-blocking: ENXIO while no reader has the FIFO open
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                time.sleep(0.01)
                continue
            os.set_blocking(fd, True)
            with contextlib.suppress(BrokenPipeError), os.fdopen(fd, "wb") as f:
                f.write(data)
            return

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield path
    finally:
        done.set()
        writer.join(10)
