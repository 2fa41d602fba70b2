"""`bertkit embed` with SPLADE: a SparseEncoder folder writes sparse JSON lines by default, equal
to SparseEncoder.encode; --pooling splade on a plain masked-LM folder; the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from support.tiny_splade import hf_masked_lm, saved_sparse_encoder, sparse_encoder

LINES = ["the cat sat on the mat", "dog", "", "a big red house by the river"]


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _check(rows: list[dict], want: np.ndarray) -> None:
    assert [r["line"] for r in rows] == list(range(1, len(want) + 1))
    for row, ref in zip(rows, want, strict=True):
        assert set(row) == {"line", "indices", "values"}
        assert row["indices"] == np.flatnonzero(ref).tolist()
        np.testing.assert_allclose(row["values"], ref[row["indices"]], atol=1e-5, rtol=0)


def test_sparse_encoder_folder_writes_sparse_jsonl(tmp_path: Path, capsys) -> None:
    folder, st = saved_sparse_encoder(tmp_path, pooling_strategy="max", max_active_dims=6)
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "v.jsonl"
    args = ["embed", "--model", str(folder), "--input", str(tmp_path / "in.txt")]
    assert main([*args, "--output", str(out), "--precision", "fp32", "--device", "cpu"]) == 0
    want = st.encode(LINES, convert_to_tensor=True).to_dense().numpy()  # type: ignore[attr-defined]
    _check(_rows(out), want)
    assert max(len(r["indices"]) for r in _rows(out)) == 6
    assert "SPLADE max pooling" in capsys.readouterr().err
    # the flags beat the folder: no cap, sum pooling
    hf = tmp_path / "hf"
    flags = ["--splade-pooling", "sum", "--max-active-dims", "100", "--precision", "fp32"]
    assert main([*args, "--output", str(out), *flags]) == 0
    want = sparse_encoder(hf, pooling_strategy="sum").encode(LINES, convert_to_tensor=True)  # type: ignore[attr-defined]
    _check(_rows(out), want.to_dense().numpy())


def test_pooling_splade_on_a_masked_lm_folder(tmp_path: Path) -> None:
    hf = hf_masked_lm(tmp_path / "hf")
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["embed", "--model", str(hf), "--input", str(tmp_path / "in.txt"), "--precision", "fp32"]
    out = tmp_path / "v.jsonl"
    assert main([*args, "--pooling", "splade", "--output", str(out)]) == 0
    _check(_rows(out), sparse_encoder(hf).encode(LINES, convert_to_tensor=True).to_dense().numpy())  # type: ignore[attr-defined]
    # without --pooling a plain folder stays dense (mean pooling, 32 values a line)
    assert main([*args, "--output", str(out)]) == 0
    assert len(_rows(out)[0]["embedding"]) == 32


@pytest.mark.parametrize(
    ("extra", "output", "message"),
    [
        (["--pooling", "splade"], "v.npy", "not with .npy"),
        (["--pooling", "splade", "--normalize"], "v.jsonl", "not with --normalize"),
        (["--pooling", "splade", "--layers", "-1", "-2"], "v.jsonl", "not with --layers"),
        (["--max-active-dims", "3"], "v.jsonl", "--max-active-dims: SPLADE settings"),
        (["--pooling", "mean", "--splade-pooling", "sum"], "v.jsonl", "--splade-pooling"),
        (["--pooling", "splade", "--max-active-dims", "0"], "v.jsonl", "positive integer"),
    ],
)
def test_refusals_name_what_was_expected(tmp_path: Path, capsys, extra, output, message) -> None:
    hf = hf_masked_lm(tmp_path / "hf")
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    argv = ["embed", "--model", str(hf), "--input", str(tmp_path / "in.txt")]
    assert main([*argv, *extra, "--output", str(tmp_path / output)]) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / output).exists()


@pytest.mark.parametrize("task", [None, "query", "document"])
def test_router_folder_embeds_by_task(tmp_path: Path, task: str | None) -> None:
    from support.tiny_splade import saved_router_encoder

    folder, st = saved_router_encoder(tmp_path)
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "v.jsonl"
    args = ["embed", "--model", str(folder), "--input", str(tmp_path / "in.txt")]
    flags = ["--output", str(out), "--precision", "fp32", "--truncate"]
    assert main([*args, *flags, *(["--task", task] if task else [])]) == 0
    encode = {None: st.encode, "query": st.encode_query, "document": st.encode_document}[task]  # type: ignore[attr-defined]
    theirs = encode(LINES, convert_to_tensor=True).to_dense().numpy()
    _check(_rows(out), theirs)
    # a folder output takes the same route and prompt
    from bertkit.inference.sparse_corpus import load_sparse_vectors

    folder_out = tmp_path / "vectors"
    flags[1] = f"{folder_out}/"
    assert main([*args, *flags, *(["--task", task] if task else [])]) == 0
    rows = load_sparse_vectors(folder_out)
    manifest = json.loads((folder_out / "manifest.json").read_text())
    assert manifest["model"]["path"] == str(folder.absolute())  # the Router: search's query route
    got = np.zeros((len(rows), rows.size), np.float32)
    for r in range(len(rows)):
        a, b = rows.indptr[r], rows.indptr[r + 1]
        got[r, rows.indices[a:b]] = rows.values[a:b]
    np.testing.assert_allclose(got, theirs, atol=1e-5)
