"""torchrun / DDP support: process-group setup from the environment, bounded collectives, failures.

Communication is PyTorch's own (``torch.distributed`` collectives and ``DistributedDataParallel``);
this module only decides who does what:

* ``init_from_env`` reads torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) and
  starts a process group with gloo on CPU or NCCL on CUDA. Without WORLD_SIZE > 1 it is a no-op.
* which examples every rank sees is :mod:`bertkit.training.sharding`: the data stream of
  a phase is the concatenation of per-epoch permutations seeded by (seed, phase, epoch); update ``u``
  takes the next ``global_batch`` examples of that stream and splits them into ``accum * world``
  micro-batches. Each example is seen exactly once per epoch, whatever the world size, and the whole
  schedule is a function of (seed, examples consumed), so a resume needs only that count.

Rank 0 writes checkpoints and logs; on resume every rank reads the checkpoint folder, so a
multi-node job needs the run folder on a shared file system.

Restarts and failures:

* Under torchrun (>= 2.4) every restart round of the worker group connects to the *same* TCPStore,
  the agent's, and ``init_process_group(init_method="env://")`` uses the same keys in every round.
  Gloo's full-mesh connect reads the peers' addresses from those keys, so a round could read the
  address a killed worker of the previous round had published: the connect is refused, or waits
  for a socket that never answers until the process-group timeout (30 min for gloo). The group
  here is therefore built on that store under a prefix of its own per restart round
  (``TORCHELASTIC_RUN_ID`` and ``TORCHELASTIC_RESTART_COUNT``), and joining it is bounded by
  ``timeout``.
* Every collective (ours, DDP's) is bounded by the same timeout; a rank that fails tells the
  others, and every rank stops within about that timeout naming the rank that failed and why
  (:mod:`bertkit.training.abort`), so torchrun can restart the group.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from bertkit.errors import BertkitError
from bertkit.training import abort as A

DEFAULT_TIMEOUT = 300.0


class DistributedError(BertkitError):
    """A rank failed, did not answer within the collective timeout, or could not join the group."""


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, evaluates and writes checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


_COMM: A.Comm | None = None
_JOINED = False  # this process joined a process group (see exit_process)


def init_from_env(
    device: str | None = None, timeout: float = DEFAULT_TIMEOUT, *, kernels: bool = True
) -> DistInfo:
    """Join the torchrun job described by the environment (or run alone when there is none).

    ``device`` (``auto``/None, cpu, cuda, cuda:N) is resolved by
    :func:`bertkit.hardware.resolve_device`: on CUDA always ``cuda:LOCAL_RANK`` under torchrun. The backend is NCCL
    for CUDA and gloo for CPU. ``timeout`` (seconds) bounds joining the group and every collective;
    a rank that cannot join in time raises :class:`DistributedError`. ``kernels``: every CPU rank
    runs rank 0's kernel decisions (probed by rank 0); False for a job that runs no model.
    """
    global _COMM, _JOINED
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    from bertkit.hardware import resolve_device

    device = str(resolve_device(device, local, world))
    if device.startswith("cuda"):
        torch.cuda.set_device(int(device.split(":")[1]))  # always cuda:N here
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT", "29500"))
        endpoint = f"{addr}:{port}"
        # Keys of this restart round only (see the module docstring): a worker of an earlier
        # round, or the addresses it published, can never be mistaken for a peer of this one.
        prefix = (
            f"bertkit/{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/"
            f"restart-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        )
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        try:
            store = _connect(addr, port, world, host=rank == 0 and not agent_store, timeout=timeout)
            store = dist.PrefixStore(prefix, store)
            dist.init_process_group(
                backend=backend,
                store=dist.PrefixStore("pg", store),
                rank=rank,
                world_size=world,
                timeout=timedelta(seconds=timeout),
            )
        except (RuntimeError, ValueError, OSError) as e:
            raise DistributedError(
                f"rank {rank} could not join the {world}-process group at {endpoint} within "
                f"{timeout:g} s: {A.first_line(e)}"
            ) from e
        _JOINED = True
        # a fatal signal in a rank (SIGABRT, SIGSEGV) prints every thread's Python stack
        faulthandler.enable(all_threads=True)
        if device == "cpu" and kernels:
            _share_kernel_choices(store, rank)
        _COMM = A.Comm(store, rank, world, timeout, endpoint)
        # The watchdog's own store connection is made here, not in its thread: a job that ended
        # while that thread was still inside TCPStore's constructor (a short job on loaded
        # cores) left a daemon thread in C++ at exit, and the rank died of SIGABRT
        # ("terminate called without an active exception"; once in ~15 full suites).
        try:
            watch_store = dist.PrefixStore(prefix, _connect(addr, port, world, False, timeout))
        except (RuntimeError, OSError):
            watch_store = None
        if watch_store is not None:
            _COMM.watchdog = threading.Thread(
                target=A.watch, args=(_COMM, watch_store), name="bertkit-watchdog", daemon=True
            )
            _COMM.watchdog.start()
        mark("start-up", 0)
    return DistInfo(rank=rank, world_size=world, local_rank=local, device=device)


def _share_kernel_choices(store: dist.Store, rank: int) -> None:
    """Every rank runs rank 0's CPU kernel decisions (:func:`bertkit.hardware.adopt`): rank 0
    makes them (probing while the other ranks wait) and publishes them in the job's store."""
    from bertkit import hardware

    if rank == 0:
        store.set("hardware", json.dumps(hardware.shared()))
    else:
        hardware.adopt(json.loads(store.get("hardware")), "rank 0")


