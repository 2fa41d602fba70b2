"""`bertkit predict --output DIR/`: JSONL shards + manifest of a fine-tuned model's predictions,
the same predictions as a `.jsonl` file, resumable after a crash, refusals, and torchrun ranks
writing the one-process folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.errors import ConfigError, InputError
from bertkit.inference import TaskModel
from bertkit.inference.prediction_corpus import load_predictions, predict_to
from bertkit.inference.sharded import MANIFEST, StreamConfig
from support.tiny_glue import write_sentiment

N = 47  # shards of 5 examples (9 full, one of 2); windows of 15 examples = 3 shards
FLAGS = ["--shard-size", "5", "--sort-window", "15", "--batch-size", "4", "--precision", "fp32"]


@pytest.fixture(scope="module")
def setup(tiny_model: Path, tmp_path_factory) -> tuple[Path, Path]:
    """(a model fine-tuned on the synthetic SST-2 task, a labelled TSV of N examples)."""
    root = tmp_path_factory.mktemp("predict_stream")
    data = write_sentiment(root / "glue", n_train=24, n_dev=N)
    out = root / "model"
    argv = [
        "finetune",
        "glue",
        "--task",
        "SST-2",
        "--data-dir",
        str(data),
        "--model",
        str(tiny_model),
        "--output",
        str(out),
        "--max-steps",
        "40",
        "--epochs",
        "20",
        "--batch-size",
        "8",
        "--seed",
        "1",
        "--learning-rate",
        "3e-3",
        "--dropout",
        "0",
    ]
    assert main(argv) == 0
    return out, data / "SST-2" / "dev.tsv"


def _predict(model: Path, inp: Path, out: Path | str, *extra: str) -> int:
    return main(
        ["predict", "--model", str(model), "--input", str(inp), "--output", str(out), *extra]
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def full_run(setup, tmp_path) -> Path:
    model, inp = setup
    assert _predict(model, inp, f"{tmp_path}/full/", *FLAGS) == 0
    return tmp_path / "full"


def test_shards_hold_the_jsonl_files_predictions_in_input_order(setup, full_run, tmp_path) -> None:
    model, inp = setup
    manifest = json.loads((full_run / MANIFEST).read_text())
    assert manifest["kind"] == "predictions" and manifest["complete"] is True
    assert [s["lines"] for s in manifest["shards"]] == [
        [k * 5 + 1, min(k * 5 + 5, N)] for k in range(10)
    ]
    assert manifest["inputs"][0]["lines"] == N and manifest["settings"]["shard_size"] == 5
    assert manifest["settings"]["task"] == "glue/SST-2" and manifest["model"]["files"] > 0
    assert (
        _predict(model, inp, tmp_path / "all.jsonl", "--batch-size", "4", "--precision", "fp32")
        == 0
    )
    single = [json.loads(x) for x in (tmp_path / "all.jsonl").read_text().splitlines()]
    streamed = load_predictions(full_run)
    assert [p["guid"] for p in streamed] == [p["guid"] for p in single] and len(single) == N
    assert [p["label"] for p in streamed] == [p["label"] for p in single]
    for a, b in zip(streamed, single, strict=True):  # batches differ: the last bits may
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)
    assert len({p["label"] for p in single}) == 2  # a model that predicts, not a constant


def test_an_interrupted_run_resumes_to_the_same_bytes(setup, full_run, tmp_path, capsys) -> None:
    model, inp = setup
    tm = TaskModel.load(model, batch_size=4, precision="fp32")
    examples = tm.read(inp, "test")
    source = {"path": str(inp), "size": inp.stat().st_size, "split": "test"}

    def failing():
        yield from examples[:33]
        raise RuntimeError("the reader died")

    out = tmp_path / "preds"
    with pytest.raises(RuntimeError):
        predict_to(tm, failing(), out, config=StreamConfig(5, 15), source=source)
    assert len(json.loads((out / MANIFEST).read_text())["shards"]) == 6
    (out / "predictions-00006.jsonl").write_text("renamed, but never listed\n")
    capsys.readouterr()
    assert _predict(model, inp, out, *FLAGS) == 0
    assert "predicted 17 examples" in capsys.readouterr().err  # 30 were on disk
    assert _files(out) == _files(full_run)


@pytest.mark.parametrize("change", ["setting", "input_text"])
def test_a_changed_run_is_refused_with_one_line(setup, full_run, tmp_path, capsys, change) -> None:
    model, inp = setup
    out = tmp_path / "preds"
    out.mkdir()
    for name, data in _files(full_run).items():
        (out / name).write_bytes(data)
    flags = list(FLAGS)
    if change == "setting":
        flags[flags.index("--batch-size") + 1] = "8"
    else:  # the same size, one letter changed in the first example
        text = inp.read_text(encoding="utf-8").splitlines(keepends=True)
        text[1] = text[1].replace("e", "a", 1)
        inp = tmp_path / "dev.tsv"
        inp.write_text("".join(text), encoding="utf-8")
    capsys.readouterr()
    assert _predict(model, inp, out, *flags) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    want = "batch_size 4, this run asks for 8" if change == "setting" else "input changed"
    assert want in err and _files(out) == _files(full_run)


def test_a_document_context_tagger_is_refused(setup) -> None:
    import dataclasses

    from bertkit.tasks.tagging import TaggingAdapter

    model, _ = setup
    tm = TaskModel.load(model)
    fields = {f.name for f in dataclasses.fields(TaggingAdapter)}
    adapter = TaggingAdapter(
        **{k: v for k, v in vars(tm.adapter).items() if k in fields}, document_context=True
    )
    with pytest.raises(ConfigError, match="document-context"):
        predict_to(dataclasses.replace(tm, adapter=adapter), [], "/nonexistent/never-made")


@pytest.mark.slow
def test_two_torchrun_processes_write_the_one_process_folder(setup, tmp_path) -> None:
    """Against one process run the same way (a subprocess on 1 thread, this run's kernel
    decisions, which conftest exports): the logits are written in full, so a different thread
    count or kernel path would show in their last bits."""
    model, inp = setup
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "BERTKIT_PROGRESS": "0",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    args = [
        "-m",
        "bertkit",
        "predict",
        "--model",
        str(model),
        "--input",
        str(inp),
        *FLAGS,
        "--device",
        "cpu",
    ]
    launch = {
        "one": [sys.executable],
        "two": [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
        ],
    }
    runs = {
        name: subprocess.run(
            [*cmd, *args, "--output", f"{tmp_path / name}/"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        for name, cmd in launch.items()
    }
    for run in runs.values():
        assert run.returncode == 0, run.stderr[-3000:]
    for rank, share in enumerate((30, 17)):  # windows 0 and 2 to rank 0, 1 and 3 to rank 1
        assert f"rank {rank}/2: predicted {share} examples" in runs["two"].stderr
    assert _files(tmp_path / "two") == _files(tmp_path / "one")


def test_examples_are_parsed_as_windows_are_pulled(setup, full_run, tmp_path, capsys) -> None:
    """A bad label on the last line: the first examples come out before it is reached, and the
    folder run keeps every shard written before the error (a rerun after the fix resumes)."""
    model, inp = setup
    lines = inp.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "dev.tsv"
    bad.write_text("\n".join([*lines[:-1], lines[-1].rsplit("\t", 1)[0] + "\tseven"]) + "\n")
    it = TaskModel.load(model).iter_read(bad, "test")
    assert [e.guid for e in (next(it), next(it))] != []  # parsed lazily: no error yet
    with pytest.raises(InputError, match=f"{bad}:{N + 1}"):
        list(it)
    out = tmp_path / "preds"
    capsys.readouterr()
    assert _predict(model, bad, f"{out}/", *FLAGS) == 1
    assert f"{bad}:{N + 1}" in capsys.readouterr().err
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["complete"] is False and len(manifest["shards"]) == 9  # windows 0-2 done
    full = json.loads((full_run / MANIFEST).read_text())
    assert manifest["shards"] == full["shards"][:9]
    bad.write_text(inp.read_text(encoding="utf-8"), encoding="utf-8")  # fixed: another size
    assert _predict(model, bad, f"{out}/", *FLAGS) == 0
    assert "predicted 2 examples" in capsys.readouterr().err  # 45 were on disk
    resumed = _files(out)
    manifest = json.loads(resumed.pop(MANIFEST))
    assert manifest["inputs"][0]["path"] == str(bad) and manifest["complete"] is True
    assert resumed == {k: v for k, v in _files(full_run).items() if k != MANIFEST}
    for m in (manifest, full):
        m["inputs"][0].pop("path")
    assert manifest == full


@pytest.mark.parametrize("fmt", ["tsv", "csv", "jsonl"])
def test_the_progress_bar_counts_examples_not_the_header(setup, tmp_path, monkeypatch, fmt) -> None:
    """The bar's total is the N examples: a CSV or TSV file's header line is none (it was
    counted: N + 1); a JSONL file has no header."""
    import csv

    from bertkit.inference import streaming

    model, data = setup
    rows = [line.split("\t") for line in data.read_text(encoding="utf-8").splitlines()]
    inp = tmp_path / f"dev.{fmt}"
    if fmt == "tsv":
        inp = data  # GLUE's own file: "sentence<TAB>label", then N rows
    elif fmt == "csv":
        with inp.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(rows)
    else:
        records = [json.dumps(dict(zip(rows[0], r, strict=True))) for r in rows[1:]]
        inp.write_text("\n".join(records) + "\n", encoding="utf-8")
    totals: list[int | None] = []
    real = streaming.progress

    def spy(*args, **kwargs):
        totals.append(kwargs.get("total"))
        return real(*args, **kwargs)

    monkeypatch.setattr(streaming, "progress", spy)
    assert _predict(model, inp, f"{tmp_path}/out/", *FLAGS) == 0
    assert totals == [N]


def test_the_manifest_names_the_input_by_its_absolute_path(setup, tmp_path, monkeypatch) -> None:
    """``--input dev.tsv`` given relative is recorded absolute (as ``bertkit embed`` records
    it), so the manifest still finds the file from another working directory."""
    model, inp = setup
    work = tmp_path / "work"
    work.mkdir()
    (work / "dev.tsv").write_bytes(inp.read_bytes())
    monkeypatch.chdir(work)
    assert _predict(model, Path("dev.tsv"), "out/", *FLAGS) == 0
    monkeypatch.chdir(tmp_path)  # elsewhere: the recorded path still names the file
    recorded = json.loads((work / "out" / MANIFEST).read_text())["inputs"][0]["path"]
    assert recorded == str(work / "dev.tsv") and Path(recorded).is_file()
