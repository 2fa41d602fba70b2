"""The GPU check's CPU dry run: every stage of ``benchmarks/gpu_check`` end to end, tiny sizes,
through ``scripts/gpu_check.sh``, the code a GPU session runs, so that a typo or a missing
import anywhere in its paths fails here rather than in a scarce GPU session. Timings are not
tested; what each stage writes is (its JSON's keys, the summary and its table), and the driver's
cap is (a stage past it is stopped and recorded as timed out)."""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGE_KEYS = {
    "data": {"articles", "vocab_size", "data32", "data64"},
    "correctness": {"command", "files", "counts", "tests", "pytest_exit_code"},
    "pretrain_speed": {"peak", "rows", "host_syncs", "real_missing"},
    "task_speed": {"peak", "finetune", "embed"},
    "pretrain_run": {"settings", "calibration", "run"},
    "glue": {"corpus", "data", "pretrain", "finetune"},
}
SPEED_ROW = {
    "model",
    "seq",
    "batch",
    "case",
    "impl",
    "step_ms",
    "sequences_per_s",
    "tokens_per_s",
    "mfu_real_datasheet",
    "mfu_padded_datasheet",
    "mfu_real_measured",
    "mfu_padded_measured",
    "speedup_vs_hf_sdpa",
    "peak_gib",
    "step_gib",
}


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny GLUE root (the SST-2 and MRPC fixtures) and a corpus folder: 12 articles of the
    built-in corpus as a WikiExtractor file, beside a SOURCE.txt that must not be read."""
    glue = tmp_path / "glue"
    for task in ("SST-2", "MRPC"):
        shutil.copytree(ROOT / "tests" / "fixtures" / "task_glue" / task, glue / task)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines, docs = [], 0
    with lzma.open(ROOT / "src" / "bertkit" / "resources" / "wikipedia-sample.txt.xz", "rt") as f:
        for line in f:
            lines.append(line)
            docs += line.startswith("</doc>")
            if docs == 12:
                break
    (corpus / "wiki_00").write_text("".join(lines), encoding="utf-8")
    (corpus / "SOURCE.txt").write_text("not a corpus: <doc broken\n", encoding="utf-8")
    return glue, corpus


def _dry_runs(tmp_path: Path) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Stages 0-4, and stage 5 (which prepares its own data), as two dry runs side by side: on
    two cores each gets one (one torch thread each), so the test takes the longer one's time,
    not the sum. Returns each run's process and OUT."""
    glue, corpus = _inputs(tmp_path)
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}  # this interpreter
    argv = {"main": [], "stage5": ["--stage5", "--corpus", str(corpus), "--glue", str(glue)]}
    procs = {}
    for name, extra in argv.items():
        cmd = [
            "bash",
            "scripts/gpu_check.sh",
            "--dry-run",
            "--out",
            str(tmp_path / name / "out"),
            "--work",
            str(tmp_path / name / "work"),
            *extra,
        ]
        procs[name] = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    done = {}
    for name, proc in procs.items():
        stdout, _ = proc.communicate(timeout=600)
        done[name] = (
            subprocess.CompletedProcess(proc.args, proc.returncode, stdout),
            tmp_path / name / "out",
        )
    return done


