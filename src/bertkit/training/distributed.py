"""torchrun / DDP support: process-group setup from the environment and deterministic data sharding.

Communication is PyTorch's own (``torch.distributed`` collectives and ``DistributedDataParallel``);
this module only decides who does what:

* ``init_from_env`` reads torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) and
  starts a process group with gloo on CPU or NCCL on CUDA. Without WORLD_SIZE > 1 it is a no-op.
* ``global_batch_indices``/``micro_batch`` define which examples every rank sees: the data stream of
  a phase is the concatenation of per-epoch permutations seeded by (seed, phase, epoch); update ``u``
  takes the next ``global_batch`` examples of that stream and splits them into ``accum * world``
  micro-batches. Each example is seen exactly once per epoch, whatever the world size, and the whole
  schedule is a function of (seed, examples consumed), so a resume needs only that count.

Rank 0 writes checkpoints and logs; on resume every rank reads the checkpoint folder, so a
multi-node job needs the run folder on a shared file system.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


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


def init_from_env(device: str | None = None) -> DistInfo:
    """Join the torchrun job described by the environment (or run alone when there is none).

    ``device`` None picks CUDA (``cuda:LOCAL_RANK``) when available, else CPU. The backend is NCCL
    for CUDA and gloo for CPU.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    from bertkit.hardware import resolve_device

    device = str(resolve_device(device, local))
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world)
    return DistInfo(rank=rank, world_size=world, local_rank=local, device=device)


def shutdown(info: DistInfo) -> None:
    if info.distributed and dist.is_initialized():
        dist.destroy_process_group()


def barrier(info: DistInfo) -> None:
    if info.distributed:
        dist.barrier()


def all_reduce_sum(values: list[float], info: DistInfo) -> list[float]:
    """Sum a few float64 numbers over all ranks (identity when alone)."""
    if not info.distributed:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def gather_tensors(tensors: dict[str, torch.Tensor], info: DistInfo) -> dict[str, torch.Tensor]:
    """Every rank's tensors as ``"rank<r>.<name>"`` (collective: all ranks must call it).

    Used for per-rank RNG states; tensors of the same name must have the same shape on every rank.
    """
    if not info.distributed:
        return {f"rank0.{k}": v for k, v in tensors.items()}
    out: dict[str, torch.Tensor] = {}
    for name in sorted(tensors):
        local = tensors[name].to(info.device)
        parts = [torch.empty_like(local) for _ in range(info.world_size)]
        dist.all_gather(parts, local)
        for r, part in enumerate(parts):
            out[f"rank{r}.{name}"] = part.cpu()
    return out


def broadcast_flag(flag: bool, info: DistInfo) -> bool:
    """True when ``flag`` is true on any rank."""
    return bool(all_reduce_sum([float(flag)], info)[0] > 0)


# ---- deterministic, resumable data order -------------------------------------------------------


@functools.lru_cache(maxsize=4)  # a pure function; the cache only avoids re-shuffling every step
def epoch_permutation(n: int, seed: int, phase: int, epoch: int) -> np.ndarray:
    """The order of the ``n`` examples in ``epoch`` of ``phase``: a pure function of its arguments."""
    perm = np.random.default_rng([seed, phase, epoch]).permutation(n)
    perm.setflags(write=False)
    return perm


def global_batch_indices(
    n: int, start: int, size: int, seed: int, phase: int
) -> tuple[np.ndarray, list[int]]:
    """Examples ``start .. start+size`` of the phase's stream, and the epoch of each.

    The stream is ``perm(epoch 0) ++ perm(epoch 1) ++ ...``; a batch that crosses an epoch boundary
    takes the end of one permutation and the start of the next, so nothing is dropped or repeated.
    """
    idx: list[int] = []
    epochs: list[int] = []
    pos = start
    while len(idx) < size:
        epoch, offset = divmod(pos, n)
        perm = epoch_permutation(n, seed, phase, epoch)
        take = perm[offset : offset + size - len(idx)]
        idx.extend(int(i) for i in take)
        epochs.extend([epoch] * len(take))
        pos += len(take)
    return np.asarray(idx, dtype=np.int64), epochs


def micro_batch(batch: np.ndarray, micro: int, accum: int, info: DistInfo) -> np.ndarray:
    """This rank's share of micro-step ``micro`` (0-based, < accum) of a global batch.

    The global batch is cut into ``accum * world`` equal slices; micro-step j of rank r takes
    slice ``j * world + r``.
    """
    parts = accum * info.world_size
    if len(batch) % parts:
        raise ValueError(f"global batch {len(batch)} is not divisible by accum*world={parts}")
    size = len(batch) // parts
    k = micro * info.world_size + info.rank
    return batch[k * size : (k + 1) * size]
