"""Training tests run torch on one thread: on a shared 2-core machine, oversubscribed intra-op
threads make these tiny models several times slower (the results do not depend on it)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
