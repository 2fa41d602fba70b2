"""`bertkit embed --output DIR/`: streamed shards + manifest, resume after SIGKILL, refusals,
and the memory bound (lines held at once never exceed the sort window)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.inference import Embedder
from bertkit.inference.corpus import bound_shapes, embed_to, load_vectors
from bertkit.inference.sharded import MANIFEST, StreamConfig
from support.tiny_mlm import WORDS
from support.tiny_mlm import tiny_mlm as _model

N = 47  # 9 shards of 5 lines and one of 2; windows of 15 lines = 3 shards
FLAGS = ["--shard-size", "5", "--sort-window", "15", "--batch-size", "4", "--precision", "fp32"]
ENV = {**os.environ, "BERTKIT_FP32_MATMUL": "blas", "BERTKIT_PROGRESS": "0"}
os.environ.setdefault("BERTKIT_FP32_MATMUL", "blas")  # the same kernel path in every process


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path]:
    """(model folder, input file of N lines of 0-40 words: some longer than 32 tokens, windowed)."""
    root = tmp_path_factory.mktemp("stream")
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))) for _ in range(N)]
    (root / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return _model(root), root / "in.txt"


def _embed(model: Path, inp: Path, out: Path | str, *extra: str) -> int:
    return main(["embed", "--model", str(model), "--input", str(inp), "--output", str(out), *extra])


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def full_run(setup, tmp_path) -> Path:
    """An uninterrupted run with FLAGS: the reference every resumed folder must equal (made per
    test, under the test's own thread count and kernel choices, which change the last bits)."""
    model, inp = setup
    assert _embed(model, inp, f"{tmp_path}/full/", *FLAGS) == 0
    return tmp_path / "full"


def test_shards_and_manifest_in_input_order(setup, full_run) -> None:
    model, inp = setup
    m = json.loads((full_run / MANIFEST).read_text())
    assert (
        m["format"] == "bertkit-sharded-output" and m["complete"] is True and m["kind"] == "vectors"
    )
    assert [s["path"] for s in m["shards"]] == [f"vectors-{k:05d}.npy" for k in range(10)]
    assert [s["lines"] for s in m["shards"]] == [[5 * k + 1, min(5 * k + 5, N)] for k in range(10)]
    text = inp.read_text(encoding="utf-8").splitlines()
    for s in m["shards"]:
        data = (full_run / s["path"]).read_bytes()
        assert s["sha256"] == hashlib.sha256(data).hexdigest()
        first, last = s["lines"]
        want = hashlib.sha256(
            "".join(t + "\n" for t in text[first - 1 : last]).encode()
        ).hexdigest()
        assert s["input_sha256"] == want
    (source,) = m["inputs"]
    assert source == {
        "path": str(inp),
        "size": inp.stat().st_size,
        "lines": N,
        "text_sha256": hashlib.sha256(inp.read_bytes()).hexdigest(),
    }
    settings = m["settings"]
    assert (settings["shard_size"], settings["sort_window"], settings["pooling"]) == (5, 15, "mean")
    assert settings["batch_size"] == 4 and settings["max_length"] == 32 and m["dim"] == 32
    assert m["model"]["path"] == str(model) and len(m["model"]["sha256"]) == 64
    assert set(_files(full_run)) == {MANIFEST, *(s["path"] for s in m["shards"])}


def test_shards_read_back_equal_the_single_file(setup, full_run, tmp_path) -> None:
    """One window over the whole input batches exactly as the single-file path: equal bytes.
    Windows of 15 lines batch differently; each window then equals embedding it alone."""
    model, inp = setup
    bound_shapes()  # as the folder path does for its process (full_run did it already)
    assert _embed(model, inp, tmp_path / "v.npy", "--batch-size", "4") == 0
    single = np.load(tmp_path / "v.npy")
    assert (
        _embed(
            model,
            inp,
            tmp_path / "one",
            "--shard-size",
            "5",
            "--sort-window",
            "50",
            "--batch-size",
            "4",
        )
        == 0
    )
    np.testing.assert_array_equal(load_vectors(tmp_path / "one"), single)
    windowed = load_vectors(full_run)
    assert windowed.shape == single.shape
    np.testing.assert_allclose(windowed, single, atol=1e-5)
    embedder = Embedder.load(model, batch_size=4)
    lines = inp.read_text(encoding="utf-8").splitlines()
    for first, vectors in embedder.iter_batches(lines, window=15):
        np.testing.assert_array_equal(windowed[first : first + len(vectors)], vectors)


_KILL_AFTER_4 = """
import os, signal, sys
import torch
from bertkit.inference import sharded
from bertkit.cli.main import main
write = sharded.ShardedOutput.write
def crashing_write(self, k, data):
    if k == 4:  # a half-written 5th shard, then SIGKILL: what a crash mid-write leaves
        (self.folder / ".vectors-00004.npy.x1y2.tmp").write_bytes(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return write(self, k, data)
sharded.ShardedOutput.write = crashing_write
torch.set_num_threads(1)  # as the resumed run in the test process: same bits
sys.exit(main(sys.argv[1:]))
"""


def test_resume_after_sigkill_equals_an_uninterrupted_run(
    setup, full_run, tmp_path, capsys
) -> None:
    model, inp = setup
    out = tmp_path / "vectors"
    args = ["embed", "--model", str(model), "--input", str(inp), "--output", f"{out}/", *FLAGS]
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_AFTER_4, *args], env=ENV, capture_output=True
    )
    assert proc.returncode == -9, proc.stderr.decode()
    crashed = json.loads((out / MANIFEST).read_text())
    # negative control: the crash really lost work, so the equality below is not vacuous
    assert crashed["complete"] is False and len(crashed["shards"]) == 4
    assert (out / ".vectors-00004.npy.x1y2.tmp").exists() and _files(out) != _files(full_run)
    assert main(args) == 0
    # window 0 (shards 0-2) is only read; window 1 (shards 3-5) is recomputed, shard 3 kept
    assert "embedded 32 lines" in (err := capsys.readouterr().err) and "6 written now" in err
    assert "15 lines already done" in err and "note:" not in err
    assert _files(out) == _files(full_run)


