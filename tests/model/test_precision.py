"""The precision module: allowed values, auto, the bf16 fallback and its one notice."""

import logging

import pytest
import torch

from bertkit import hardware, precision
from bertkit.errors import ConfigError


@pytest.mark.probe
def test_resolve(unforced, caplog):
    precision._noticed.discard("bf16")
    assert precision.resolve("fp32") == "fp32"
    with pytest.raises(ConfigError, match="fp16 needs CUDA"):
        precision.resolve("fp16", "cpu")
    with pytest.raises(ConfigError, match="precision must be"):
        precision.resolve("int4")
    with hardware.forced("bf16", "emulated"):
        assert precision.resolve("bf16") == "bf16"
        with precision.autocast("bf16"):
            assert torch.is_autocast_enabled("cpu")
    with hardware.forced("bf16", "fp32"), caplog.at_level(logging.WARNING, "bertkit.hardware"):
        assert precision.resolve("bf16") == "fp32"
        assert precision.resolve("bf16") == "fp32"
        with precision.autocast("bf16"):
            assert not torch.is_autocast_enabled("cpu")
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1  # once per process
    assert "running fp32 instead" in notices[0] and "x the time of fp32 here" in notices[0]


@pytest.mark.probe
def test_auto_on_cpu_follows_the_measured_bf16_speed(unforced, monkeypatch):
    monkeypatch.setattr(hardware, "bf16_speedup", lambda: 0.48)  # AVX512-BF16 without AMX
    assert precision.choose("auto", "cpu") == "fp32"
    monkeypatch.setattr(hardware, "bf16_speedup", lambda: 1.8)  # AMX class
    assert precision.choose("auto", "cpu") == "bf16"
    monkeypatch.setattr(hardware, "bf16_speedup", lambda: 1.09)  # below the 1.1x bar
    assert precision.choose("auto", "cpu") == "fp32"
    assert precision.choose("bf16", "cpu") == "bf16"  # explicit values are kept as asked


def test_every_value_outside_the_choices_is_a_one_line_error():
    for bad in ("int4", "float32", "BF16", ""):
        with pytest.raises(ConfigError, match="precision must be one of auto, fp32, bf16, fp16"):
            precision.resolve(bad)
