"""DDP with gloo on CPU equals one process with the same global batch; sharding covers each example once."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from bertkit.training import distributed as D
from bertkit.training import sharding as S

from .helpers import ddp_worker, decisions_worker, free_port, losses, make_trainer


def _run(tmp_path, name: str, world: int, stop: int | None = None, **kw) -> tuple[list, dict]:
    run = tmp_path / name
    run.mkdir(exist_ok=True)
    mp.spawn(ddp_worker, args=(world, free_port(), str(run), 5, kw, stop), nprocs=world, join=True)
    if stop is not None:
        return [], {}
    return losses(run), load_file(str(run / "final.safetensors"))


def test_two_gloo_processes_match_one(tmp_path):
    two_loss, two_w = _run(tmp_path, "two", 2, dropout=0.0)
    one = make_trainer(tmp_path / "one", steps=5, dropout=0.0)  # in-process, world size 1
    one.fit()
    one_loss, one_w = losses(tmp_path / "one"), one.core.state_dict()
    assert len(one_loss) == len(two_loss) == 5
    for (s1, l1), (s2, l2) in zip(one_loss, two_loss, strict=True):
        assert s1 == s2 and abs(l1 - l2) < 1e-5
    assert all(torch.allclose(one_w[k], two_w[k], atol=1e-5) for k in one_w)
    # negative control: a different global batch (another data-order seed) does not match
    other = make_trainer(tmp_path / "other", steps=5, dropout=0.0, seed=8)
    other.fit()
    other_loss = losses(tmp_path / "other")
    assert max(abs(a[1] - b[1]) for a, b in zip(two_loss, other_loss)) > 1e-3


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("accum", [1, 2])
def test_every_example_seen_once_per_epoch(world, accum):
    n = 37
    batch = 4 * accum * world
    seen: list[int] = []
    epochs: list[int] = []
    for position in range(0, 3 * n + batch, batch):
        idx, ep = S.global_batch_indices(n, position, batch, seed=3, phase=0)
        for rank in range(world):
            info = D.DistInfo(rank=rank, world_size=world)
            for j in range(accum):
                part = S.micro_batch(idx, j, accum, info)
                seen.extend(part.tolist())
                epochs.extend(S.micro_batch(np.asarray(ep), j, accum, info).tolist())
    for e in range(3):
        assert sorted(i for i, x in zip(seen, epochs) if x == e) == list(range(n))


def test_data_order_depends_only_on_seed_and_position():
    a, _ = S.global_batch_indices(50, 40, 20, seed=1, phase=0)
    b = np.concatenate(
        [S.global_batch_indices(50, 40, 10, 1, 0)[0], S.global_batch_indices(50, 50, 10, 1, 0)[0]]
    )
    assert a.tolist() == b.tolist()
    assert S.global_batch_indices(50, 40, 20, seed=2, phase=0)[0].tolist() != a.tolist()


def test_every_rank_runs_rank_0s_kernel_paths(tmp_path):
    """Ranks do not probe on their own (on shared cores they chose oneDNN and BLAS apart): rank
    1, with no setting of its own, takes rank 0's choices; a setting of its own stays."""
    import json

    rank0 = {
        "BERTKIT_FP32_MATMUL": "onednn",
        "BERTKIT_BF16": "emulated",
        "BERTKIT_INT8_WEIGHTS": "7bit",
        "BERTKIT_BF16_ATTENTION": "fused",
    }
    for name, rank1 in (("adopts", {}), ("keeps", {"BERTKIT_FP32_MATMUL": "blas"})):
        out = tmp_path / name
        out.mkdir()
        mp.spawn(decisions_worker, args=(2, free_port(), str(out), [rank0, rank1]), nprocs=2)
        got = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
        assert got[0] == {
            "fp32_matmul": ["onednn", "env"],
            "bf16": ["emulated", "env"],
            "int8_weights": ["7bit", "env"],
            "bf16_attention": ["fused", "env"],
        }
        want_fp32 = ["blas", "env"] if rank1 else ["onednn", "rank 0"]
        assert got[1] == {
            "fp32_matmul": want_fp32,
            "bf16": ["emulated", "rank 0"],
            "int8_weights": ["7bit", "rank 0"],
            "bf16_attention": ["fused", "rank 0"],
        }