def test_interrupted_api_run_resumes_and_discards_strays(setup, full_run, tmp_path) -> None:
    model, inp = setup
    lines = inp.read_text(encoding="utf-8").splitlines()
    embedder = Embedder.load(model, batch_size=4)
    source = {"path": str(inp), "size": inp.stat().st_size}
    kw = {
        "config": StreamConfig(5, 15),
        "source": source,
        "settings": {"encoding_errors": "strict"},
    }

    def failing():
        yield from lines[:33]
        raise RuntimeError("the partition's reader died")

    out = tmp_path / "vectors"
    with pytest.raises(RuntimeError):
        embed_to(embedder, failing(), out, **kw)
    assert len(json.loads((out / MANIFEST).read_text())["shards"]) == 6
    (out / "vectors-00006.npy").write_bytes(b"renamed, but the manifest never listed it")
    (out / ".manifest.json.abc.tmp").write_bytes(b"{")
    summary = embed_to(embedder, iter(lines), out, **kw)
    assert (summary.written, summary.embedded, summary.mismatched) == (4, 17, 0)
    assert _files(out) == _files(full_run)
    again = embed_to(embedder, iter(lines), out, **kw)  # complete: reads, checks, computes nothing
    assert (again.written, again.embedded) == (0, 0) and _files(out) == _files(full_run)


