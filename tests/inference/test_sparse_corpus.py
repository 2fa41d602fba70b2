"""The CSR shard format of a sparse folder and its loader: equal rows give equal bytes (no
timestamp), a corrupted or mislabelled shard is detected on load, and each loader refuses the
other kind of folder by name."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import InputError
from bertkit.evaluation.retrieval import SparseRows
from bertkit.inference import Embedder, SparseEmbedder
from bertkit.inference.corpus import load_vectors
from bertkit.inference.sharded import MANIFEST, StreamConfig
from bertkit.inference.sparse import as_rows
from bertkit.inference.sparse_corpus import (
    csr_bytes,
    embed_sparse_to,
    load_sparse_vectors,
    read_csr,
)
from support.tiny_splade import hf_masked_lm

LINES = ["the cat sat on the mat", "dog", "", "a big red house by the river", "tree", "road"]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return hf_masked_lm(tmp_path_factory.mktemp("sparse_corpus") / "hf")


@pytest.fixture
def folder(model, tmp_path) -> Path:
    embed_sparse_to(SparseEmbedder.load(model), LINES, tmp_path / "s", config=StreamConfig(2, 2))
    return tmp_path / "s"


def test_csr_bytes_round_trip_and_depend_on_the_rows_only(tmp_path) -> None:
    rows = SparseRows(
        np.array([0, 2, 2, 3], np.int64),
        np.array([1, 7, 4], np.int64),
        np.array([0.5, 2.0, 1.25], np.float32),
        9,
    )
    data = csr_bytes(rows)
    with zipfile.ZipFile(io.BytesIO(data)) as z:  # no time of writing: equal rows, equal bytes
        assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert z.namelist() == ["indptr.npy", "indices.npy", "values.npy"]
    (tmp_path / "s.npz").write_bytes(data)
    with np.load(tmp_path / "s.npz") as z:  # an ordinary .npz, readable without bertkit
        assert z["indices"].dtype == np.int32 and z["values"].dtype == np.float32
    back = read_csr(tmp_path / "s.npz", 9)
    for name in ("indptr", "indices", "values"):
        np.testing.assert_array_equal(getattr(back, name), getattr(rows, name))
    assert back.indices.dtype == np.int64 and back.size == 9


@pytest.mark.parametrize(
    "indptr, indices, values",
    [
        ([1, 2, 3], [1, 7, 4], [0.5, 2.0, 1.25]),  # the first row does not start at 0
        ([0, 2, 2], [1, 7, 4], [0.5, 2.0, 1.25]),  # the last row ends before the entries do
        ([0, 2, 3], [1, 7, 4], [0.5, 2.0]),  # a value short
    ],
)
def test_a_shard_whose_arrays_disagree_in_one_way_is_refused(
    tmp_path, indptr, indices, values
) -> None:
    np.savez(tmp_path / "s.npz", indptr=indptr, indices=indices, values=values)
    with pytest.raises(InputError, match="do not fit together"):
        read_csr(tmp_path / "s.npz", 9)


def test_a_window_of_several_shards_keeps_each_line_in_its_shard(model, tmp_path) -> None:
    """Windows of 6 lines cut into shards of 2: each shard holds its own lines' rows, in input
    order, as the vectors embedded in memory."""
    embedder = SparseEmbedder.load(model)
    embed_sparse_to(embedder, LINES, tmp_path / "s", config=StreamConfig(2, 6))
    got = load_sparse_vectors(tmp_path / "s")
    want = as_rows(embedder.embed(LINES)[0], embedder.vocab_size)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.values, want.values, rtol=1e-5)


def test_a_corrupted_shard_is_detected_on_load(folder) -> None:
    assert len(load_sparse_vectors(folder)) == len(LINES)
    shard = folder / "sparse-00001.npz"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte changed
    shard.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"sparse-00001\.npz.*sha256 differs"):
        load_sparse_vectors(folder)


def test_a_shard_with_other_rows_than_its_lines_is_detected(folder) -> None:
    """A shard swapped for another of a different length, its sha256 updated in the manifest."""
    manifest = json.loads((folder / MANIFEST).read_text())
    one = SparseRows(np.array([0, 1], np.int64), np.array([3]), np.array([1.0], np.float32), 9)
    data = csr_bytes(one)
    (folder / "sparse-00002.npz").write_bytes(data)
    manifest["shards"][2]["sha256"] = hashlib.sha256(data).hexdigest()
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="1 rows, the manifest says 2"):
        load_sparse_vectors(folder)
    assert len(load_sparse_vectors(folder, verify=False)) == len(LINES) - 1


def test_each_loader_refuses_the_other_kind_of_folder(model, folder, tmp_path) -> None:
    with pytest.raises(InputError, match=r"holds 'sparse' output.*load_sparse_vectors"):
        load_vectors(folder)
    Embedder.load(model).embed_to(LINES, tmp_path / "d", config=StreamConfig(2, 2))
    with pytest.raises(InputError, match=r"holds 'vectors' output.*load_vectors"):
        load_sparse_vectors(tmp_path / "d")
