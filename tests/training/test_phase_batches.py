"""Pre-training's data order as the Trainer's default batch source (``training/phase_batches.py``):
phases follow the successful updates, a skipped update consumes its batch, prefetch keys cross
into the next phase, and the Trainer takes its data from exactly one of phases or a source."""

from __future__ import annotations

import pytest
import torch

from bertkit.errors import ConfigError
from bertkit.training import sharding as S
from bertkit.training.distributed import DistInfo
from bertkit.training.epochs import EpochBatches
from bertkit.training.loop import Phase, TrainConfig, Trainer
from bertkit.training.phase_batches import PhaseBatches
from bertkit.training.update import MicroBatch

from .helpers import collate, make_examples, make_trainer


def _prepare(batch: dict[str, torch.Tensor]) -> MicroBatch:
    return MicroBatch(batch, [float(len(batch["input_ids"]))], 0.0)


def _source(log: list[str], **cfg) -> PhaseBatches:
    phases = [
        Phase(make_examples(20), 2, "short"),
        Phase(make_examples(12, seed=5), 3, "long", batch_size=2),
    ]
    return PhaseBatches(phases, collate, TrainConfig(batch_size=4, **cfg), DistInfo(), log.append)


def test_phases_follow_the_successful_updates_and_a_skip_consumes_its_batch():
    log: list[str] = []
    src = _source(log)
    keys = []
    for step in [0, 1, 1, 2, 3, 4]:  # the update after step 1 is skipped once (tried twice)
        keys.append(src.next_key(step))
        src.advance()
    assert keys == [(0, 0), (0, 4), (0, 8), (1, 0), (1, 2), (1, 4)]
    assert log == ["step 2: starting long"]  # once, however often the key is asked for


def test_upcoming_keys_cross_into_the_next_phase_as_sharding_says():
    src = _source([])
    assert src.next_key(1) == (0, 0)
    assert src.upcoming(1, 3) == [(1, 0), (1, 2), (1, 4)]
    assert src.upcoming(1, 3) == S.upcoming([2, 3], [4, 2], 1, 0, 0, 3)


def test_make_is_the_pure_function_of_the_key():
    src = _source([], grad_accum=2)
    micro = src.make((1, 2), _prepare)
    assert len(micro) == 2 and [len(m.inputs["input_ids"]) for m in micro] == [1, 1]
    again = _source([], grad_accum=2).make((1, 2), _prepare)
    for a, b in zip(micro, again):
        assert torch.equal(a.inputs["input_ids"], b.inputs["input_ids"])


def test_a_phase_without_any_collate_is_refused():
    with pytest.raises(ConfigError, match="phase 'p' has no collate function"):
        PhaseBatches([Phase(make_examples(4), 1, "p")], None, TrainConfig(), DistInfo(), print)


def test_the_trainer_takes_phases_or_a_source_and_checkpoints_only_phases(tmp_path):
    t = make_trainer(tmp_path / "r", steps=2)
    args = (t.core, t.optimizer, t.schedule)
    examples = make_examples(8)
    epochs = EpochBatches(
        examples,
        [len(x["input_ids"]) for x in examples],
        lambda items, length, _draws: collate(items, [0] * len(items)),
        batch_size=4,
        epochs=1,
        bucket_batches=1,
        generator=torch.Generator().manual_seed(0),
        info=DistInfo(),
    )
    with pytest.raises(ConfigError, match="from phases or from a batches source"):
        Trainer(*args, None, None, t.cfg, None)
    with pytest.raises(ConfigError, match="from phases or from a batches source"):
        Trainer(*args, t.phases, collate, t.cfg, None, batches=epochs)
    with pytest.raises(ConfigError, match="checkpoints keep their cursor"):
        Trainer(*args, None, None, t.cfg, tmp_path / "r2", batches=epochs)
    other = Trainer(*args, None, None, t.cfg, None, batches=epochs)
    assert other.phases is None and t.phases is not None
    with pytest.raises(ConfigError, match="not from phases"):
        other.phases = t.phases