def _connect(addr: str, port: int, world: int, host: bool, timeout: float) -> dist.TCPStore:
    """A TCPStore client (or, on rank 0 outside torchrun, the server) at ``addr:port``."""
    return dist.TCPStore(
        addr,
        port,
        world if host else None,
        is_master=host,
        timeout=timedelta(seconds=timeout),
        wait_for_workers=False,
    )


def shutdown(info: DistInfo) -> None:
    global _COMM
    comm, _COMM = _COMM, None
    if comm is not None:
        comm.stop.set()
        if comm.watchdog is not None:
            comm.watchdog.join(timeout=2 * A.POLL_SECONDS + 1)
    if info.distributed and dist.is_initialized():
        dist.destroy_process_group()


def exit_process(code: int) -> None:
    """End the process with ``code``; a rank that joined a process group skips the interpreter's
    finalization (stdout and stderr flushed, then ``os._exit``).

    A gloo rank that had finished cleanly (process group destroyed, watchdog joined, its summary
    printed) died at exit with SIGABRT ("terminate called without an active exception") twice in
    about 30 full CI runs: C++ threads and objects of c10d/gloo torn down while the interpreter
    is finalized. torchrun then reports the job failed, and with ``--max-restarts`` runs it again.
    Nothing is left to do after a rank's work (checkpoints are renamed into place, files closed),
    so the rank leaves without finalization. Only the ``bertkit`` entry point and test workers
    call this, never a library function: a user's own process exits as it likes.
    """
    if not _JOINED:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


# ---- failures: where this rank is, the error it stops with --------------------------------------------------------


def mark(what: str, step: int, *, publish: bool = True) -> None:
    """Record where this rank is (``what`` at ``step``) for the error lines. ``publish`` (every
    rank passes the same points in the same order) also tells the others, so that a rank that
    timed out can name the ranks that fell behind; False only names this rank's own failures."""
    comm = _COMM
    if comm is None:
        return
    comm.what, comm.step = what, step
    if not publish:
        return
    comm.seq += 1
    with contextlib.suppress(RuntimeError, OSError):
        comm.store.set(f"progress/{comm.rank}", f"{comm.seq} {step} {what}")


def failure(exc: BaseException) -> BaseException:
    """The error this rank stops with after ``exc`` (call in an ``except`` around the work).

    A local failure is reported to the others (the store's ``abort`` key) and comes back as a
    :class:`DistributedError` naming this rank, where it was and the cause. A collective that
    failed or timed out comes back naming the rank that failed (from its report) or the ranks
    that fell behind (:mod:`bertkit.training.abort`). Any clean-up after this is bounded: the
    process is ended if it has not exited within the grace period.
    """
    comm = _COMM
    if comm is None or isinstance(exc, KeyboardInterrupt):
        return exc
    return DistributedError(A.stop_message(comm, exc))


@contextlib.contextmanager
def reported(info: DistInfo):
    """The body of one process's job: under torchrun an error becomes one line naming the rank
    and the cause, on every rank (:func:`failure`); the process group is always shut down."""
    try:
        yield info
    except Exception as e:
        if info.distributed:
            raise failure(e) from e
        raise
    finally:
        shutdown(info)


# ---- collectives ---------------------------------------------------------------------------


def _enter(what: str) -> None:
    comm = _COMM
    if comm is not None:
        mark(what, comm.step)


def barrier(info: DistInfo) -> None:
    if info.distributed:
        _enter("barrier")
        dist.barrier()


