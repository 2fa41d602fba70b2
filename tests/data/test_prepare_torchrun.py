"""``prepare-pretraining`` under torchrun: files dealt to ranks by size, one folder equal to a
one-process run's byte for byte, and a failing rank's input error stops every rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.prepare import deal

FIX = Path(__file__).resolve().parents[1] / "fixtures"
INPUTS = [FIX / n for n in ("pt_wiki.txt", "pt_bert.txt", "pt_docs.jsonl", "pt_paragraphs.txt")]
ARGS = [
    "--vocab",
    str(FIX / "pt_vocab.txt"),
    "--max-seq-length",
    "32",
    "--dupe-factor",
    "3",
    "--seed",
    "7",
    "--shard-size",
    "25",
    "--num-workers",
    "1",
    "--text-field",
    "body",
]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _torchrun(
    inputs: list[Path], out: Path, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "BERTKIT_PROGRESS": "0",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "bertkit",
        "prepare-pretraining",
        "--input",
        *map(str, inputs),
        "--output",
        str(out),
        *ARGS,
        *extra,
    ]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def test_files_are_dealt_largest_first_to_the_lightest_rank() -> None:
    assert deal([5, 100, 40, 60, 1], 2) == [[0, 1], [2, 3, 4]]  # 105 and 101 bytes
    assert deal([10, 10, 10], 2) == [[0, 2], [1]]
    assert deal([3], 4) == [[0], [], [], []]  # more ranks than files: idle ranks
    shares = deal(list(range(1, 50)), 3)
    assert sorted(i for s in shares for i in s) == list(range(49))


@pytest.mark.slow
@pytest.mark.parametrize("pieces", [[], ["--piece-mib", "0.0005"]], ids=["whole", "pieces"])
def test_two_ranks_write_the_one_process_folder(tmp_path: Path, pieces: list[str]) -> None:
    args = ["prepare-pretraining", "--input", *map(str, INPUTS), "--output", str(tmp_path / "one")]
    assert main([*args, *ARGS, *pieces]) == 0
    run = _torchrun(INPUTS, tmp_path / "two", tuple(pieces))
    assert run.returncode == 0, run.stderr[-3000:]
    if not pieces:
        theirs = deal([p.stat().st_size for p in INPUTS], 2)[1]
        assert f"rank 1/2: {len(theirs)} file(s)" in run.stdout, run.stdout + run.stderr[-2000:]
    else:  # 524-byte pieces: every file is cut, and both ranks work on each file
        assert "rank 1/2: 4 file(s)" in run.stdout, run.stdout + run.stderr[-2000:]
        assert '"pieces": 5' in (tmp_path / "one" / "manifest.json").read_text()
    assert _files(tmp_path / "two") == _files(tmp_path / "one")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


@pytest.mark.slow
def test_a_bad_file_on_one_rank_stops_both_and_leaves_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "Fine text."}\n{"body": oops}\n')
    run = _torchrun([*INPUTS, bad], tmp_path / "out")
    assert run.returncode != 0
    assert f"{bad}:2: expected a JSON object" in run.stderr, run.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no output, no staging
