"""``TrainConfig`` refuses a value outside its range with a one-line error naming the field, and
accepts the boundary itself."""

from __future__ import annotations

import pytest

from bertkit.errors import ConfigError
from bertkit.training.settings import TrainConfig

BOUNDS = [
    ("batch_size", 1, 0),
    ("grad_accum", 1, 0),
    ("log_every", 1, 0),
    ("save_every", 1, 0),
    ("keep_last", 1, 0),
    ("eval_examples", 1, 0),
    ("max_consecutive_skips", 1, 0),
    ("shard_window", 1, 0),
    ("eval_every", 0, -1),
    ("prefetch", 0, -1),
    ("reserve_updates", 0, -1),
]


@pytest.mark.parametrize(("name", "lowest", "below"), BOUNDS)
def test_the_lowest_value_is_accepted_and_the_one_below_refused(name, lowest, below):
    assert getattr(TrainConfig(**{name: lowest}), name) == lowest
    with pytest.raises(ConfigError) as refused:
        TrainConfig(**{name: below})
    assert str(refused.value).startswith(f"{name} must be >= {lowest}, got {below}")


def test_the_collective_timeout_must_be_positive():
    assert TrainConfig(collective_timeout=0.001).collective_timeout == 0.001
    with pytest.raises(ConfigError, match=r"^collective_timeout must be > 0, got 0"):
        TrainConfig(collective_timeout=0)


def test_an_unknown_precision_is_refused():
    with pytest.raises(ConfigError, match="fp8"):
        TrainConfig(precision="fp8")


def test_a_fine_tuning_budget_must_be_positive():
    from bertkit.training.finetune import FinetuneConfig

    assert FinetuneConfig(minutes=0.01).minutes == 0.01
    with pytest.raises(ConfigError, match=r"^minutes must be positive, got 0"):
        FinetuneConfig(minutes=0)
