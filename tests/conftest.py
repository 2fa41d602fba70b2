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


@pytest.fixture(autouse=True)
def _one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
