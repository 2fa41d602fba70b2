"""Flags read their defaults and choices from the one home of each (registries, config fields)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from bertkit import precision as P
from bertkit.cli.main import build_parser


def _sub(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    (action,) = (a for a in parser._actions if flag in a.option_strings)
    return action


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def test_poolings_come_from_the_registry(parser):
    from bertkit.model.pooling import EMBED_POOLINGS, LAYER_COMBINES, POOLINGS, SPLADE
    from bertkit.tasks.embedding import POOLINGS as FAMILY_POOLINGS

    assert set(FAMILY_POOLINGS) == set(POOLINGS)  # the torch-free copy of bertkit.tasks
    assert _option(_sub(parser, "finetune", "embeddings"), "--pooling").choices == list(
        FAMILY_POOLINGS
    )
    assert _option(_sub(parser, "serve"), "--pooling").choices == list(POOLINGS)
    assert _option(_sub(parser, "embed"), "--pooling").choices == EMBED_POOLINGS
    assert (*POOLINGS, SPLADE) == EMBED_POOLINGS  # embed alone also writes SPLADE vectors
    assert _option(_sub(parser, "embed"), "--layer-combine").choices == list(LAYER_COMBINES)


def test_encoding_errors_and_formats_come_from_the_registries(parser):
    from bertkit.data.tasks.custom import FORMATS
    from bertkit.io import ENCODING_ERRORS

    for command in ("train-vocab", "tokenize", "prepare-pretraining", "embed"):
        assert tuple(_option(_sub(parser, command), "--encoding-errors").choices) == ENCODING_ERRORS
    for family in ("classify", "tag", "embeddings", "rerank"):
        assert _option(_sub(parser, "finetune", family), "--format").choices == list(FORMATS)


def test_precision_defaults_are_precision_default(parser):
    from bertkit.training.finetune import FinetuneConfig
    from bertkit.training.settings import TrainConfig

    assert FinetuneConfig().precision == TrainConfig().precision == P.DEFAULT
    for path in (("finetune", "glue"), ("embed",), ("predict",), ("pretrain",)):
        assert _option(_sub(parser, *path), "--precision").default == P.DEFAULT


def test_max_seq_length_help_and_squad_windows_from_their_homes(parser):
    from bertkit.cli.finetune import settings_from_args
    from bertkit.tasks.squad_features import SquadFeatureConfig
    from bertkit.tasks.windows import WindowConfig

    glue = _sub(parser, "finetune", "glue")
    assert _option(glue, "--max-seq-length").help == (
        "tokens per input (default 128; 384 for squad; embeddings and sparse: a "
        "sentence-transformers --model folder's max_seq_length)"
    )
    assert "CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE or WNLI" in _option(glue, "--task").help
    squad = _sub(parser, "finetune", "squad")
    stride_help = _option(squad, "--doc-stride").help
    assert "(default 128 at --max-seq-length 384 and up; for shorter windows a third" in stride_help
    base = ["finetune", "squad", "--train", "t.json", "--dev", "d.json", "--model", "m"]
    args = parser.parse_args([*base, "--output", "o"])
    assert settings_from_args(args).windows == SquadFeatureConfig()
    args = parser.parse_args(
        [*base, "--output", "o", "--doc-stride", "64", "--max-query-length", "32"]
    )
    assert settings_from_args(args).windows == SquadFeatureConfig(WindowConfig(doc_stride=64), 32)


@pytest.mark.parametrize(
    ("flag", "commands"),
    [
        ("--encoding-errors", ("train-vocab", "tokenize", "prepare-pretraining", "embed")),
        ("--cased", ("train-vocab", "tokenize", "prepare-pretraining")),
        ("--batch-size", ("embed", "fill-mask")),
        ("--batch-size", ("evaluate", "predict")),
    ],
)
def test_a_flag_shared_by_commands_reads_alike_in_each(parser, flag, commands):
    """One definition of each (bertkit.cli.options): the same default, help, choices and
    metavar wherever the flag appears (embed's --batch-size and --encoding-errors were its own,
    without help; tokenize's --encoding-errors and prepare-pretraining's --cased had their own
    help)."""
    actions = [_option(_sub(parser, command), flag) for command in commands]
    assert all(a.help for a in actions)
    assert len({(a.default, a.help, str(a.choices), a.metavar, a.type) for a in actions}) == 1


def test_overwrite_reads_alike_in_every_command_that_writes_a_folder(parser):
    """convert's came from a dataclass field (--overwrite/--no-overwrite), prepare-pretraining's
    was its own; finetune had none (a finished model was replaced unasked)."""
    commands = [("convert",), ("prepare-pretraining",), ("finetune", "glue"), ("finetune", "squad")]
    actions = [_option(_sub(parser, *command), "--overwrite") for command in commands]
    assert all(
        a.help and a.default is False and a.option_strings == ["--overwrite"] for a in actions
    )
    assert len({(a.help, type(a)) for a in actions}) == 1


def test_batch_size_defaults_are_the_inference_classes(parser):
    from bertkit.inference import Embedder, FillMasker, TaskModel

    for command, cls in (
        ("embed", Embedder),
        ("fill-mask", FillMasker),
        ("evaluate", TaskModel),
        ("predict", TaskModel),
    ):
        (field,) = (f for f in dataclasses.fields(cls) if f.name == "batch_size")
        assert _option(_sub(parser, command), "--batch-size").default == field.default
    assert _option(_sub(parser, "embed"), "--batch-size").default == 32  # as before
    assert _option(_sub(parser, "predict"), "--batch-size").default == 64


def test_grad_accum_is_one_option_for_pretraining_and_every_finetune_family(parser):
    from bertkit.tasks import FAMILIES
    from bertkit.training.finetune import FinetuneConfig
    from bertkit.training.settings import TrainConfig

    pretrain = _option(_sub(parser, "pretrain"), "--grad-accum")
    assert FinetuneConfig().grad_accum == TrainConfig().grad_accum == pretrain.default == 1
    for family in FAMILIES:
        option = _option(_sub(parser, "finetune", family), "--grad-accum")
        assert (option.default, option.type, option.help) == (1, int, pretrain.help), family
