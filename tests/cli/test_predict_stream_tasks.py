"""`bertkit predict --output DIR/` over a tagging (CoNLL, one token per line) and a
multiple-choice (SWAG) file: the folder equals the one the whole-file reader's examples give, the
file is read one window at a time (a spy on the reader's lines), and a bad line stops the run
with file:line after the shards before it were written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks import _rows, conll
from bertkit.inference import TaskModel
from bertkit.inference.prediction_corpus import load_predictions, predict_to
from bertkit.inference.sharded import MANIFEST, ShardedOutput, StreamConfig
from support.cli_runs import finetune
from support.tiny_glue import FIXTURES

N = 23  # shards of 5 examples (4 full, one of 3); windows of 10 examples = 2 shards
FLAGS = ["--shard-size", "5", "--sort-window", "10", "--batch-size", "4", "--precision", "fp32"]
WORDS = ["Anna", "Berg", "visited", "New", "York", ".", "Acme", "Corp", "hired", "Bob", "Paris"]


@pytest.fixture(scope="module")
def models(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("predict_stream_tasks")
    conll_file, swag = FIXTURES / "task_conll.txt", FIXTURES / "task_swag.csv"
    finetune("ner", tiny_model, root / "ner", "--train", str(conll_file), "--dev", str(conll_file))
    finetune("swag", tiny_model, root / "swag", "--train", str(swag), "--dev", str(swag))
    return {"ner": root / "ner", "swag": root / "swag"}


def write_conll(path: Path, columns: int, bad_line: bool = False) -> list[int]:
    """N sentences of 1-4 words in three documents, no blank line at the end; returns, per
    sentence, the line that ends it (its blank or -DOCSTART- line, or the file's last line).
    ``bad_line``: the last word's tag is not a tag."""
    lines, ends = ["-DOCSTART- -X- -X- O", ""], []
    for i in range(N):
        if i in (8, 17):
            lines.append("-DOCSTART- -X- -X- O")  # ends sentence i - 1 with no blank line
            ends.append(len(lines))
        elif i:
            lines.append("")
            ends.append(len(lines))
        for j in range(1 + i % 4):
            tag = "B-PER" if (i + j) % 3 == 0 else "O"
            lines.append(" ".join([WORDS[(i + j) % len(WORDS)], "NNP", "B-NP", tag][:columns]))
    if bad_line:
        lines[-1] = lines[-1].rsplit(" ", 1)[0] + " PER"
    path.write_text("\n".join(lines), encoding="utf-8")
    return [*ends, len(lines)]


def write_swag(path: Path) -> list[int]:
    """N rows (no labels) after the header; returns each row's line."""
    rows = [
        f"v{i},{100 + i},x,{WORDS[i % 11]} hired Bob.,He,gold,visited Paris.,"
        f"hired Anna.,{WORDS[(i + 3) % 11]} Corp.,New York."
        for i in range(N)
    ]
    header = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return list(range(2, N + 2))


def _predict(model: Path, inp: Path, out: Path | str, *extra: str) -> int:
    return main(
        ["predict", "--model", str(model), "--input", str(inp), "--output", str(out), *extra]
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _input(kind: str, tmp_path: Path) -> tuple[str, Path, list[int]]:
    if kind == "swag":
        path = tmp_path / "val.csv"
        return "swag", path, write_swag(path)
    path = tmp_path / f"{kind}.txt"
    return "ner", path, write_conll(path, 4 if kind == "conll" else 1)


@pytest.mark.parametrize("kind", ["conll", "tokens", "swag"])
def test_the_folder_is_the_one_the_whole_file_reader_gives(models, tmp_path, kind) -> None:
    """Against the path before streaming: the whole file read into a list, then predicted in
    windows; and the shards hold the `.jsonl` file's examples in order."""
    family, inp, _ = _input(kind, tmp_path)
    assert _predict(models[family], inp, f"{tmp_path}/streamed/", *FLAGS) == 0
    tm = TaskModel.load(models[family], batch_size=4, precision="fp32")
    whole = tm.read(inp, "test")
    assert len(whole) == N and isinstance(whole, list)
    source = {"path": str(inp), "size": inp.stat().st_size, "split": "test"}
    predict_to(tm, whole, tmp_path / "whole", config=StreamConfig(5, 10), source=source)
    assert _files(tmp_path / "streamed") == _files(tmp_path / "whole")
    manifest = json.loads((tmp_path / "streamed" / MANIFEST).read_text())
    assert manifest["complete"] and manifest["inputs"][0]["lines"] == N
    assert manifest["settings"]["task"].startswith(f"{family}/")
    assert len(manifest["shards"]) == 5
    assert _predict(models[family], inp, tmp_path / "all.jsonl", *FLAGS[4:]) == 0
    single = [json.loads(x) for x in (tmp_path / "all.jsonl").read_text().splitlines()]
    key = "guid" if family == "swag" else "tokens"
    assert [p[key] for p in load_predictions(tmp_path / "streamed")] == [p[key] for p in single]


@pytest.mark.parametrize("kind", ["conll", "tokens", "swag"])
def test_the_file_is_read_one_window_at_a_time(models, tmp_path, monkeypatch, kind) -> None:
    """When each shard is written, the reader has read exactly up to the line that ends its
    window's last example: not one line further (the whole-file reader was at the end)."""
    family, inp, ends = _input(kind, tmp_path)
    reached: list[int] = []
    module = _rows if family == "swag" else conll
    real_lines, real_write = module.read_text_lines, ShardedOutput.write

    def lines(path, *args, **kwargs):
        for n, line in real_lines(path, *args, **kwargs):
            reached.append(n)
            yield n, line

    at_write: list[int] = []

    def write(self, k: int, data: bytes) -> str:
        at_write.append(reached[-1])
        return real_write(self, k, data)

    monkeypatch.setattr(module, "read_text_lines", lines)
    monkeypatch.setattr(ShardedOutput, "write", write)
    assert _predict(models[family], inp, f"{tmp_path}/out/", *FLAGS) == 0
    last = len(inp.read_text(encoding="utf-8").splitlines())
    assert at_write == [ends[9], ends[9], ends[19], ends[19], last]
    assert ends[9] < ends[19] < last  # the spy can tell the windows apart


def test_a_bad_line_stops_the_run_after_the_shards_before_it(models, tmp_path, capsys) -> None:
    ok, bad = tmp_path / "ok.conll", tmp_path / "bad.conll"
    write_conll(ok, 4)
    ends = write_conll(bad, 4, bad_line=True)
    assert _predict(models["ner"], ok, f"{tmp_path}/full/", *FLAGS) == 0
    capsys.readouterr()
    assert _predict(models["ner"], bad, f"{tmp_path}/out/", *FLAGS) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"{bad}:{ends[-1]}: expected a tag O, B-TYPE or I-TYPE in column 4 of 4, got 'PER'"
        " (CoNLL columns: one token per line)"
    )
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    full = json.loads((tmp_path / "full" / MANIFEST).read_text())
    assert manifest["complete"] is False and manifest["shards"] == full["shards"][:4]


@pytest.mark.parametrize("kind", ["conll", "tokens", "swag"])
def test_the_progress_bar_counts_examples_not_lines(models, tmp_path, monkeypatch, kind) -> None:
    """The bar's total is the file's examples (sentences, rows), so its rate and ETA are right;
    it was the line count (3.0 M lines for 200 k CoNLL sentences)."""
    from bertkit.inference import streaming

    family, inp, _ = _input(kind, tmp_path)
    totals: list[int | None] = []
    real = streaming.progress

    def spy(*args, **kwargs):
        totals.append(kwargs.get("total"))
        return real(*args, **kwargs)

    monkeypatch.setattr(streaming, "progress", spy)
    assert _predict(models[family], inp, f"{tmp_path}/out/", *FLAGS) == 0
    assert totals == [N]


def test_sentences_are_counted_as_the_reader_splits_them(tmp_path) -> None:
    text = "-DOCSTART- -X- O\n\n\nA x O\nB x O\n \n\r\nC x O\n-DOCSTART- -X- O\nD x O\r\n\nE x O"
    path = tmp_path / "f.conll"
    path.write_bytes(text.encode())
    assert conll.count_sentences(path) == len(list(conll.iter_conll(path))) == 4
