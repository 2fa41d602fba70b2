"""The ``bertkit`` registry's parsing (bertkit/cli/main.py): an unknown argument after a
subcommand is that subcommand's error, under its own usage, with exit status 2."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bertkit
from bertkit.cli.main import build_parser, main


def _leaves(
    parser: argparse.ArgumentParser,
    words: tuple[str, ...] = (),
    parsers: tuple[argparse.ArgumentParser, ...] = (),
) -> dict[str, tuple[argparse.ArgumentParser, ...]]:
    """Every command that runs (``embed``, ``finetune glue``, ``export onnx``), by its words:
    the parsers from its first word's down to its own."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {" ".join(words): parsers}
    out = {}
    for name, sub in subs[0].choices.items():
        out.update(_leaves(sub, (*words, name), (*parsers, sub)))
    return out


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """A placeholder value for each required argument of ``parser`` (nothing runs: parsing only)."""
    argv = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or not action.required:
            continue
        value = str(next(iter(action.choices))) if action.choices else "1"
        count = action.nargs if isinstance(action.nargs, int) else 1
        argv += [*action.option_strings[:1], *[value] * count]
    return argv


COMMANDS = _leaves(build_parser())


def test_every_command_is_checked() -> None:
    assert {"embed", "train-vocab", "finetune glue", "finetune squad", "export onnx"} <= set(
        COMMANDS
    )
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("words", sorted(COMMANDS))
def test_an_unknown_flag_is_the_subcommands_error(words: str, capsys) -> None:
    argv = []
    for word, parser in zip(words.split(), COMMANDS[words]):
        argv += [word, *_required(parser)]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--bogus", "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: bertkit {words} "), err
    assert err.splitlines()[-1] == f"bertkit {words}: error: unrecognized arguments: --bogus 1"


def test_an_unknown_flag_before_the_subcommand_stays_the_top_levels(capsys) -> None:
    """Negative control: ``bertkit --bogus embed ...`` is bertkit's own error, not embed's."""
    with pytest.raises(SystemExit) as exit_:
        main(["--bogus", "embed", "--model", "m", "--output", "o"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: bertkit [-h]")
    assert err.splitlines()[-1] == "bertkit: error: unrecognized arguments: --bogus"


@pytest.mark.parametrize("command", ["tokenize", "env"])
def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path, command) -> None:
    """``bertkit tokenize ... | head``: the closed pipe is status 141 (SIGPIPE's), no traceback."""
    vocab = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"
    lines = tmp_path / "lines.txt"
    lines.write_text("UNwant\u00e9d running hi\n" * 20_000)  # far over a pipe's 64 KiB buffer
    argv = {
        "tokenize": ["tokenize", "--vocab", str(vocab), "--input", str(lines)],
        "env": ["env", "--json"],
    }[command]
    env = {**os.environ, "PYTHONPATH": str(Path(bertkit.__file__).parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertkit", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    proc.stdout.close()  # the reader goes away before the output is written, as head can
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_an_interrupted_pretrain_names_the_checkpoint_a_rerun_resumes_from(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Ctrl-C in ``bertkit pretrain`` ends with what the run folder keeps (it used to print
    ``interrupted`` alone): its newest checkpoint, or none yet."""
    import bertkit.cli.pretrain as pretrain_cli

    out = tmp_path / "run"
    saved: list[str] = []

    def interrupted(args) -> int:
        out.mkdir(exist_ok=True)
        for name in saved:
            (out / "checkpoints" / name).mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain_cli, "run", interrupted)
    argv = ["pretrain", "--data", str(tmp_path / "data"), "--output", str(out)]
    assert main(argv) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"bertkit pretrain: interrupted: {out} keeps no checkpoint yet; the same command starts "
        "the run over"
    )
    saved[:] = ["step-000000005", "step-000000010"]
    assert main(argv) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"bertkit pretrain: interrupted: {out} keeps checkpoint step-000000010; the same command "
        "resumes from it"
    )
