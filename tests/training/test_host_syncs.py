"""One training step reads the device back once (the step's loss, which also says whether the
gradient was finite): counted with torch.profiler on the CPU, where the same ATen calls that
would make a CUDA host wait are recorded (see sync_count.py)."""

from __future__ import annotations

import torch

from .sync_count import count_syncs, finetuning_step_syncs, pretraining_step_syncs

BUDGET = 1  # per non-logging update; it was 24 (pre-training) and 18 (fine-tuning) before


def test_pretraining_step_reads_the_device_once(tmp_path):
    counts = pretraining_step_syncs(tmp_path)
    assert sum(counts.values()) <= BUDGET, counts


def test_finetuning_step_reads_the_device_once():
    counts = finetuning_step_syncs()
    assert sum(counts.values()) <= BUDGET, counts


def test_the_counter_sees_each_kind_of_read():
    # negative control: the counter is not blind to what it budgets
    x = torch.arange(6.0)

    def reads():
        float(x.sum())
        bool((x > 2).any())
        (x > 2).nonzero()
        torch.repeat_interleave(torch.tensor([1, 2]))

    counts = count_syncs(reads)
    assert counts["aten::item"] == 1 and counts["aten::is_nonzero"] == 1
    assert counts["aten::nonzero"] == 1 and counts["aten::repeat_interleave"] == 1
