"""A minimal torchrun worker for the cheap restart test: join the group, all-reduce, and in
restart round 0 have rank 1 SIGKILL itself after publishing its gloo address; in round 1 rank 1
joins late, so rank 0 reads the keys first and would find the dead worker's address if the keys
of round 0 were still visible. ``--plain`` joins the way bertkit did before (env:// on the agent's
store, the same keys in every round), to reproduce by hand; argv[1] is the timeout in seconds."""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch.distributed as dist

from bertkit.training import distributed as D

rank, restart = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
timeout = float(sys.argv[1])
if restart == 1 and rank == 1:
    time.sleep(1.5)
if "--plain" in sys.argv:
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
    info = D.DistInfo(rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
else:
    info = D.init_from_env("cpu", timeout=timeout)
total = D.all_reduce_sum([rank + 1.0], info)[0]
if restart == 0 and rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
D.barrier(info)
print(f"rank {rank} restart {restart} sum {total:g}", flush=True)
D.shutdown(info)
D.exit_process(0)
