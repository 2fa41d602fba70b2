"""`bertkit evaluate` of a SPLADE model on a BEIR folder: a SparseEncoder folder is searched by its
sparse vectors (the metrics and sparsity figures of bertkit.inference.retrieval, whose parity
with sentence-transformers test_sparse_retrieval_parity checks), --pooling splade makes any
masked-LM folder sparse, and the refusals are one line naming what was expected."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bertkit.cli.main import main
from bertkit.data.tasks.retrieval import RetrievalSet, write_beir
from bertkit.inference.retrieval import evaluate_retrieval
from bertkit.inference.sparse import SparseEmbedder
from bertkit.tasks.windows import WindowConfig
from support.cli_runs import evaluate
from support.tiny_splade import hf_masked_lm, saved_router_encoder, saved_sparse_encoder

DATA = RetrievalSet(
    {
        "d1": "the cat sat on the mat",
        "d2": "a big dog ran on the road",
        "d3": "the small red house by the river",
        "d4": "a blue tree",
    },
    {"q1": "cat mat", "q2": "big dog", "q3": "red house", "q4": "tree"},
    {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}, "q4": {"d4": 1}},
)
FP32 = ["--precision", "fp32", "--device", "cpu"]


def library(folder: Path, **splade) -> dict:
    model = SparseEmbedder.load(
        folder, precision="fp32", device="cpu", windows=WindowConfig(truncate=True), **splade
    )
    return evaluate_retrieval(model, DATA)


def test_sparse_encoder_folder_is_searched_sparse(tmp_path: Path, capsys) -> None:
    folder, _ = saved_sparse_encoder(tmp_path, max_active_dims=5)
    write_beir(tmp_path / "beir", DATA)
    got = evaluate(folder, tmp_path / "beir", tmp_path, *FP32)
    want = library(folder)
    assert got["retrieval"] == pytest.approx(want["retrieval"], abs=1e-12)
    assert got["sparsity"] == pytest.approx(want["sparsity"], abs=1e-12)
    assert got["sparsity"]["corpus_active_dims"] <= 5  # the folder's max_active_dims
    assert "SPLADE vectors:" in capsys.readouterr().err
    # --max-active-dims beats the folder's cap
    got = evaluate(folder, tmp_path / "beir", tmp_path, *FP32, "--max-active-dims", "2")
    assert got["sparsity"]["query_active_dims"] <= 2
    assert got["retrieval"] == pytest.approx(library(folder, max_active_dims=2)["retrieval"])


def test_router_folder_searches_static_queries_and_splade_documents(tmp_path: Path) -> None:
    folder, _ = saved_router_encoder(tmp_path)
    write_beir(tmp_path / "beir", DATA)
    got = evaluate(folder, tmp_path / "beir", tmp_path, *FP32)
    want = library(folder)
    assert got["retrieval"] == pytest.approx(want["retrieval"], abs=1e-12)
    assert got["sparsity"] == pytest.approx(want["sparsity"], abs=1e-12)
    # queries by the static weights: at most their two distinct tokens active
    assert got["sparsity"]["query_active_dims"] <= 2 < got["sparsity"]["corpus_active_dims"]


def test_pooling_splade_makes_a_masked_lm_folder_sparse(tmp_path: Path) -> None:
    hf = hf_masked_lm(tmp_path / "hf")
    write_beir(tmp_path / "beir", DATA)
    got = evaluate(hf, tmp_path / "beir", tmp_path, *FP32, "--pooling", "splade")
    assert got["retrieval"] == pytest.approx(library(hf)["retrieval"], abs=1e-12)
    assert "sparsity" in got
    dense = evaluate(hf, tmp_path / "beir", tmp_path, *FP32)  # no --pooling: dense, mean
    assert "sparsity" not in dense


def _no_mlm_head(tmp_path: Path) -> Path:
    """The encoder of the tiny masked-LM folder saved without its head (a BertModel)."""
    from transformers import BertForMaskedLM

    hf = hf_masked_lm(tmp_path / "hf")
    out = tmp_path / "encoder"
    BertForMaskedLM.from_pretrained(hf).bert.save_pretrained(out)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (hf / name).is_file():
            shutil.copy(hf / name, out / name)
    return out


@pytest.mark.parametrize(
    ("extra", "data", "message"),
    [
        (["--pooling", "splade"], "beir", "masked-LM"),
        (["--pooling", "mean", "--max-active-dims", "3"], "beir", "SPLADE settings"),
        (["--pooling", "splade"], "pairs.csv", "evaluated on a BEIR folder"),
    ],
    ids=["no-mlm-head", "splade-flag-dense", "sparse-pairs"],
)
def test_refusals_are_one_line(tmp_path: Path, capsys, extra, data, message) -> None:
    write_beir(tmp_path / "beir", DATA)
    (tmp_path / "pairs.csv").write_text("sentence1,sentence2,score\na cat,a dog,0.5\n")
    model = _no_mlm_head(tmp_path) if data == "beir" and "splade" in extra else tmp_path / "hf"
    if not model.exists():
        hf_masked_lm(model)
    argv = ["evaluate", "--model", str(model), "--data", str(tmp_path / data), *FP32, *extra]
    capsys.readouterr()  # what building the folders printed
    assert main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
