"""bertkit's errors are also the built-in exceptions transformers raises, so callers catch them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.errors import CheckpointError, ConfigError, InputError, MissingFileError
from bertkit.tokenizer import BertTokenizer


def test_a_missing_vocabulary_is_input_error_and_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        BertTokenizer(tmp_path / "nope.txt")
    assert isinstance(info.value, InputError) and isinstance(info.value, MissingFileError)
    assert str(info.value).startswith(str(tmp_path / "nope.txt"))
    with pytest.raises(ValueError):  # every InputError is a ValueError
        raise InputError("f.tsv", 3, "expected 2 columns")


def test_config_and_checkpoint_errors_are_value_and_os_errors(tmp_path: Path) -> None:
    from bertkit.interop import load_pretrained

    assert issubclass(ConfigError, ValueError) and issubclass(CheckpointError, OSError)
    with pytest.raises(OSError, match="no such folder"):
        load_pretrained(tmp_path / "missing")


def test_an_input_error_with_no_place_is_its_message_alone() -> None:
    """`finetune glue --task MRPCX` said '<input>: unknown GLUE task ...': a place holder for a
    file, where the fault is a flag's value. With a line but no file the holder stays."""
    assert str(InputError(None, None, "unknown GLUE task 'MRPCX'")) == "unknown GLUE task 'MRPCX'"
    assert str(InputError(None, 2, "bad")) == "<input>:2: bad"
    assert str(InputError("a.tsv", None, "bad")) == "a.tsv: bad"
