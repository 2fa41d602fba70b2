"""The pure-Python TensorFlow checkpoint reader against TensorFlow's own reading of the same files.

The fixtures were written once by real TensorFlow (scripts/make_tf_checkpoint_fixture.py): a tiny
BERT with optimizer slots (tf_bert) and two shards of assorted dtypes (tf_misc), each with
TensorFlow's sha256 of every variable. No test needs TensorFlow. Hand-built bundles
(``tf_bundle``) cover what TensorFlow does not write: snappy blocks, a big-endian header.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import CheckpointError
from bertkit.interop.sstable import crc32c, read_sstable, snappy_decompress
from bertkit.interop.tf_checkpoint import TfCheckpoint, read_tf_checkpoint

from .tf_bundle import HEADER, field, write_bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BERT = FIXTURES / "tf_bert"
MISC = FIXTURES / "tf_misc"


def test_crc32c_known_values_and_the_lane_path_equals_the_byte_loop() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0 and crc32c(bytes(32)) == 0x8A9136AA
    data = np.random.default_rng(0).integers(0, 256, 70_001, dtype=np.uint8).tobytes()
    for n in (1, 1023, 1024, 4097, 70_001):  # below, at and above the lane threshold, with tails
        assert crc32c(data[:n]) == crc32c(bytes(data[: n // 2]) + data[n // 2 : n]) != 0
        expected = 0xFFFFFFFF
        for b in data[:n]:
            expected ^= b
            for _ in range(8):
                expected = (expected >> 1) ^ (0x82F63B78 if expected & 1 else 0)
        assert crc32c(data[:n]) == expected ^ 0xFFFFFFFF, n


@pytest.mark.parametrize("folder,prefix", [(BERT, "bert_model.ckpt"), (MISC, "model.ckpt")])
def test_every_variable_reads_as_tensorflow_read_it(folder: Path, prefix: str) -> None:
    expected = json.loads((folder / "expected.json").read_text())
    ckpt = TfCheckpoint(folder / prefix)
    assert set(ckpt.entries) == set(expected)
    for name, want in expected.items():
        assert ckpt.entries[name].dtype == want["dtype"], name
        if want["dtype"] == "string":
            continue
        array = ckpt.read(name)
        assert list(array.shape) == want["shape"], name
        assert array.reshape(-1)[:3].tolist() == want["first"], name
        assert hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest() == want["sha256"]


def test_two_shards_and_the_unreadable_dtypes() -> None:
    ckpt = TfCheckpoint(MISC / "model.ckpt")
    assert ckpt.num_shards == 2 and {e.shard for e in ckpt.entries.values()} == {0, 1}
    assert ckpt.read("dtypes/bf16").dtype == np.float32 and ckpt.read("dtypes/scalar") == 2.5
    with pytest.raises(
        CheckpointError, match=r"model\.ckpt\.index: variable 'dtypes/string' has dtype string"
    ):
        ckpt.read("dtypes/string")
    with pytest.raises(CheckpointError, match=r"'partitioned' is partitioned \(saved as slices\)"):
        read_tf_checkpoint(MISC / "sliced.ckpt")


def test_prefix_forms(tmp_path) -> None:
    for form in (BERT, BERT / "bert_model.ckpt", BERT / "bert_model.ckpt.index"):
        assert TfCheckpoint(form).prefix == BERT / "bert_model.ckpt"
    with pytest.raises(CheckpointError, match=r"2 \*\.index files; name one"):
        TfCheckpoint(MISC)
    with pytest.raises(CheckpointError, match=r"nothing\.index: no such file"):
        TfCheckpoint(tmp_path / "nothing")


def copy_checkpoint(tmp_path: Path, *extra: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    for f in BERT.glob("bert_model.ckpt.*"):
        shutil.copy(f, tmp_path / f.name)
    for name in extra:
        shutil.copy(BERT / name, tmp_path / name)
    return tmp_path / "bert_model.ckpt"


def test_corrupt_or_truncated_index_is_a_one_line_error(tmp_path) -> None:
    prefix = copy_checkpoint(tmp_path)
    index = tmp_path / "bert_model.ckpt.index"
    good = index.read_bytes()
    flipped = good[:100] + bytes([good[100] ^ 1]) + good[101:]
    for data, message in [
        (flipped, "CRC32C mismatch in the block at offset 0"),
        (good[:-1] + b"\x00", "no SSTable magic number"),
        (good[:-300], "no SSTable magic number"),
        (good[:20], "20 bytes, shorter than the 48-byte footer"),
    ]:
        index.write_bytes(data)
        with pytest.raises(CheckpointError, match=f"^{index}: corrupt checkpoint index: {message}"):
            TfCheckpoint(prefix)
    rng = np.random.default_rng(0)
    for _ in range(60):  # any damage: success or CheckpointError, never a raw exception
        i = int(rng.integers(len(good)))
        broken = bytearray(good)
        broken[i] ^= int(rng.integers(1, 256))
        for data in (bytes(broken), good[:i]):
            index.write_bytes(data)
            with contextlib.suppress(CheckpointError):
                TfCheckpoint(prefix)


def test_corrupt_or_truncated_data_file_is_a_one_line_error(tmp_path) -> None:
    prefix = copy_checkpoint(tmp_path)
    data_file = tmp_path / "bert_model.ckpt.data-00000-of-00001"
    name = "bert/encoder/layer_1/output/dense/kernel"
    entry = TfCheckpoint(prefix).entries[name]
    good = data_file.read_bytes()
    broken = bytearray(good)
    broken[entry.offset + 5] ^= 0x10
    data_file.write_bytes(bytes(broken))
    with pytest.raises(
        CheckpointError, match=f"^{data_file}: CRC32C mismatch in variable '{name}'"
    ):
        read_tf_checkpoint(prefix)
    data_file.write_bytes(good[: entry.offset + 7])
    with pytest.raises(CheckpointError, match=f"^{data_file}: variable '{name}' needs bytes up to"):
        TfCheckpoint(prefix).read(name)


# ---- hand-built bundles: snappy, byte order ---------------------------------------------------


def test_snappy_and_many_blocks_are_read_and_other_compressions_refused(tmp_path) -> None:
    # "a" then a copy of 9 bytes from 1 back: the copy overlaps its own output
    assert snappy_decompress(b"\x0a\x00a\x15\x01") == b"a" * 10
    assert snappy_decompress(b"\x06\x08abc\x0a\x03\x00") == b"abcabc"  # 2-byte-offset copy
    arrays = read_tf_checkpoint(BERT)
    write_bundle(tmp_path / "s", arrays, kind=1, per_block=10)  # TF writes one uncompressed
    again = read_tf_checkpoint(tmp_path / "s")
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays) and len(again) == len(arrays)
    assert read_sstable(tmp_path / "s.index")[1][0] == sorted(arrays)[0].encode()
    write_bundle(tmp_path / "z", {"x": np.ones(3, np.float32)}, kind=2)
    with pytest.raises(CheckpointError, match="unknown compression type 2"):
        TfCheckpoint(tmp_path / "z")


def test_big_endian_and_newer_bundles_are_refused(tmp_path) -> None:
    write_bundle(tmp_path / "be", {"x": np.ones(3, np.float32)}, header=HEADER + field(2, 1))
    with pytest.raises(CheckpointError, match="big-endian machine; bertkit reads little-endian"):
        TfCheckpoint(tmp_path / "be")
    write_bundle(tmp_path / "v", {"x": np.ones(3, np.float32)}, header=field(3, field(2, 2)))
    with pytest.raises(CheckpointError, match="needs a reader of version >= 2"):
        TfCheckpoint(tmp_path / "v")
