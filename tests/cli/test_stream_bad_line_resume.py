"""A streamed folder stopped by a bad input line continues once the user does what the error
says: fix the line (the file's size changes) or pass ``--encoding-errors replace`` (a setting
the folder records). Either way the folder ends as an uninterrupted run of that input leaves it."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.inference.sharded import MANIFEST
from support.tiny_mlm import WORDS, tiny_mlm

FLAGS = ["--shard-size", "5", "--sort-window", "10", "--batch-size", "4", "--precision", "fp32"]
BAD = 23  # 1-based: shards 1-5, 6-10 (window 1) and 11-15, 16-20 (window 2) are written first
os.environ.setdefault("BERTKIT_FP32_MATMUL", "blas")  # the same kernel path in every run


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_mlm(tmp_path_factory.mktemp("bad_line"))


def _lines() -> list[bytes]:
    rng = random.Random(3)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))).encode() for _ in range(34)
    ]


def _embed(model: Path, inp: Path, out: Path, *extra: str) -> int:
    argv = ["embed", "--model", str(model), "--input", str(inp), "--output", f"{out}/", *FLAGS]
    return main([*argv, *extra])


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _stopped_at_the_bad_line(model: Path, inp: Path, out: Path, capsys) -> None:
    lines = _lines()
    lines[BAD - 1] = lines[BAD - 1][:3] + b"\xff" + lines[BAD - 1][3:]
    inp.write_bytes(b"\n".join(lines) + b"\n")
    capsys.readouterr()
    assert _embed(model, inp, out) == 1
    assert f"{inp.name}:{BAD}: invalid UTF-8" in capsys.readouterr().err
    assert len(json.loads((out / MANIFEST).read_text())["shards"]) == 4


def test_a_fixed_line_resumes_the_folder(model, tmp_path, capsys) -> None:
    inp, out = tmp_path / "in.txt", tmp_path / "vectors"
    _stopped_at_the_bad_line(model, inp, out, capsys)
    inp.write_bytes(b"\n".join(_lines()) + b"\n")  # fixed: one byte shorter
    assert _embed(model, inp, out) == 0
    assert "14 lines" in capsys.readouterr().err  # 20 were on disk
    assert _embed(model, inp, tmp_path / "full") == 0
    assert _files(out) == _files(tmp_path / "full")  # the manifest names the fixed file's size
    # the lines already written are still checked: an edit before the last shard is refused
    text = _lines()
    text[2] = text[2].replace(b" ", b"x", 1)
    (tmp_path / "edited.txt").write_bytes(b"\n".join(text) + b"\n")
    _stopped_at_the_bad_line(model, inp, tmp_path / "again", capsys)
    assert _embed(model, tmp_path / "edited.txt", tmp_path / "again") == 1
    assert "input changed since" in capsys.readouterr().err


def test_encoding_errors_replace_continues_a_strict_folder(model, tmp_path, capsys) -> None:
    inp, out = tmp_path / "in.txt", tmp_path / "vectors"
    _stopped_at_the_bad_line(model, inp, out, capsys)
    assert _embed(model, inp, out, "--encoding-errors", "replace") == 0
    assert _embed(model, inp, tmp_path / "full", "--encoding-errors", "replace") == 0
    assert _files(out) == _files(tmp_path / "full")
    settings = json.loads((out / MANIFEST).read_text())["settings"]
    assert settings["encoding_errors"] == "replace"
    # the other way round is refused: the replaced line would now stop the run
    capsys.readouterr()
    assert _embed(model, inp, out) == 1
    assert "encoding_errors 'replace', this run asks for 'strict'" in capsys.readouterr().err


def test_an_interrupted_run_says_what_the_folder_keeps(model, tmp_path, capsys, monkeypatch):
    """Ctrl-C after two shards: the last line names the lines kept and how to continue."""
    from bertkit.inference.sharded import ShardedOutput

    inp, out = tmp_path / "in.txt", tmp_path / "vectors"
    inp.write_bytes(b"\n".join(_lines()) + b"\n")
    record = ShardedOutput.record

    def interrupted(self, k, *args):
        if k == 2:
            raise KeyboardInterrupt
        return record(self, k, *args)

    monkeypatch.setattr(ShardedOutput, "record", interrupted)
    capsys.readouterr()
    assert _embed(model, inp, out) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        err
        == f"bertkit embed: interrupted: {out} keeps lines 1-10 (2 shards); the same command continues it"
    )