_KILL_AT = """
import os, signal, sys
import torch
from bertkit.inference import sharded
from bertkit.cli.main import main
K, WHEN = int(os.environ["KILL_SHARD"]), os.environ["KILL_WHEN"]
write, record = sharded.ShardedOutput.write, sharded.ShardedOutput.record
def kill():
    os.kill(os.getpid(), signal.SIGKILL)
def crashing_write(self, k, data):
    if k == K and WHEN == "mid-write":  # a half-written temporary file
        (self.folder / f".{self.shard_name(k)}.x1y2.tmp").write_bytes(data[: len(data) // 3])
        kill()
    return write(self, k, data)
def crashing_record(self, k, *args):
    if k == K and WHEN == "renamed":  # the file is in place, the manifest does not list it yet
        kill()
    return record(self, k, *args)
sharded.ShardedOutput.write, sharded.ShardedOutput.record = crashing_write, crashing_record
torch.set_num_threads(1)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ten_sigkills_at_random_shards_resume_to_the_same_bytes(setup, full_run, tmp_path) -> None:
    """10 trials: SIGKILL while a random shard is written (a partial temporary file) or just after
    its rename (a file the manifest does not list), rerun: the uninterrupted folder every time."""
    model, inp = setup
    rng = random.Random(39)
    for trial in range(10):
        out = tmp_path / f"trial{trial}"
        args = ["embed", "--model", str(model), "--input", str(inp), "--output", f"{out}/", *FLAGS]
        k, when = rng.randrange(10), rng.choice(["mid-write", "renamed"])
        env = {**ENV, "KILL_SHARD": str(k), "KILL_WHEN": when}
        proc = subprocess.run([sys.executable, "-c", _KILL_AT, *args], env=env, capture_output=True)
        assert proc.returncode == -9, (trial, k, when, proc.stderr.decode()[-2000:])
        crashed = json.loads((out / MANIFEST).read_text()) if (out / MANIFEST).exists() else {}
        assert len(crashed.get("shards", [])) == k and _files(out) != _files(full_run)
        assert main(args) == 0, (trial, k, when)
        assert _files(out) == _files(full_run), (trial, k, when)


@pytest.mark.parametrize("change", ["setting", "model", "input_size", "input_text"])
def test_a_changed_run_is_refused_with_one_line(setup, full_run, tmp_path, capsys, change) -> None:
    model, inp = setup
    out = tmp_path / "vectors"
    for name, data in _files(full_run).items():
        (out.mkdir(exist_ok=True), (out / name).write_bytes(data))
    flags = list(FLAGS)
    if change == "setting":
        flags += ["--pooling", "cls"]
    elif change == "model":
        model = _model(tmp_path, seed=1)
    else:
        text = inp.read_text(encoding="utf-8")
        # same size, one word changed on line 3; or one line more
        text = text.replace(" ", "x", 1) if change == "input_text" else text + "the cat\n"
        inp = tmp_path / "in.txt"
        inp.write_text(text, encoding="utf-8")
    capsys.readouterr()
    assert _embed(model, inp, out, *flags) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert {
        "setting": "pooling 'mean', this run asks for 'cls'",
        "model": "a different model",
        "input_size": "bytes",
        "input_text": "input changed",
    }[change] in err
    assert _files(out) == _files(full_run)  # nothing was written


@pytest.mark.parametrize("started", ["in.txt", "in.txt.gz"])
def test_a_gz_copy_of_the_input_resumes_a_folder_that_keeps_naming_its_own(
    setup, tmp_path, capsys, started
) -> None:
    """The input is its text (a file and a .gz of it have one text_sha256): a folder started
    from in.txt and interrupted resumes from in.txt.gz, and the other way round, into the folder
    an uninterrupted run from the first file writes (its manifest names that file). A later
    refusal names that file as what the folder was started with, and the file given now."""
    model, inp = setup
    text = inp.read_bytes()
    (tmp_path / "in.txt").write_bytes(text)
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress(text, mtime=0))
    first = tmp_path / started
    then = tmp_path / ("in.txt.gz" if started == "in.txt" else "in.txt")
    assert _embed(model, first, tmp_path / "reference", *FLAGS) == 0
    lines = inp.read_text(encoding="utf-8").splitlines()

    def failing():
        yield from lines[:33]
        raise RuntimeError("interrupted")

    out = tmp_path / "vectors"
    with pytest.raises(RuntimeError):
        embed_to(
            Embedder.load(model, batch_size=4),
            failing(),
            out,
            config=StreamConfig(5, 15),
            source={"path": str(first), "size": first.stat().st_size},
            settings={"encoding_errors": "strict"},
        )
    assert len(json.loads((out / MANIFEST).read_text())["shards"]) == 6  # 30 lines kept
    capsys.readouterr()
    assert _embed(model, then, out, *FLAGS) == 0
    assert "30 lines already done" in capsys.readouterr().err
    assert _files(out) == _files(tmp_path / "reference")
    assert json.loads((out / MANIFEST).read_text())["inputs"][0]["path"] == str(first)
    # a changed input stored as the first was: its size differs, and the refusal says from what
    grown = text + b"the big red dog ran on a small mat .\n" * 3
    changed = tmp_path / f"more{first.name[2:]}"
    changed.write_bytes(gzip.compress(grown, mtime=0) if started.endswith(".gz") else grown)
    assert changed.stat().st_size != first.stat().st_size
    assert _embed(model, changed, out, *FLAGS) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"started with an input of {first.stat().st_size} bytes ({first}), {changed} now" in err
    assert _files(out) == _files(tmp_path / "reference")  # nothing was written


def test_auto_precision_resumes_with_the_folders_precision(setup, tmp_path, capsys) -> None:
    """auto rests on a timed probe that can flip between runs; resuming takes the folder's."""
    model, inp = setup
    flags = [f for f in FLAGS if f not in ("--precision", "fp32")]
    assert _embed(model, inp, tmp_path / "v", *flags, "--precision", "bf16") == 0
    started = json.loads((tmp_path / "v" / MANIFEST).read_text())["settings"]["precision"]
    assert _embed(model, inp, tmp_path / "v", *flags) == 0  # auto (fp32 in tests) -> as started
    assert "0 written now" in capsys.readouterr().err
    assert json.loads((tmp_path / "v" / MANIFEST).read_text())["settings"]["precision"] == started


