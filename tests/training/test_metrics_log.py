"""metrics.jsonl is appended by design: a line cut by a crash is skipped by its reader and dropped
when a run starts or resumes; curves.png is replaced atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.errors import BertkitError
from bertkit.training.metrics import MetricsLog, plot_curves

pytest.importorskip("matplotlib")


def test_a_line_cut_by_a_crash_is_skipped_and_dropped_on_resume(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for step in (1, 2, 3):
        log.append({"type": "train", "step": step, "loss": 1.0 / step})
    with open(log.path, "a", encoding="utf-8") as f:
        f.write('{"type": "train", "step": 4, "lo')  # the kill came mid-line
    assert [r["step"] for r in log.read()] == [1, 2, 3]
    log.truncate_after(2)  # resuming from the checkpoint of step 2
    assert log.path.read_text() == "".join(
        json.dumps({"type": "train", "step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2)
    )
    log.append({"type": "train", "step": 3, "loss": 0.5})
    assert [r["step"] for r in log.read()] == [1, 2, 3]


def test_a_failed_plot_keeps_the_previous_curves_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch
) -> None:
    from matplotlib.figure import Figure

    records = [{"type": "train", "step": s, "loss": 1.0 / s} for s in (1, 2, 3)]
    path = tmp_path / "curves.png"
    assert plot_curves(records, path)
    before = path.read_bytes()

    def full_disk(self, fname, *args, **kwargs) -> None:
        if hasattr(fname, "write"):
            fname.write(b"\x89PNG partial")
        else:
            Path(fname).write_bytes(b"\x89PNG partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    with pytest.raises(BertkitError, match=r"curves\.png: write failed"):
        plot_curves(records, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]
