"""The fine-tuning loop as a library: loss goes down when overfitting, seeds control everything,
batches are length-bucketed permutations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.data.tasks.glue import read_glue_split
from bertkit.interop import load_pretrained
from bertkit.tasks import ClassificationAdapter
from bertkit.tokenizer import BertTokenizer
from bertkit.training.epochs import length_bucketed_batches
from bertkit.training.finetune import FinetuneConfig, TaskData
from bertkit.training.selection import finetune
from support.tiny_glue import write_sentiment


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
    # chunk_batches=1: consecutive slices of one permutation, as RandomSampler + BatchSampler
    expect = torch.randperm(103, generator=torch.Generator().manual_seed(1)).split(8)
    assert plain == [t.tolist() for t in expect]
    assert b1 == length_bucketed_batches(
        lengths, 8, torch.Generator().manual_seed(1), chunk_batches=4
    )
    assert b1 != length_bucketed_batches(
        lengths, 8, torch.Generator().manual_seed(2), chunk_batches=4
    )


def test_best_epoch_is_kept_not_the_last(tiny_model: Path, tmp_path: Path) -> None:
    """Dev scores are scripted to peak at epoch 2 of 3: the saved model must predict exactly what
    the epoch-2 model predicted (and not what the epoch-3 model did)."""
    from dataclasses import dataclass, field

    import numpy as np

    from bertkit.inference import predict_rows
    from bertkit.tasks import Scored

    @dataclass
    class Scripted(ClassificationAdapter):
        _seen: list = field(default_factory=list)  # "_": not saved in bertkit_task.json

        def fit_dev(self, examples, features, rows):
            self._seen.append(np.stack(rows))
            return Scored({"accuracy": 0.0}, [0.3, 0.9, 0.6][len(self._seen) - 1], [])

    data = write_sentiment(tmp_path / "glue", n_train=16, n_dev=8)
    tok = BertTokenizer.from_pretrained(tiny_model)
    adapter = Scripted("glue", "SST-2", 32, labels=["0", "1"], metric="accuracy")
    ex = read_glue_split(data, "SST-2", "dev")
    feats = adapter.encode(tok, ex, training=False)
    train = adapter.encode(tok, read_glue_split(data, "SST-2", "train"), training=True)
    cfg = FinetuneConfig(learning_rates=(5e-3,), epochs=3, batch_size=4)

    def build():
        return load_pretrained(tiny_model, adapter.head_class, **adapter.config_overrides())

    result = finetune(
        build,
        adapter,
        TaskData(train, {"dev": (ex, feats)}),
        tok,
        tmp_path / "o",
        cfg,
        log=lambda m: None,
    )
    assert (result.selected["epoch"], result.selected["score"]) == (2, 0.9)
    saved = load_pretrained(tmp_path / "o", adapter.head_class)
    rows = np.stack(predict_rows(saved, adapter, feats))
    np.testing.assert_allclose(rows, adapter._seen[1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(rows, adapter._seen[2], atol=1e-4)  # negative control: epoch 3 differs


def _poison_at(model: torch.nn.Module, calls: set[int]) -> torch.nn.Module:
    """Make the training loss NaN on the given training forward calls (0-based), by a hook."""
    seen = [0]

    def hook(module, args, kwargs, out):
        if module.training:
            if seen[0] in calls:
                out.loss = out.loss * float("nan")
            seen[0] += 1
        return out

    model.register_forward_hook(hook, with_kwargs=True)
    return model


def _poisoned_run(tiny_model: Path, tmp_path: Path, calls: set[int], out: str, **cfg):
    data = write_sentiment(tmp_path / "glue", n_train=16, n_dev=16)
    tok = BertTokenizer.from_pretrained(tiny_model)
    adapter = ClassificationAdapter("glue", "SST-2", 32, labels=["0", "1"], metric="accuracy")
    train = adapter.encode(tok, read_glue_split(data, "SST-2", "train"), training=True)
    dev_ex = read_glue_split(data, "SST-2", "dev")
    dev = {"dev": (dev_ex, adapter.encode(tok, dev_ex, training=False))}

    def build():
        inner = load_pretrained(tiny_model, adapter.head_class, **adapter.config_overrides())
        return _poison_at(inner, calls)

    config = FinetuneConfig(learning_rates=(1e-3,), epochs=1, batch_size=4, dropout=0.0, **cfg)
    return finetune(
        build, adapter, TaskData(train, dev), tok, tmp_path / out, config, log=lambda m: None
    )


def test_a_non_finite_update_is_skipped_not_applied(tiny_model: Path, tmp_path: Path) -> None:
    """The shared update step: a NaN loss drops that update (weights stay finite, the schedule
    does not advance, the run counts it); too many in a row end the run with one clear error."""
    import math

    import pytest

    from bertkit.training.update import TrainingError

    clean = _poisoned_run(tiny_model, tmp_path, set(), "clean").runs[0]
    hit = _poisoned_run(tiny_model, tmp_path, {1}, "hit").runs[0]
    assert clean.skipped == 0 and clean.steps == 4
    assert hit.skipped == 1 and hit.steps == 3  # 4 batches, one consumed without an update
    assert math.isfinite(hit.epochs[0]["train_loss"]) and math.isfinite(hit.score)
    with pytest.raises(TrainingError, match="3 consecutive updates had a non-finite loss"):
        _poisoned_run(tiny_model, tmp_path, {0, 1, 2}, "dead", max_consecutive_skips=3)


def test_finetuning_is_a_run_of_the_one_trainer_and_prefetch_keeps_its_results(
    tiny_model: Path, tmp_path: Path, monkeypatch
) -> None:
    """Each (lr, seed) run is one ``Trainer.fit``; collating ahead (the accelerator's default,
    across epoch boundaries) trains on exactly the batches collated in series."""
    from bertkit.training import loop

    fits: list[str | None] = []
    fit = loop.Trainer.fit

    def counted(self):
        fits.append(self.name)
        return fit(self)

    monkeypatch.setattr(loop.Trainer, "fit", counted)
    cfg = FinetuneConfig(learning_rates=(1e-3, 5e-4), epochs=3, batch_size=5, seed=3)
    series = _run(tiny_model, tmp_path, cfg, "series")
    assert fits == ["lr 0.001 seed 3", "lr 0.0005 seed 3"]
    monkeypatch.setattr(loop, "default_depth", lambda device_type: 2)
    ahead = _run(tiny_model, tmp_path, cfg, "ahead")
    for a, b in zip(series.runs, ahead.runs, strict=True):
        assert [e["train_loss"] for e in a.epochs] == [e["train_loss"] for e in b.epochs]
        assert [e["seen"] for e in a.epochs] == [e["seen"] for e in b.epochs]
        assert (a.score, a.steps) == (b.score, b.steps)


def test_the_summary_spread_of_two_runs_has_their_standard_deviation() -> None:
    from bertkit.training.selection import _spread

    assert _spread([0.5, 0.7]) == pytest.approx(
        {"mean": 0.6, "std": 0.1414213562, "min": 0.5, "max": 0.7, "n": 2}
    )
    assert _spread([0.5])["std"] == 0.0  # one run: no spread (stdev needs two)


def test_a_budget_ends_the_run_early_and_still_scores_its_last_update(
    tiny_model: Path, tmp_path: Path, monkeypatch
) -> None:
    """``minutes`` on a clock where every update takes 1 s: 48 updates planned (12 epochs of 4),
    45 s for the job. The deadline measures the rate at update 30 (its third log line; before
    it, the guard saw the first decision near enough), keeps back 2 updates' worth for the last
    scoring (16 dev / (2 x 4)) and a second and a little for the save (the tiny model's bytes),
    and 11.998 fit: the run ends at 30 + int(11.998 x 0.98) = 41, where dev is scored once more;
    without a budget all 48 run."""
    import types

    import bertkit.training.loop as loop
    import bertkit.training.selection as selection
    from bertkit.training.loop import Trainer

    updates = {"n": 0}
    original = Trainer._train_step

    def counted(self, model):
        updates["n"] += 1
        return original(self, model)

    fake = types.SimpleNamespace(time=lambda: 1000.0 + updates["n"], perf_counter=lambda: 0.0)
    monkeypatch.setattr(Trainer, "_train_step", counted)
    monkeypatch.setattr(loop, "time", fake)
    monkeypatch.setattr(selection, "time", fake)
    cfg = FinetuneConfig(learning_rates=(1e-3,), epochs=12, batch_size=4, minutes=45 / 60)
    run = _run(tiny_model, tmp_path, cfg, "budget").runs[0]
    assert run.steps == 41
    assert [e["step"] for e in run.epochs] == [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 41]
    assert "dev" in run.epochs[-1]
    updates["n"] = 0
    whole = FinetuneConfig(learning_rates=(1e-3,), epochs=12, batch_size=4)
    assert _run(tiny_model, tmp_path, whole, "whole").runs[0].steps == 48