@pytest.mark.slow
@pytest.mark.parametrize("restore_rng", [True, False])
def test_ddp_resume_restores_every_ranks_rng(tmp_path, restore_rng):
    """2 gloo ranks with dropout: crash after step 4 (checkpoint at 3), resume, compare.

    Bit-for-bit across four process groups, so every rank of every group must run the same fp32
    kernels: the suite's conftest exports the run's kernel paths to the ranks (unexported, each
    rank probed on cores the other kept busy and chose oneDNN or BLAS by chance: 6 failures in 8
    loaded runs with an empty probe cache)."""
    ref_loss, ref_w = _run(tmp_path, "ref", 2)
    _run(tmp_path, "run", 2, stop=3, restore_rng=restore_rng)
    run_loss, run_w = _run(tmp_path, "run", 2, restore_rng=restore_rng)
    same = run_loss == ref_loss and all(torch.equal(ref_w[k], run_w[k]) for k in ref_w)
    assert same == restore_rng  # per-rank dropout streams must be restored exactly


def test_the_phase_of_an_update_past_the_end_is_the_last():
    # update 5 of phases of 2 and 3 updates is past the end: where a finished run stands
    assert [S.phase_of([2, 3], s) for s in range(7)] == [0, 0, 1, 1, 1, 1, 1]
    assert [S.phase_of([2, 3, 1], s) for s in (5, 6, 9)] == [2, 2, 2]
    assert S.upcoming([2, 3], [8, 4], 0, 0, 0, 3) == [(0, 8), (1, 0), (1, 4)]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("size", [0, 1, 2, 5, 8, 9])
def test_rank_shares_cover_a_batch_of_any_size_once(world, size):
    batch = list(range(100, 100 + size))
    shares = [S.rank_share(batch, D.DistInfo(rank=r, world_size=world)) for r in range(world)]
    assert [i for share in shares for i in share] == batch  # each exactly once, in order
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_shard_local_order_sees_each_example_once_and_reads_two_windows_at_most():
    shards = tuple((a, a + 10) for a in range(0, 200, 10))  # 20 shards of 10
    window, batch = 3, 16
    seen: list[int] = []
    for pos in range(0, 2 * 200, batch):
        idx, epochs = S.global_batch_indices(200, pos, batch, 7, 0, shards, window)
        touched = {int(i) // 10 for i in idx}
        assert len(touched) <= 2 * window  # the shards this update reads
        seen.extend(int(i) + 200 * e for i, e in zip(idx, epochs, strict=True))
    assert sorted(seen) == list(range(400))  # every example once per epoch, two epochs
    # small data (no more shards than the window): the global permutation, unchanged
    small = S.global_batch_indices(200, 0, 50, 7, 0, shards, 20)[0]
    assert small.tolist() == S.global_batch_indices(200, 0, 50, 7, 0)[0].tolist()
    # and a window smaller than the data does change the order (the test is not vacuous)
    assert S.global_batch_indices(200, 0, 50, 7, 0, shards, 3)[0].tolist() != small.tolist()


def test_alone_an_update_runs_on_its_own_device_and_reduces_nothing():
    """Without a ``DistInfo`` an ``UpdateStep`` takes its device from its own argument (a default
    one says "cpu", which once copied a GPU update's statistics to the host mid-update), and a
    lone process's all-reduce returns its tensor where it is (``meta`` stands in for a GPU)."""
    from bertkit.training.objectives import MlmNsp
    from bertkit.training.update import UpdateStep

    assert UpdateStep(None, MlmNsp(), [], "fp32", "meta").info.device == "meta"
    t = torch.ones(3, device="meta")
    assert D.all_reduce_tensor(t, D.DistInfo()) is t


def test_cuda_rng_states_are_restored_to_their_devices_in_numeric_order(monkeypatch):
    """Eleven GPUs' states go back to devices 0..10 in that order (a text sort put cuda_10
    before cuda_2)."""
    from bertkit.training import rng_state

    state = rng_state.capture_rng()
    for i in range(11):
        state[f"cuda_{i}"] = torch.full((2,), i, dtype=torch.uint8)
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: restored.extend(states))
    rng_state.restore_rng(state)
    assert [int(s[0]) for s in restored] == list(range(11))
