"""The fine-tuning loop as a library: loss goes down when overfitting, seeds control everything,
batches are length-bucketed permutations."""

from __future__ import annotations

from pathlib import Path

import torch

from bertkit.data.tasks.glue import read_glue_split
from bertkit.interop import load_pretrained
from bertkit.tokenizer import BertTokenizer
from bertkit.training.finetune import FinetuneConfig, TaskData, finetune, length_bucketed_batches
from bertkit.training.tasks_runtime import ClassificationAdapter

from .conftest import write_sentiment


def _run(tiny_model: Path, tmp_path: Path, config: FinetuneConfig, out: str):
    data = write_sentiment(tmp_path / "glue", n_train=16, n_dev=16)
    tok = BertTokenizer.from_pretrained(tiny_model)
    adapter = ClassificationAdapter("glue", "SST-2", 32, labels=["0", "1"], metric="accuracy")
    train = adapter.encode(tok, read_glue_split(data, "SST-2", "train"), training=True)
    dev_ex = read_glue_split(data, "SST-2", "train")  # dev = train: we want to see it overfit
    dev = {"dev": (dev_ex, adapter.encode(tok, dev_ex, training=False))}

    def build():
        return load_pretrained(tiny_model, adapter.head_class, **adapter.config_overrides())

    return finetune(
        build, adapter, TaskData(train, dev), tok, tmp_path / out, config, log=lambda m: None
    )


def test_loss_decreases_when_overfitting(tiny_model: Path, tmp_path: Path) -> None:
    cfg = FinetuneConfig(
        learning_rates=(5e-3,), epochs=12, batch_size=4, dropout=0.0, warmup_proportion=0.1
    )
    result = _run(tiny_model, tmp_path, cfg, "o")
    losses = [e["train_loss"] for e in result.runs[0].epochs]
    assert losses[-1] < 0.5 * losses[0], losses
    assert result.selected["score"] == 1.0  # memorised the training set


def test_seed_controls_head_init_dropout_and_order(tiny_model: Path, tmp_path: Path) -> None:
    cfg = FinetuneConfig(learning_rates=(1e-3,), epochs=2, batch_size=4, seed=7)
    a = _run(tiny_model, tmp_path, cfg, "a").runs[0].epochs
    torch.manual_seed(999)  # the global RNG must not matter
    b = _run(tiny_model, tmp_path, cfg, "b").runs[0].epochs
    assert [e["train_loss"] for e in a] == [e["train_loss"] for e in b]
    other = FinetuneConfig(learning_rates=(1e-3,), epochs=2, batch_size=4, seed=8)
    c = _run(tiny_model, tmp_path, other, "c").runs[0].epochs
    assert [e["train_loss"] for e in a] != [e["train_loss"] for e in c]  # negative control


def test_length_bucketed_batches() -> None:
    lengths = [
        int(x) for x in torch.randint(1, 100, (103,), generator=torch.Generator().manual_seed(0))
    ]
    b1 = length_bucketed_batches(lengths, 8, torch.Generator().manual_seed(1), chunk_batches=4)
    assert sorted(i for b in b1 for i in b) == list(range(103))
    assert all(len(b) <= 8 for b in b1)
    for b in b1:  # within a batch, lengths come sorted (longest first)
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)
    pad_bucketed = sum(max(lengths[i] for i in b) * len(b) for b in b1)
    plain = length_bucketed_batches(lengths, 8, torch.Generator().manual_seed(1), chunk_batches=1)
    pad_plain = sum(max(lengths[i] for i in b) * len(b) for b in plain)
    assert pad_bucketed < pad_plain
    assert b1 == length_bucketed_batches(
        lengths, 8, torch.Generator().manual_seed(1), chunk_batches=4
    )
    assert b1 != length_bucketed_batches(
        lengths, 8, torch.Generator().manual_seed(2), chunk_batches=4
    )
