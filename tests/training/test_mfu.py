"""MFU: the FLOP count is the work the model runs (checked against torch's FLOP counter on the
real model), from real tokens; the peak is a datasheet figure for known GPUs."""

from __future__ import annotations

from math import prod

import pytest
import torch
from torch.ops import aten
from torch.utils.flop_counter import FlopCounterMode, flop_registry, register_flop_formula

from bertkit import hardware
from bertkit.config import BertConfig
from bertkit.model import BertForPreTraining
from bertkit.model.batching import layout
from bertkit.training import metrics
from bertkit.training.metrics import pretraining_flops

CONFIG = BertConfig(
    vocab_size=500,
    hidden_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=256,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def _batch(lengths: list[int]) -> dict[str, torch.Tensor]:
    B, T = len(lengths), max(lengths)
    g = torch.Generator().manual_seed(0)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, 500, (B, T), generator=g) * mask
    labels = torch.full((B, T), -100)
    for b, n in enumerate(lengths):
        labels[b, 1 : min(n, 4)] = ids[b, 1 : min(n, 4)]
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": torch.zeros_like(ids),
        "labels": labels,
        "next_sentence_label": torch.zeros(B, dtype=torch.long),
    }


def _count_onednn_products() -> None:
    """torch's FLOP counter has no formula for oneDNN's linear (the fp32 path bertkit takes where
    the probe finds oneDNN faster; it counted 0 FLOPs there): count it from its shapes, as the
    counter counts ``aten.mm``. The op reads strided operands: x (..., K) times w (N, K)^T."""
    op = hardware.ONEDNN_LINEAR
    if op is None or op in flop_registry:
        return

    @register_flop_formula(op)
    def _linear_flops(x_shape, w_shape, *_args, out_shape=None, **_kwargs) -> int:
        return 2 * prod(x_shape[:-1]) * x_shape[-1] * w_shape[0]


@pytest.mark.parametrize("lengths", [[32] * 6, [32, 20, 7, 32, 12, 3, 25, 30]])
def test_real_flops_are_what_the_model_runs(lengths, fp32_path):
    """On both fp32 paths: the same products whether ATen's BLAS or oneDNN runs them."""
    _count_onednn_products()
    torch.manual_seed(0)
    model = BertForPreTraining(CONFIG)
    batch = _batch(lengths)
    masked = int((batch["labels"] != -100).sum())
    with FlopCounterMode(display=False) as counter:
        model(**batch, layout=layout(batch["attention_mask"], batch["labels"])).loss.backward()
    # torch's counter has a formula for the CPU's fused attention kernel only from 2.15, and there
    # it counts the shapes the kernel runs (padding included) and the backward's recompute of the
    # scores: leave out what it counted there and add the n^2 terms as bertkit counts them
    counted = counter.get_flop_counts()["Global"]
    fused = (
        aten._scaled_dot_product_flash_attention_for_cpu,
        aten._scaled_dot_product_flash_attention_for_cpu_backward,
    )
    products = counter.get_total_flops() - sum(counted.get(op, 0) for op in fused)
    attention = 12 * CONFIG.num_hidden_layers * CONFIG.hidden_size * sum(n * n for n in lengths)
    want = pretraining_flops(CONFIG, lengths=lengths, seq_len=max(lengths), masked=masked)
    assert products + attention == want


def test_padding_is_not_counted_as_work():
    lengths = [32, 8, 8, 8]
    real = pretraining_flops(CONFIG, lengths=lengths, seq_len=32, masked=12)
    padded = pretraining_flops(CONFIG, lengths=lengths, seq_len=32, masked=12, definition="padded")
    assert padded > 2 * real  # 56 real tokens of 128 positions
    full = pretraining_flops(CONFIG, lengths=[32] * 4, seq_len=32, masked=12)
    full_padded = pretraining_flops(
        CONFIG, lengths=[32] * 4, seq_len=32, masked=12, definition="padded"
    )
    H, inter = CONFIG.hidden_size, CONFIG.intermediate_size
    # on a full batch the two differ by the last layer's tokens that nothing reads
    assert full_padded - full == 6 * (128 - 12 - 4) * (H * H + 2 * H * inter)
    with pytest.raises(ValueError, match="definition"):
        pretraining_flops(CONFIG, lengths=lengths, seq_len=32, masked=1, definition="hfu")


