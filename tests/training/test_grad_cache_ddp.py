"""GradCache under DDP (2 gloo processes): the update step turns DDP's per-backward reduction off
for a model whose backward runs several passes and averages the gradients itself, once; the
optimizer sees DDP's one-pass gradients."""

from __future__ import annotations

import torch
import torch.multiprocessing as mp

from .helpers import free_port, grad_cache_worker


def _update(tmp_path, name: str, size: int | None, ddp_reduces: bool = False) -> list[dict]:
    out = tmp_path / name
    out.mkdir()
    args = (2, free_port(), str(out), size, ddp_reduces)
    mp.spawn(grad_cache_worker, args=args, nprocs=2, join=True)
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def test_cached_update_under_ddp_sees_the_one_pass_gradients(tmp_path):
    one_pass = _update(tmp_path, "one-pass", None)
    cached = _update(tmp_path, "cached", 3)  # 8 rows per micro-batch: chunks of 3, 3, 2
    for got, want in zip(cached, one_pass, strict=True):
        assert abs(got["loss"] - want["loss"]) < 1e-6
        assert got["grads"].keys() == want["grads"].keys() and len(want["grads"]) > 0
        for name, g in want["grads"].items():
            scale = max(float(g.abs().max()), 1.0)
            torch.testing.assert_close(got["grads"][name], g, rtol=0, atol=2e-6 * scale)
    # averaged, not each rank's own: the ranks' rows differ, their gradients agree exactly
    for name, g in cached[0]["grads"].items():
        assert torch.equal(cached[1]["grads"][name], g), name
    # negative control: left to DDP's hooks (reduced while the replay is still adding chunks'
    # gradients), the cached update runs without an error and gets other gradients
    hooked = _update(tmp_path, "ddp-hooks", 3, ddp_reduces=True)
    gaps = [(hooked[0]["grads"][n] - g).abs().max() for n, g in one_pass[0]["grads"].items()]
    assert max(gaps) > 1e-3
