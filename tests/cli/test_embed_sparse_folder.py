"""`bertkit embed --output DIR/` with SPLADE: CSR shards + manifest equal to the .jsonl output,
searchable once loaded, resumable after an interruption (only the missing shards embedded), and
a resume with other SPLADE settings refused."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.evaluation.retrieval import exact_sparse_search
from bertkit.inference import SparseEmbedder
from bertkit.inference.corpus import bound_shapes
from bertkit.inference.sharded import MANIFEST, StreamConfig
from bertkit.inference.sparse import as_rows
from bertkit.inference.sparse_corpus import embed_sparse_to, load_sparse_vectors
from support.tiny_splade import WORDS, saved_sparse_encoder

N = 23  # shards of 5 lines (the last of 3); windows of 10 lines = 2 shards
FLAGS = ["--shard-size", "5", "--sort-window", "10", "--batch-size", "4", "--precision", "fp32"]
os.environ.setdefault("BERTKIT_FP32_MATMUL", "blas")  # the same kernel path in every process


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path]:
    """(SparseEncoder folder, max pooling, max_active_dims 6; input of N lines of 0-20 words:
    some longer than max_seq_length 12, read in windows)."""
    root = tmp_path_factory.mktemp("sparse_stream")
    folder, _ = saved_sparse_encoder(root, pooling_strategy="max", max_active_dims=6)
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 20))) for _ in range(N)]
    (root / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, root / "in.txt"


def _embed(model: Path, inp: Path, out: Path | str, *extra: str) -> int:
    return main(["embed", "--model", str(model), "--input", str(inp), "--output", str(out), *extra])


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _jsonl_dense(path: Path, size: int) -> np.ndarray:
    out = np.zeros((N, size), np.float32)
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        row = json.loads(line)
        out[n, row["indices"]] = row["values"]
    return out


def _dense(rows) -> np.ndarray:
    out = np.zeros((len(rows), rows.size), np.float32)
    for r in range(len(rows)):
        a, b = rows.indptr[r], rows.indptr[r + 1]
        out[r, rows.indices[a:b]] = rows.values[a:b]
    return out


@pytest.fixture
def full_run(setup, tmp_path) -> Path:
    model, inp = setup
    assert _embed(model, inp, f"{tmp_path}/full/", *FLAGS) == 0
    return tmp_path / "full"


def test_folder_equals_the_jsonl_file_and_is_searchable(setup, full_run, tmp_path) -> None:
    model, inp = setup
    bound_shapes()  # as the folder path does for its process (full_run did it already)
    assert _embed(model, inp, tmp_path / "v.jsonl", "--batch-size", "4", "--precision", "fp32") == 0
    m = json.loads((full_run / MANIFEST).read_text())
    assert m["kind"] == "sparse" and m["complete"] is True
    assert [s["path"] for s in m["shards"]] == [f"sparse-{k:05d}.npz" for k in range(5)]
    settings = m["settings"]
    assert (settings["pooling"], settings["pooling_strategy"]) == ("splade", "max")
    assert (settings["activation_function"], settings["max_active_dims"]) == ("relu", 6)
    size = settings["vocab_size"]
    assert size == SparseEmbedder.load(model).vocab_size
    single = _jsonl_dense(tmp_path / "v.jsonl", size)
    # one window over the whole input batches exactly as the .jsonl path: the same floats
    assert _embed(model, inp, tmp_path / "one", *FLAGS[:2], "--sort-window", "50", *FLAGS[4:]) == 0
    one = load_sparse_vectors(tmp_path / "one")
    assert len(one) == N and one.size == size and one.indices.dtype == np.int64
    np.testing.assert_array_equal(_dense(one), single)
    # windows of 10 lines batch differently: equal within 1e-6 (kernel blocking)
    windowed = load_sparse_vectors(full_run)
    assert np.diff(windowed.indptr).max() == 6  # max_active_dims kept per row
    np.testing.assert_allclose(_dense(windowed), single, atol=1e-6, rtol=0)
    # what a user does with it: search the loaded folder, as the vectors in memory are searched
    lines = inp.read_text(encoding="utf-8").splitlines()
    ref = as_rows(SparseEmbedder.load(model, batch_size=4, precision="fp32")(lines), size)
    for got, want in zip(exact_sparse_search(ref, one, 5), exact_sparse_search(ref, ref, 5)):
        np.testing.assert_array_equal(got, want)


def test_an_interrupted_run_resumes_embedding_only_the_missing_shards(
    setup, full_run, tmp_path, capsys
) -> None:
    model, inp = setup
    lines = inp.read_text(encoding="utf-8").splitlines()

    def failing():
        yield from lines[:13]
        raise RuntimeError("the reader died")

    out = tmp_path / "sparse"
    sparse = SparseEmbedder.load(model, batch_size=4, precision="fp32")
    with pytest.raises(RuntimeError):
        embed_sparse_to(
            sparse,
            failing(),
            out,
            config=StreamConfig(5, 10),
            source={"path": str(inp), "size": inp.stat().st_size},
            settings={"encoding_errors": "strict"},  # what the CLI adds: the CLI resumes it
        )
    crashed = json.loads((out / MANIFEST).read_text())
    # negative control: the interruption really lost work, so the equality below is not vacuous
    assert crashed["complete"] is False and len(crashed["shards"]) == 2
    assert _files(out) != _files(full_run)
    capsys.readouterr()
    assert _embed(model, inp, out, *FLAGS) == 0
    err = capsys.readouterr().err
    assert "embedded 13 lines" in err and "3 written now" in err, err
    assert "10 lines already done" in err and "note:" not in err
    assert _files(out) == _files(full_run)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-active-dims", "3"], "max_active_dims 6, this run asks for 3"),
        (["--splade-pooling", "sum"], "pooling_strategy 'max', this run asks for 'sum'"),
        (["--splade-activation", "log1p_relu"], "activation_function 'relu', this run asks"),
        (["--pooling", "mean"], "'sparse' output, this run writes 'vectors'"),
        (["--task", "query"], "task None, this run asks for 'query'"),
    ],
)
def test_a_resume_with_other_settings_is_refused(
    setup, full_run, tmp_path, capsys, flags, message
) -> None:
    model, inp = setup
    out = tmp_path / "sparse"
    out.mkdir()
    for name, data in _files(full_run).items():
        (out / name).write_bytes(data)
    capsys.readouterr()
    assert _embed(model, inp, out, *FLAGS, *flags) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert _files(out) == _files(full_run)  # nothing was written


def test_window_pooling_which_splade_does_not_use_does_not_block_a_resume(
    setup, full_run, tmp_path, capsys
) -> None:
    model, inp = setup
    out = tmp_path / "sparse"
    out.mkdir()
    for name, data in _files(full_run).items():
        (out / name).write_bytes(data)
    assert _embed(model, inp, out, *FLAGS, "--window-pooling", "max") == 0
    assert _files(out) == _files(full_run)