def test_lines_held_at_once_never_exceed_the_window(setup, tmp_path) -> None:
    """Instrumented source: at every pull, lines pulled minus lines in complete shards <= 15."""
    model, inp = setup
    lines = inp.read_text(encoding="utf-8").splitlines()
    out, held = tmp_path / "vectors", []

    def source():
        for n, line in enumerate(lines, start=1):
            manifest = out / MANIFEST
            shards = json.loads(manifest.read_text())["shards"] if manifest.exists() else []
            held.append(n - sum(s["lines"][1] - s["lines"][0] + 1 for s in shards))
            yield line

    embed_to(Embedder.load(model, batch_size=4), source(), out, config=StreamConfig(5, 15))
    assert max(held) == 15  # tight: a reader that took everything first would reach 47


def test_sort_window_is_a_whole_number_of_shards() -> None:
    assert StreamConfig(10, 25).window == 20 and StreamConfig(10, 5).window == 10


def test_stdin_streams_into_the_same_shards(setup, full_run, tmp_path, monkeypatch) -> None:
    model, inp = setup
    monkeypatch.setattr(sys, "stdin", open(inp, encoding="utf-8"))  # noqa: SIM115
    out = tmp_path / "stdin"
    assert main(["embed", "--model", str(model), "--output", f"{out}/", *FLAGS]) == 0
    sys.stdin.close()
    got, want = (
        json.loads((out / MANIFEST).read_text()),
        json.loads((full_run / MANIFEST).read_text()),
    )
    assert got["inputs"][0]["path"] == "-" and got["inputs"][0]["size"] is None
    assert got["inputs"][0]["text_sha256"] == want["inputs"][0]["text_sha256"]
    assert got["shards"] == want["shards"]


def test_a_fifo_streams_into_the_same_shards(setup, full_run, tmp_path, capsys) -> None:
    """A named pipe is read once, as stdin is: its size is unknown (a FIFO's st_size of 0 was
    recorded, and the same text given later as a file was refused as "an input of 0 bytes")."""
    from support.fifo import fed_fifo

    model, inp = setup
    out = tmp_path / "fifo"
    with fed_fifo(tmp_path / "in.fifo", inp.read_bytes()) as fifo:
        assert _embed(model, fifo, f"{out}/", *FLAGS) == 0
    got, want = (
        json.loads((out / MANIFEST).read_text()),
        json.loads((full_run / MANIFEST).read_text()),
    )
    assert got["inputs"][0] == {**want["inputs"][0], "path": str(fifo), "size": None}
    assert got["shards"] == want["shards"]
    capsys.readouterr()
    assert _embed(model, inp, out, *FLAGS) == 0  # the same text from the file: all done
    assert "0 written now" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["stdin", "fifo"])
