"""Suite-wide settings: torch on one thread, and no hub access.

Tiny test models are faster on one intra-op thread, and on a shared 2-core machine oversubscribed
threads made them several times slower; no result depends on the thread count. Nothing may be
downloaded at test time (transformers and sentence-transformers load local folders only).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:  # property tests: the same examples on every run, no example database in the checkout
    import tempfile

    from hypothesis import settings as _hypothesis
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "bertkit-hypothesis"))
    _hypothesis.register_profile("bertkit", derandomize=True, database=None, deadline=None)
    _hypothesis.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "bertkit"))
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    pass


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global RNG state (tests that need randomness seed their
    own generators too; this keeps an unseeded ``torch.randn`` from making a test flaky)."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _auto_precision_is_fp32(monkeypatch):
    """``--precision auto`` picks bf16 on a CPU where bf16 measures faster than fp32 (the AMD
    EPYC with AVX512-BF16: 1.95x), fp32 elsewhere. Tests that leave the precision at auto compare
    against fp32 references (transformers, a second run, a resumed run), so in-process they run
    auto as fp32 on every machine; tests of the choice itself set ``bf16_speedup`` themselves,
    and the bf16 paths have their own tests under each forced ``bf16`` choice."""
    from bertkit import hardware

    monkeypatch.setattr(hardware, "bf16_speedup", lambda: 0.0)


# --- hardware paths: every kernel/precision test runs under each forced choice ----------------


@pytest.fixture(params=["onednn", "blas"])
def fp32_path(request):
    """Runs the test with fp32 matmuls forced through oneDNN, then through ATen's BLAS."""
    from bertkit import hardware

    if request.param == "onednn" and not hardware.ONEDNN_AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear")
    with hardware.forced("fp32_matmul", request.param):
        yield request.param


@pytest.fixture(params=["native", "emulated"])
def bf16_path(request):
    """Runs the test with bf16 forced to native oneDNN kernels (where the CPU has them), then to
    autocast's own kernels (what a CPU without native bf16 runs when told to use bf16)."""
    from bertkit import hardware

    if request.param == "native":
        ok, why = hardware.bf16_native_support()
        if not ok:
            pytest.skip(f"no native bf16 path to test on this machine: {why}")
    with hardware.forced("bf16", request.param):
        yield request.param
