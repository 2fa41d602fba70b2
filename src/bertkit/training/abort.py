"""The abort protocol of a distributed job: how a failing rank tells the others, how they name it.

A rank that fails writes one line naming itself and the cause under the store key ``abort``
before it exits; a rank whose collective then fails or times out reads it (or names the ranks that
fell behind, from the progress every rank publishes) and stops with that line; a watchdog thread
on every rank ends a rank that is stuck when another has reported a failure. So every rank exits,
non-zero, within about the collective timeout plus a few seconds. The process group and the
collectives themselves are :mod:`bertkit.training.distributed`'s.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
import time
from dataclasses import dataclass, field

import torch.distributed as dist

from bertkit import errors
from bertkit.errors import BertkitError
from bertkit.staging import remove_guarded

ABORT_KEY = "abort"
POLL_SECONDS = 0.25


@dataclass
class Comm:
    """This process's link to the others beyond the process group: the (prefixed) store, where
    it is in the loop, and the watchdog."""

    store: dist.Store
    rank: int
    world: int
    timeout: float
    endpoint: str
    seq: int = 0
    what: str = "start-up"
    step: int = 0
    reported: str | None = None
    """The failure another rank reported, once the watchdog has read it."""
    handled: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    watchdog: threading.Thread | None = None

    @property
    def grace(self) -> float:
        """How long a rank that learnt of a failure waits for itself to stop cleanly."""
        return min(5.0, max(1.0, self.timeout))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _is_comm_error(exc: BaseException) -> bool:
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        s in text
        for s in ("gloo", "Gloo", "NCCL", "Connection", "connection", "Timed out", "timed out")
    )


def _progress(comm: Comm) -> dict[int, tuple[int, int, str]]:
    """(seq, step, what) of every other rank that reported any (none when the store is gone)."""
    out: dict[int, tuple[int, int, str]] = {}
    for r in range(comm.world):
        if r == comm.rank:
            continue
        try:
            if comm.store.check([f"progress/{r}"]):
                seq, step, what = comm.store.get(f"progress/{r}").decode().split(" ", 2)
                out[r] = (int(seq), int(step), what)
        except (RuntimeError, OSError, ValueError):
            return {}
    return out


def _read_abort(store: dist.Store) -> str | None:
    try:
        if store.check([ABORT_KEY]):
            return store.get(ABORT_KEY).decode()
    except (RuntimeError, OSError):
        pass
    return None


def _publish_abort(comm: Comm, message: str) -> str:
    """Record ``message`` as the job's failure unless another rank's came first; returns the one
    that counts."""
    try:
        return comm.store.compare_set(ABORT_KEY, "", message).decode()
    except (RuntimeError, OSError):
        return message


def stop_message(comm: Comm, exc: BaseException) -> str:
    """The line this rank stops with after ``exc`` (see ``distributed.failure``), reported to
    the others when it is this rank's own failure or names the ranks behind a collective that
    failed; the process is then ended should its clean-up outlast the grace period."""
    comm.handled.set()
    me, here = comm.rank, f"{comm.what} at step {comm.step}"
    if not _is_comm_error(exc):
        cause = str(exc) if isinstance(exc, BertkitError) else f"{type(exc).__name__}: {exc}"
        message = f"rank {me} failed in {here}: {cause}"
        _publish_abort(comm, message)
        _linger(comm)
        _bound_exit(comm)
        return message
    reported = _read_abort(comm.store) or comm.reported
    if reported is None:  # the peer may still be writing its report: give it a moment
        time.sleep(min(0.5, comm.grace))
        reported = _read_abort(comm.store) or comm.reported
    if reported is not None:
        message = f"stopping rank {me} ({here}): {reported}"
    else:
        others = _progress(comm)
        behind = sorted(
            r for r in range(comm.world) if r != me and others.get(r, (0,))[0] < comm.seq
        )
        if not behind and comm.world == 2:
            behind = [1 - me]
        who = ", ".join(str(r) for r in behind) or "?"
        noun = "rank" if len(behind) <= 1 else "ranks"
        text = str(exc)
        if "imed out" in text or "imeout" in text:
            message = f"{noun} {who} did not answer within {comm.timeout:g} s ({here} on rank {me})"
        else:
            message = (
                f"lost the connection to {noun} {who} ({here} on rank {me}): {first_line(exc)}"
            )
        _publish_abort(comm, message)
        _linger(comm)
    _bound_exit(comm)
    return message


def _linger(comm: Comm) -> None:
    """On the rank that hosts the store (rank 0 outside torchrun), wait briefly until the others
    have seen the abort, so that the report outlives this process long enough to be read."""
    if comm.rank != 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        return
    deadline = time.monotonic() + comm.grace
    keys = [f"abort-seen/{r}" for r in range(1, comm.world)]
    while time.monotonic() < deadline:
        try:
            if all(comm.store.check([k]) for k in keys):
                return
        except (RuntimeError, OSError):
            return
        time.sleep(0.05)


def _bound_exit(comm: Comm) -> None:
    """End the process (exit status 1, with a stack dump) should its clean-up hang."""
    comm.stop.set()
    end_after(comm.grace + 10.0)


_ender: threading.Timer | None = None


def end_after(seconds: float) -> None:
    """End this process in ``seconds`` unless it has exited by then: one error line, every
    thread's stack, the folders it guards removed (:func:`remove_guarded`: ``os._exit`` runs no
    clean-up), exit status 1. A timer thread does it, so it needs the GIL; should the GIL never
    come free, faulthandler ends the process 10 s later (stack dump, status 1, folders left)."""
    global _ender
    cancel_end()
    faulthandler.dump_traceback_later(seconds + 10.0, exit=True)
    line = f"still running {seconds:g} s after its failure was handled; ending the process"
    _ender = threading.Timer(seconds, _exit_now, args=(line,), kwargs={"stacks": True})
    _ender.daemon = True
    _ender.start()


def cancel_end() -> None:
    """Call off :func:`end_after` (a caller that goes on living after a handled failure)."""
    faulthandler.cancel_dump_traceback_later()
    if _ender is not None:
        _ender.cancel()


def _exit_now(line: str, *, stacks: bool = False) -> None:
    """Print ``line`` as this process's error (and every thread's stack with ``stacks``), remove
    the folders it guards (``os._exit`` runs no clean-up) and exit with status 1; should that
    clean-up hang, faulthandler ends the process 10 s later."""
    faulthandler.dump_traceback_later(10.0, exit=True)
    print(f"{errors.program}: error: {line}", file=sys.stderr, flush=True)
    if stacks:
        faulthandler.dump_traceback(all_threads=True)
    remove_guarded()
    os._exit(1)


def watch(comm: Comm, store: dist.Store) -> None:
    """Watchdog thread: when another rank reports a failure (or the store disappears) and this
    rank has not stopped by itself within the grace period, print one error line and exit.
    ``store``: a connection of its own to the job's store (the main thread's may be busy)."""
    lost_since: float | None = None
    while not comm.stop.wait(POLL_SECONDS):
        try:
            reported = store.get(ABORT_KEY).decode() if store.check([ABORT_KEY]) else None
            lost_since = None
        except (RuntimeError, OSError):
            reported = None
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since < comm.grace:
                continue
            reported = f"the store at {comm.endpoint} is gone (rank 0 or the torchrun agent exited)"
        if reported is None:
            continue
        comm.reported = reported
        with contextlib.suppress(RuntimeError, OSError):
            store.set(f"abort-seen/{comm.rank}", "1")
        if comm.handled.wait(comm.grace) or comm.stop.is_set():
            return
        # the main thread is stuck (in a collective, or a hang of its own): stop it from here
        _exit_now(
            f"stopping rank {comm.rank} ({comm.what} at step {comm.step}, not responding): "
            f"{reported}"
        )
