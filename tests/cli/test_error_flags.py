"""A config check's error names the flag the user typed, not the dataclass field behind it
(end to end: ``tests/cli/test_prepare.py::test_bad_options`` and the finetune, quickstart and
distillation refusals)."""

from __future__ import annotations

import pytest

from bertkit.cli.error_flags import command_flags, in_flags
from bertkit.cli.main import build_parser


def test_flags_of_a_command_and_its_subcommands() -> None:
    parser = build_parser()
    finetune = command_flags(parser, "finetune")
    assert finetune["matryoshka_dims"] == "--matryoshka-dims"  # finetune embeddings
    assert finetune["in_batch_negatives"] == "--in-batch-negatives"  # finetune rerank
    assert "masked_lm_prob" not in finetune  # prepare-pretraining's, not finetune's
    assert command_flags(parser, "no-such-command") == {}


FLAGS = {"masked_lm_prob": "--masked-lm-prob", "vocab_size": "--vocab-size"}


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("masked_lm_prob must be in (0, 1)", "--masked-lm-prob must be in (0, 1)"),
        ("a; vocab_size must be > 0; b", "a; --vocab-size must be > 0; b"),
        # a key of a file the message is about, a word further in, an unknown name: as written
        ("config.json: vocab_size 9 is not 12", "config.json: vocab_size 9 is not 12"),
        ("the vocab_size of the model", "the vocab_size of the model"),
        ("model_max_length must be set", "model_max_length must be set"),
        ("vocab_size.txt is missing", "vocab_size.txt is missing"),
    ],
)
def test_only_a_clause_opening_field_is_renamed(message: str, said: str) -> None:
    assert in_flags(message, FLAGS) == said