def test_every_stage_writes_its_json_and_the_summary_has_its_table(tmp_path):
    summaries = {}
    for run, (proc, out) in _dry_runs(tmp_path).items():
        log = (out / "gpu_check.log").read_text() if (out / "gpu_check.log").exists() else ""
        assert proc.returncode == 0, proc.stdout[-4000:] + log[-4000:]
        summary = json.loads((out / "gpu_check.json").read_text())
        assert summary["dry_run"] is True and summary["env"]["torch"]
        for name, entry in summary["stages"].items():
            want = "skipped" if name == "correctness" else "passed"  # no CUDA: gpu tests skip
            assert entry["status"] == want, (name, entry["reason"], log[-3000:])
            written = json.loads((out / f"stage{entry['number']}_{name}.json").read_text())
            assert written == entry["result"] and written["stage"] == name
            assert STAGE_KEYS[name] <= written.keys(), (name, sorted(written))
        assert len(list(out.iterdir())) <= 8  # the device tool brings back 8 files at most
        table = summary["table_markdown"]
        assert table in proc.stdout  # printed at the end, for the session to paste
        assert "| stage | status | s / cap | figures |" in table and "DRY RUN" in table
        for name, entry in summary["stages"].items():
            assert f"| {entry['number']} {name} |" in table
        summaries[run] = summary
    assert list(summaries["main"]["stages"]) == list(STAGE_KEYS)[:5]
    assert list(summaries["stage5"]["stages"]) == ["glue"]
    results = {name: e["result"] for s in summaries.values() for name, e in s["stages"].items()}
    tests = [t["id"] for t in results["correctness"]["tests"]]
    assert any("test_cuda_path" in t and "nccl" in t for t in tests)
    assert sum("test_packed_equals_padded_on_cuda" in t for t in tests) == 10
    assert any("foreach_lamb" in t and "cuda" in t for t in tests)
    assert results["correctness"]["counts"]["skipped"] == len(tests)
    rows = results["pretrain_speed"]["rows"]
    assert {(r["seq"], r["case"], r["impl"]) for r in rows} == {
        (n, c, i) for n in (32, 64) for c in ("real", "full") for i in ("bertkit", "hf-sdpa")
    }
    assert all(r.keys() >= SPEED_ROW for r in rows)
    syncs = results["pretrain_speed"]["host_syncs"]
    assert syncs["applicable"] is False and "no CUDA" in syncs["reason"] and syncs["updates"] == 2
    embed = results["task_speed"]["embed"]
    assert embed["cosine_min"] > 0.99 and len(embed["rows"]) == 2
    assert {r["case"] for r in results["task_speed"]["finetune"]} == {"padded", "full"}
    for run in (results["pretrain_run"]["run"], results["glue"]["pretrain"]):
        assert run["exit_code"] == 0 and run["evals"] and run["first_heldout_loss"] > 0
        assert run["trainer_mfu"] is not None and run["notes"]
    assert results["glue"]["corpus"] == [str(tmp_path / "corpus" / "wiki_00")]
    finetuned = results["glue"]["finetune"]
    assert set(finetuned) == {"SST-2", "MRPC"}
    assert all(r["exit_code"] == 0 and r["dev_score"] is not None for r in finetuned.values())

    assert "| dry | 64 x 2 | full | hf-sdpa |" in summaries["main"]["table_markdown"]
    assert "| SST-2 | accuracy |" in summaries["stage5"]["table_markdown"]


def test_stage_selection():
    from benchmarks.gpu_check.__main__ import selected

    def chosen(*argv: str) -> list[int]:
        ns = argparse.Namespace(stages="", stage5=False)
        for flag in argv:
            if flag == "--stage5":
                ns.stage5 = True
            else:
                ns.stages = flag
        return [s.number for s in selected(ns)]

    assert chosen() == [0, 1, 2, 3, 4]
    assert chosen("--stage5") == [5]
    assert chosen("--stage5", "0,pretrain_speed") == [0, 2, 5]
    with pytest.raises(SystemExit, match="--stage5"):
        chosen("5")
    with pytest.raises(SystemExit, match="unknown"):
        chosen("7")


def test_a_stage_past_its_cap_is_stopped_and_recorded(tmp_path):
    from benchmarks.gpu_check.__main__ import run_stage
    from benchmarks.gpu_check.common import STAGES

    t0 = time.perf_counter()
    entry = run_stage(STAGES[1], 0.5, tmp_path, tmp_path / "work", ["--dry-run"])
    assert entry["status"] == "timed out" and "cap" in entry["reason"]
    assert time.perf_counter() - t0 < 15  # stopped with its process group, not waited for
    assert "stage 1 correctness" in (tmp_path / "gpu_check.log").read_text()