def test_torchrun_refuses_an_input_read_once(setup, tmp_path, monkeypatch, capsys, source):
    """Under torchrun every rank reads the whole input: from a pipe each would get a part of
    it, silently; refused before any process group starts, naming the input."""
    from support.fifo import fed_fifo

    model, inp = setup
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun's; refused before RANK or a store is read
    out = tmp_path / "out"
    if source == "stdin":
        monkeypatch.setattr(sys, "stdin", open(inp, encoding="utf-8"))  # noqa: SIM115
        code = main(["embed", "--model", str(model), "--output", f"{out}/", *FLAGS])
        sys.stdin.close()
    else:
        with fed_fifo(tmp_path / "in.fifo", b"") as fifo:
            code = _embed(model, fifo, f"{out}/", *FLAGS)
    err = capsys.readouterr().err
    assert code != 0 and not out.exists()
    assert "<stdin>" in err if source == "stdin" else "in.fifo" in err
    assert "every rank reads the whole input" in err and "regular file with --input" in err


def test_a_missing_input_is_named_before_the_model_loads(setup, tmp_path, monkeypatch, capsys):
    def load(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")

    model, _ = setup
    monkeypatch.setattr(Embedder, "load", load)
    for out in (tmp_path / "v.npy", f"{tmp_path}/folder/"):
        assert _embed(model, tmp_path / "missing.txt", out) != 0
        err = capsys.readouterr().err
        assert "missing.txt" in err and "file not found" in err and "AssertionError" not in err


@pytest.mark.slow
def test_two_torchrun_processes_write_the_one_process_folder(setup, full_run, tmp_path) -> None:
    """Windows go round-robin to 2 gloo ranks, rank 0 lists the shards: the same bytes as one
    process, for a fresh folder and for one resumed after a crash (strays removed by rank 0)."""
    model, inp = setup
    lines = inp.read_text(encoding="utf-8").splitlines()
    resumed = tmp_path / "resumed"

    def failing():
        yield from lines[:33]
        raise RuntimeError("crash")

    source = {"path": str(inp), "size": inp.stat().st_size}
    with pytest.raises(RuntimeError):
        embed_to(
            Embedder.load(model, batch_size=4, precision="fp32"),
            failing(),
            resumed,
            config=StreamConfig(5, 15),
            source=source,
            settings={"encoding_errors": "strict"},
        )
    (resumed / ".vectors-00006.npy.abc.tmp").write_bytes(b"half")
    env = {**ENV, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    # windows of 15 lines: rank 0 embeds windows 0 and 2, rank 1 windows 1 and 3 (2 lines);
    # resumed, windows 0-1 are on disk already
    for out, shares in ((tmp_path / "fresh", (30, 17)), (resumed, (15, 2))):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                "2",
                "-m",
                "bertkit",
                "embed",
                "--model",
                str(model),
                "--input",
                str(inp),
                "--output",
                f"{out}/",
                *FLAGS,
                "--device",
                "cpu",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        for rank, share in enumerate(shares):  # both did work: not one rank doing it all
            assert f"rank {rank}/2: embedded {share} lines" in run.stderr, run.stderr[-3000:]
        assert _files(out) == _files(full_run)


def test_the_manifest_names_the_input_and_model_by_absolute_paths(
    setup, tmp_path, monkeypatch
) -> None:
    """Given relative paths, the manifest still names the files (``bertkit search`` reads the
    model and the hit texts from there, run from any folder)."""
    model, inp = setup
    monkeypatch.chdir(inp.parent)
    rel_model = os.path.relpath(model, inp.parent)
    assert _embed(Path(rel_model), Path(inp.name), tmp_path / "out/", *FLAGS) == 0
    m = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert m["inputs"][0]["path"] == str(inp) and m["model"]["path"] == str(model)
