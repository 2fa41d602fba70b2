"""--device forms x world size -> the device of every rank (hardware.resolve_device, CUDA facts
mocked: the function is pure given them)."""

from __future__ import annotations

import pytest
import torch

from bertkit.errors import ConfigError
from bertkit.hardware import resolve_device

# (requested, world size, cuda available, GPUs) -> device of each rank (LOCAL_RANK = rank)
TABLE = [
    ("auto", 1, False, 0, ["cpu"]),
    ("auto", 2, False, 0, ["cpu", "cpu"]),
    ("auto", 1, True, 8, ["cuda:0"]),
    ("auto", 4, True, 8, ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]),
    (None, 2, True, 2, ["cuda:0", "cuda:1"]),
    ("cpu", 1, True, 8, ["cpu"]),
    ("cpu", 2, True, 8, ["cpu", "cpu"]),
    ("cuda", 1, True, 8, ["cuda:0"]),
    ("cuda", 4, True, 4, ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]),
    ("cuda:0", 1, True, 8, ["cuda:0"]),
    ("cuda:3", 1, True, 8, ["cuda:3"]),
    ("cuda:0", 2, True, 2, ["cuda:0", "cuda:1"]),  # torchrun: cuda:LOCAL_RANK (warned)
    ("cuda:5", 2, True, 8, ["cuda:0", "cuda:1"]),
    ("CUDA", 2, True, 2, ["cuda:0", "cuda:1"]),
]


@pytest.mark.parametrize(("requested", "world", "available", "count", "want"), TABLE)
def test_device_per_rank(requested, world, available, count, want):
    got = [
        str(
            resolve_device(
                requested,
                rank,
                world,
                cuda_available=available,
                device_count=count,
                warn=lambda _m: None,
            )
        )
        for rank in range(world)
    ]
    assert got == want


def test_a_different_index_under_torchrun_is_warned_once_per_rank():
    seen: list[str] = []
    for rank in range(2):
        resolve_device("cuda:0", rank, 2, cuda_available=True, device_count=2, warn=seen.append)
    assert len(seen) == 1 and "LOCAL_RANK=1" in seen[0] and "cuda:1" in seen[0]
    resolve_device("cuda", 1, 2, cuda_available=True, device_count=2, warn=seen.append)
    assert len(seen) == 1  # a bare cuda is what torchrun wants: nothing to warn about


@pytest.mark.parametrize(
    ("requested", "world", "available", "count", "message"),
    [
        ("cuda", 1, False, 0, "no CUDA device"),
        ("cuda:1", 1, True, 1, "there are 1 CUDA"),
        ("cuda", 4, True, 2, "cuda:2 requested, but there are 2"),  # more ranks than GPUs
        ("auto", 4, True, 2, "cuda:2 requested"),
        ("tpu", 1, False, 0, "not a device"),
        ("mps", 1, False, 0, "bertkit runs on cpu or cuda"),
    ],
)
def test_impossible_devices_are_one_line_errors(requested, world, available, count, message):
    with pytest.raises(ConfigError, match=message):
        for rank in range(world):
            resolve_device(requested, rank, world, cuda_available=available, device_count=count)


def test_the_real_machine():
    want = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert str(resolve_device("auto")) == want
