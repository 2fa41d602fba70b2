"""The line a rank stops with when a collective fails, in a world of 3 (the torchrun tests run 2
ranks, where the other rank is always the one to name): which ranks it names as behind, "rank" or
"ranks", and "?" when none is. In-process, over a HashStore, so that the coverage run sees it."""

from __future__ import annotations

import torch.distributed as dist

from bertkit.training.abort import Comm, cancel_end, stop_message

LOST = RuntimeError("Connection reset by peer")


def message(progress: dict[int, int], exc: BaseException = LOST, *, seq: int | None = None) -> str:
    """Rank 1 of 3 stops after ``exc``; ``progress``: rank -> the collectives it reports done
    (``seq``: rank 1's own, None for a rank that has run none yet)."""
    store = dist.HashStore()
    for r, done in progress.items():
        store.set(f"progress/{r}", f"{done} 7 all_reduce")
    comm = Comm(store, rank=1, world=3, timeout=2.0, endpoint="127.0.0.1:0")
    if seq is not None:
        comm.seq, comm.what, comm.step = seq, "all_reduce", 7
    try:
        return stop_message(comm, exc)
    finally:
        cancel_end()  # the bound on this rank's exit


def test_two_ranks_behind_are_named_as_ranks() -> None:
    assert message({0: 4, 2: 3}, seq=5) == (
        "lost the connection to ranks 0, 2 (all_reduce at step 7 on rank 1): Connection reset by peer"
    )
    timed_out = message({0: 4, 2: 3}, RuntimeError("Timed out waiting for peers"), seq=5)
    assert timed_out == "ranks 0, 2 did not answer within 2 s (all_reduce at step 7 on rank 1)"


def test_one_rank_behind_is_a_rank() -> None:
    assert message({0: 5, 2: 4}, seq=5).startswith("lost the connection to rank 2 (all_reduce")


def test_no_rank_behind_in_a_world_of_three_is_named_as_unknown() -> None:
    # every other rank has reached this collective: which one broke it is not known (in a world of
    # 2 it could only be the other rank; in 3 it is not guessed)
    assert message({0: 5, 2: 5}, seq=5).startswith("lost the connection to rank ? (all_reduce")


def test_a_failure_before_any_collective_names_no_rank_behind() -> None:
    # a rank that has run no collective yet (nor have the others: no progress published) cannot
    # tell who is behind
    assert message({}) == (
        "lost the connection to rank ? (start-up at step 0 on rank 1): Connection reset by peer"
    )
