"""Regression fine-tuning against transformers: the same weights, batch and optimizer settings give
the same loss, gradients and updated weights over a few steps (dropout off).

This pins what ``python -m benchmarks.finetune_trajectory --task regression --dropout 0`` measured
on all-MiniLM-L6-v2 (identical per-step losses for 115 updates) on a tiny random model: label
dtype/shape from the adapter's collate (whole-number float targets included), the MSE loss,
clipping, parameter groups and AdamW with bertkit's schedule.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from bertkit.inference import to_torch as _to_torch  # noqa: E402
from bertkit.interop import load_pretrained  # noqa: E402
from bertkit.tasks import ClassificationAdapter  # noqa: E402
from bertkit.tasks.features import EncodedInput  # noqa: E402
from bertkit.training.optim import OptimizerConfig, build_optimizer  # noqa: E402
from bertkit.training.schedule import ScheduleConfig, set_lr  # noqa: E402


def _batch(gen: torch.Generator) -> list[EncodedInput]:
    items = []
    for n, label in zip((9, 6, 12, 4), (3.0, 0.35, 5.0, 1.2)):  # 3.0 and 5.0: whole numbers
        ids = [2, *torch.randint(5, 90, (n - 2,), generator=gen).tolist(), 3]
        types = [0] * (n // 2) + [1] * (n - n // 2)
        items.append(EncodedInput(ids, types, [1] * n, label))
    return items


def test_regression_steps_match_transformers(tmp_path) -> None:
    cfg = transformers.BertConfig(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=40,
        num_labels=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    hf = transformers.BertForSequenceClassification(cfg)
    hf.save_pretrained(tmp_path)
    adapter = ClassificationAdapter("classify", "reg", 32, labels=[], metric="pearson_spearman")
    bk = load_pretrained(tmp_path, adapter.head_class, **adapter.config_overrides())
    hf.train()
    bk.train()

    batch = _to_torch(adapter.collate(_batch(torch.Generator().manual_seed(1)), 0, True), "cpu")
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (4,)

    lr, steps = 1e-3, 4
    decay, no_decay = [], []
    for name, p in hf.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    opt_hf = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        eps=1e-6,
    )
    sched = transformers.get_linear_schedule_with_warmup(opt_hf, 1, steps)
    opt_bk = build_optimizer(bk, OptimizerConfig(lr=lr, weight_decay=0.01, eps=1e-6))
    schedule = ScheduleConfig.from_proportion(steps, 0.25)
    assert schedule.warmup_steps == math.ceil(0.25 * steps) == 1
    for step in range(steps):
        set_lr(opt_bk, [lr] * len(opt_bk.param_groups), step, schedule)
        losses = []
        for model, opt in ((bk, opt_bk), (hf, opt_hf)):
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        sched.step()
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    assert losses[1] > 0
    torch.testing.assert_close(bk.classifier.weight, hf.classifier.weight, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(bk.classifier.bias, hf.classifier.bias, rtol=1e-4, atol=1e-6)
    with torch.no_grad():
        bk.eval()
        hf.eval()
        torch.testing.assert_close(bk(**batch).logits, hf(**batch).logits, rtol=1e-4, atol=1e-5)