@pytest.mark.parametrize(
    ("name", "precision", "tf32", "tflops"),
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", False, 312.0),
        ("NVIDIA H100 80GB HBM3", "bf16", False, 989.0),
        ("NVIDIA H100 PCIe", "bf16", False, 756.0),
        ("NVIDIA H200", "bf16", False, 989.0),
        ("NVIDIA A100-SXM4-40GB", "fp32", True, 156.0),
        ("NVIDIA A100-SXM4-40GB", "fp32", False, 19.5),
    ],
)
def test_known_gpus_use_the_datasheet(monkeypatch, name, precision, tf32, tflops):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _d=None: name)
    monkeypatch.setattr(metrics, "tf32_matmuls", lambda: tf32)
    peak = metrics.peak_flops("cuda:0", precision)
    assert peak.flops == tflops * 1e12 and "datasheet" in peak.source


def test_the_cpu_peak_is_measured():
    peak = metrics.peak_flops("cpu", "fp32")
    assert peak.flops > 1e9 and peak.source.startswith("measured")


def test_the_gpu_benchmark_times_padded_real_batches_with_the_trainer_s_count(tmp_path):
    """benchmarks/gpu_pretrain.py's real batches (the CPU half of it): padded, collated with
    their Layout, and counted by the trainer's function."""
    from benchmarks.gpu_pretrain import batch_flops, real_batches

    from .helpers import prepare_tiny_corpus

    data = prepare_tiny_corpus(tmp_path, docs=20)
    batches = real_batches(str(data), 8, 2)
    assert len(batches) == 2
    for b in batches:
        mask = b["attention_mask"]
        assert b["layout"].lengths == tuple(mask.sum(1).tolist())
        assert bool((mask == 0).any())  # real data is padded: not the all-ones case
        assert batch_flops(CONFIG, b, "real") < batch_flops(CONFIG, b, "padded")


def test_a_micro_batch_is_counted_once_from_its_layout():
    """UpdateStep.prepare lays the batch out once: its tokens, and the FLOPs (what the
    pre-training run and benchmarks/gpu_pretrain.py count) read the Layout's lengths and
    labelled positions."""
    from bertkit.training.metrics import layout_flops
    from bertkit.training.objectives import MlmNsp
    from bertkit.training.update import UpdateStep

    lengths = [7, 3, 5]
    batch = _batch(lengths)  # labels at positions 1..3 of each row: 3 + 2 + 3
    laid = layout(batch["attention_mask"], batch["labels"])
    assert (laid.tokens, laid.masked) == (15, 8)
    assert layout(batch["attention_mask"]).masked == 0
    want = pretraining_flops(CONFIG, lengths=lengths, seq_len=7, masked=8)
    assert layout_flops(CONFIG, laid) == want
    seen = []

    def flops(lay):
        seen.append(lay)
        return layout_flops(CONFIG, lay)

    update = UpdateStep(None, MlmNsp(), [], "fp32", "cpu", flops_fn=flops)
    ready = update.prepare(batch)
    assert (ready.tokens, ready.flops, ready.counts) == (15.0, want, [8.0, 3.0])
    assert seen == [ready.inputs["layout"]]
    no_mask = update.prepare({k: v for k, v in batch.items() if k != "attention_mask"})
    assert "layout" not in no_mask.inputs and no_mask.tokens == 21.0  # 3 x 7, no padding known
    assert no_mask.flops == pretraining_flops(CONFIG, lengths=[7, 7, 7], seq_len=7, masked=8)
