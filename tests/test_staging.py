"""bertkit.staging, the writers of a set of files: ``staged_folder`` (renamed in, the marker
last, nothing changed on an error) and ``swap_folder`` (the old folder put back when the rename
fails); every file flushed to disk before it is renamed into place."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from bertkit import staging
from bertkit.errors import BertkitError


def contents(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def old_folder(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    for name in ("config.json", "weights", "sub/pool", "task", "keep"):
        (out / name).write_text(f"old {name}")
    return out


def write_new(work: Path) -> None:
    (work / "sub").mkdir()
    for name in ("config.json", "weights", "sub/pool"):
        (work / name).write_text(f"new {name}")


def test_staged_folder_renames_every_file_in_with_the_marker_last(tmp_path, monkeypatch) -> None:
    out = old_folder(tmp_path)
    renamed, synced = [], set()
    real_replace, real_fsync = os.replace, staging.fsync_file
    monkeypatch.setattr(staging.os, "replace", lambda a, b: (renamed.append(b), real_replace(a, b)))
    monkeypatch.setattr(staging, "fsync_file", lambda p: (synced.add(Path(p).name), real_fsync(p)))
    with staging.staged_folder(out, last="config.json", drop=["task"]) as work:
        write_new(work)
    assert contents(out) == {
        "config.json": "new config.json",
        "keep": "old keep",  # not part of the set: left as it was
        "sub/pool": "new sub/pool",
        "weights": "new weights",
    }
    assert [str(Path(p).relative_to(out)) for p in renamed] == [
        "sub/pool",
        "weights",
        "config.json",
    ]
    assert synced == {"config.json", "weights", "pool"}
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "keep", "sub", "weights"]


def test_staged_folder_changes_nothing_on_an_error(tmp_path) -> None:
    out = old_folder(tmp_path)
    before = contents(out)
    with (
        pytest.raises(ValueError, match="bad input"),
        staging.staged_folder(out, "config.json") as work,
    ):
        write_new(work)
        raise ValueError("bad input")
    assert contents(out) == before
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "keep",
        "sub",
        "task",
        "weights",
    ]


def test_a_crash_between_the_renames_leaves_no_marker(tmp_path, monkeypatch) -> None:
    """The old config.json beside new weights would load as a model that never existed."""
    out = old_folder(tmp_path)
    real = os.replace

    def replace(src, dst) -> None:
        if Path(dst).name == "weights":
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(staging.os, "replace", replace)
    with (
        pytest.raises(BertkitError, match="cannot write the files"),
        staging.staged_folder(out, last="config.json") as work,
    ):
        write_new(work)
    assert not (out / "config.json").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_swap_folder_puts_the_old_folder_back_when_the_rename_fails(tmp_path, monkeypatch) -> None:
    out = old_folder(tmp_path)
    before = contents(out)
    work = tmp_path / ".out.partial"
    work.mkdir()
    write_new(work)
    real = os.replace

    def replace(src, dst) -> None:
        if Path(src) == work:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real(src, dst)

    monkeypatch.setattr(staging.os, "replace", replace)
    with pytest.raises(OSError, match="cross-device"):
        staging.swap_folder(work, out)
    assert contents(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.partial", "out"]


def test_swap_folder_flushes_every_file_then_replaces_the_folder(tmp_path, monkeypatch) -> None:
    out = old_folder(tmp_path)
    work = tmp_path / ".out.partial"
    work.mkdir()
    write_new(work)
    synced = []
    monkeypatch.setattr(staging, "fsync_file", lambda p: synced.append(Path(p).name))
    staging.swap_folder(work, out)
    assert sorted(synced) == ["config.json", "pool", "weights"]
    assert contents(out) == {n: f"new {n}" for n in ("config.json", "sub/pool", "weights")}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_input_error_inside_an_atomic_write_names_the_input(tmp_path: Path) -> None:
    """An OSError of the block that names another file (the input it was reading) is that
    file's, not a failed write of the output; either way the output is untouched."""
    from bertkit.io import atomic_write

    out = tmp_path / "out.txt"
    out.write_text("previous")
    missing = tmp_path / "gone.txt"
    with (
        pytest.raises(BertkitError, match=rf"^{re.escape(str(missing))}: cannot read \("),
        atomic_write(out) as f,
    ):
        f.write("new")
        missing.read_text()
    with (
        pytest.raises(BertkitError, match=rf"^{re.escape(str(out))}: write failed \("),
        atomic_write(out) as f,
    ):
        raise OSError(28, "No space left on device")
    assert out.read_text() == "previous" and sorted(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("kind", ["input", "checkpoint", "plain"])
def test_an_error_naming_a_work_file_keeps_its_class(tmp_path: Path, kind: str) -> None:
    """Reworded to name the file's final place, an InputError (its path, line and message) and a
    CheckpointError stay what they were, so handlers and exit codes that tell them apart do."""
    from bertkit.errors import CheckpointError, InputError

    out = tmp_path / "model"
    with pytest.raises(BertkitError) as e, staging.staged_folder(out) as work:
        target = work / "vocab.txt"
        if kind == "input":
            raise InputError(target, 3, f"expected a token, see {target}")
        if kind == "checkpoint":
            raise CheckpointError(f"{target}: cannot be written")
        raise BertkitError(f"{target}: cannot be written")
    want = {"input": InputError, "checkpoint": CheckpointError, "plain": BertkitError}[kind]
    assert type(e.value) is want
    assert ".staging" not in str(e.value) and str(out / "vocab.txt") in str(e.value)
    if kind == "input":
        assert (e.value.path, e.value.line) == (str(out / "vocab.txt"), 3)
        assert str(e.value) == f"{out / 'vocab.txt'}:3: expected a token, see {out / 'vocab.txt'}"