def all_reduce_sum(values: list[float], info: DistInfo) -> list[float]:
    """Sum a few float64 numbers over all ranks (identity when alone)."""
    if not info.distributed:
        return list(values)
    _enter("all_reduce")
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def all_reduce_tensor(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """``t`` summed over all ranks, on this rank's device and not read back (identity alone)."""
    if not info.distributed:
        return t
    t = t.to(info.device, non_blocking=True)
    _enter("all_reduce")
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


GRAD_BUCKET_BYTES = 25 * 2**20
"""Gradient bytes per all-reduce of :func:`average_gradients` (DDP's default bucket size)."""


def average_gradients(params: list[torch.nn.Parameter], info: DistInfo) -> None:
    """Every parameter's ``.grad`` replaced by its mean over ranks, as DDP's reduction leaves it
    (divided by the world size, then summed), in buckets of about ``GRAD_BUCKET_BYTES``: one
    collective per bucket, not per parameter (identity alone).

    Collective: every rank passes the same parameters in the same order. A parameter with no
    gradient on this rank takes part as zeros (the collectives must match) and gets the mean.
    Nothing is read back to the host.
    """
    if not info.distributed:
        return
    buckets: list[list[torch.nn.Parameter]] = []
    size, key = 0, None
    for p in params:
        k = (p.dtype, p.device)
        nbytes = p.numel() * p.element_size()
        if not buckets or k != key or size + nbytes > GRAD_BUCKET_BYTES:
            buckets.append([])
            size, key = 0, k
        buckets[-1].append(p)
        size += nbytes
    for bucket in buckets:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in bucket]
        flat = torch.cat([g.reshape(-1) for g in grads]).div_(info.world_size)
        _enter("all_reduce")
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        start = 0
        for p in bucket:
            mean = flat[start : start + p.numel()].view_as(p)
            start += p.numel()
            if p.grad is None:
                p.grad = mean
            else:
                p.grad.copy_(mean)


def gather_tensors(tensors: dict[str, torch.Tensor], info: DistInfo) -> dict[str, torch.Tensor]:
    """Every rank's tensors as ``"rank<r>.<name>"`` (collective: all ranks must call it).

    Used for per-rank RNG states; tensors of the same name must have the same shape on every rank.
    """
    if not info.distributed:
        return {f"rank0.{k}": v for k, v in tensors.items()}
    _enter("all_gather")
    out: dict[str, torch.Tensor] = {}
    for name in sorted(tensors):
        local = tensors[name].to(info.device)
        parts = [torch.empty_like(local) for _ in range(info.world_size)]
        dist.all_gather(parts, local)
        for r, part in enumerate(parts):
            out[f"rank{r}.{name}"] = part.cpu()
    return out


def all_gather_json(obj: Any, info: DistInfo) -> list[Any]:
    """Every rank's ``obj`` (JSON values), in rank order; ``[obj]`` when alone. Sent as JSON
    bytes, not pickles: nothing a peer sends is executed."""
    if not info.distributed:
        return [obj]
    _enter("all_gather")
    dev, world = info.device, info.world_size
    data = torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8)
    sizes = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=dev))
    lengths = [int(n) for n in sizes]
    padded = torch.zeros(max(lengths), dtype=torch.uint8)
    padded[: data.numel()] = data
    parts = [torch.empty(max(lengths), dtype=torch.uint8, device=dev) for _ in range(world)]
    dist.all_gather(parts, padded.to(dev))
    return [json.loads(p[:n].cpu().numpy().tobytes()) for p, n in zip(parts, lengths, strict=True)]


def all_gather_rows(rows: torch.Tensor, info: DistInfo) -> list[torch.Tensor]:
    """Every rank's ``rows`` (R_r, ...) on the CPU, in rank order; ``[rows]`` when alone. The
    ranks' R_r may differ (padded to the largest for the collective); the other dims and the
    dtype must be the same on every rank (collective: all ranks must call it)."""
    if not info.distributed:
        return [rows]
    _enter("all_gather")
    dev, world = info.device, info.world_size
    sizes = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([rows.shape[0]], dtype=torch.int64, device=dev))
    counts = [int(n) for n in sizes]
    padded = rows.new_zeros((max(counts), *rows.shape[1:]), device=dev)
    padded[: rows.shape[0]] = rows.to(dev)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return [p[:n].cpu() for p, n in zip(parts, counts, strict=True)]


def broadcast_float(value: float, info: DistInfo) -> float:
    """Rank 0's ``value`` on every rank (identity when alone)."""
    if not info.distributed:
        return value
    _enter("broadcast")
    t = torch.tensor([value if info.is_main else 0.0], dtype=torch.float64, device=info.device)
    dist.broadcast(t, src=0)
    return float(t.item())


def broadcast_flag(flag: bool, info: DistInfo) -> bool:
    """True when ``flag`` is true on any rank."""
    return bool(all_reduce_sum([float(flag)], info)[0] > 0)
