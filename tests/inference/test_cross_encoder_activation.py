"""The activation a cross-encoder folder names (mining's rescoring reads it): a folder whose
config file is not a JSON object is a one-line CheckpointError naming the file, not a
traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.errors import CheckpointError
from bertkit.inference.retrieval import activation_of

ST_CONFIG = "config_sentence_transformers.json"
SIGMOID, IDENTITY = "torch.nn.modules.activation.Sigmoid", "torch.nn.modules.linear.Identity"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({}, "sigmoid"),
        ({ST_CONFIG: {"activation_fn": IDENTITY}}, "identity"),
        ({"config.json": {"sentence_transformers": {"activation_fn": SIGMOID}}}, "sigmoid"),
        ({"config.json": {"sbert_ce_default_activation_function": IDENTITY}}, "identity"),
    ],
)  # fmt: skip
def test_the_activation_is_the_folders(tmp_path: Path, files: dict, expected: str) -> None:
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data), encoding="utf-8")
    assert activation_of(tmp_path) == expected


@pytest.mark.parametrize("name", [ST_CONFIG, "config.json"])
@pytest.mark.parametrize(
    ("text", "reason"), [('{"activation_fn": ', "unreadable"), ('["x"]', "expected a JSON object")]
)
def test_a_broken_config_is_one_line_naming_the_file(
    tmp_path: Path, name: str, text: str, reason: str
) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError, match=reason) as e:
        activation_of(tmp_path)
    assert str(e.value).startswith(str(tmp_path / name))
