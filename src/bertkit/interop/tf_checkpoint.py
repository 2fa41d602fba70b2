"""TensorFlow checkpoints (the V2 "tensor bundle" format) read in pure Python: no TensorFlow.

Google's BERT releases ship ``bert_model.ckpt.index`` + ``bert_model.ckpt.data-00000-of-00001``.
The format (tensorflow/core/util/tensor_bundle/tensor_bundle.{h,cc,proto}):

- ``PREFIX.index`` is an SSTable (LevelDB's table format, docs/table_format.md): data blocks of
  prefix-compressed (key, value) entries with restart points, a metaindex block, an index block
  whose values locate the data blocks, and a 48-byte footer ending in the magic number
  0xdb4775248b80fb57. Every block is followed by a compression byte (0 none, 1 snappy; TF writes
  0) and the masked CRC32C of the block and that byte.
- The value under key "" is a ``BundleHeaderProto`` (num_shards, endianness, version); under each
  variable name, a ``BundleEntryProto`` (dtype, shape, shard_id, offset, size, masked CRC32C of
  the tensor's bytes, slices). Keys starting with a NUL byte hold the parts of a partitioned
  variable (not read here: BERT's checkpoints have none).
- ``PREFIX.data-0000S-of-0000N`` holds each tensor's raw little-endian bytes at offset/size.

Every CRC is checked (block CRCs when the index is opened, a tensor's when it is read), and a
truncated or corrupt file is a ``CheckpointError`` naming the file and what is wrong. bfloat16
tensors are returned widened to float32 (exactly: numpy has no bfloat16).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import CheckpointError
from bertkit.interop.sstable import (
    crc32c,
    last_field,
    proto_fields,
    read_sstable,
    unmask_crc,
)

_BUNDLE_VERSION = 1  # tensor_bundle.h kTensorBundleVersion: what this reader understands

# types.proto DataType -> (name, numpy dtype); None: known but not readable as a numpy array.
_DTYPES: dict[int, tuple[str, str | None]] = {
    1: ("float32", "<f4"),
    2: ("float64", "<f8"),
    3: ("int32", "<i4"),
    4: ("uint8", "u1"),
    5: ("int16", "<i2"),
    6: ("int8", "i1"),
    7: ("string", None),
    8: ("complex64", "<c8"),
    9: ("int64", "<i8"),
    10: ("bool", "?"),
    14: ("bfloat16", "<u2"),
    17: ("uint16", "<u2"),
    18: ("complex128", "<c16"),
    19: ("float16", "<f2"),
    20: ("resource", None),
    21: ("variant", None),
    22: ("uint32", "<u4"),
    23: ("uint64", "<u8"),
}
_NUMPY = {name: np.dtype(dtype) for name, dtype in _DTYPES.values() if dtype is not None}


@dataclass(frozen=True)
class TensorEntry:
    """Where and how one variable is stored (a ``BundleEntryProto``)."""

    name: str
    dtype: str
    """TensorFlow's dtype name: float32, bfloat16, int64, string, ..."""
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    masked_crc: int
    """The stored CRC32C of the tensor's bytes, masked as LevelDB masks block CRCs."""
    sliced: bool
    """A partitioned variable: its data are in slice entries, which this reader does not join."""


def _entry(name: str, value: bytes) -> TensorEntry:
    f = proto_fields(value)
    shape_fields = proto_fields(last_field(f, 2, b""))  # TensorShapeProto: repeated Dim dim = 2
    dims = tuple(int(last_field(proto_fields(d), 1)) for d in shape_fields.get(2, []))
    code = int(last_field(f, 1))
    dtype = _DTYPES.get(code, (f"DataType {code}", None))[0]
    return TensorEntry(
        name,
        dtype,
        dims,
        int(last_field(f, 3)),
        int(last_field(f, 4)),
        int(last_field(f, 5)),
        int(last_field(f, 6)),
        7 in f,
    )


def resolve_prefix(path: str | Path) -> Path:
    """The checkpoint prefix a user meant: PREFIX, PREFIX.index, PREFIX.data-*, or the folder
    holding ``bert_model.ckpt.index`` (or a single other ``*.index``)."""
    path = Path(path)
    if path.is_dir():
        if (path / "bert_model.ckpt.index").is_file():
            return path / "bert_model.ckpt"
        found = sorted(path.glob("*.index"))
        if len(found) != 1:
            what = "no *.index file" if not found else f"{len(found)} *.index files; name one"
            raise CheckpointError(f"{path}: {what} (expected bert_model.ckpt.index)")
        return found[0].with_suffix("")
    prefix = Path(re.sub(r"\.(index|data-\d{5}-of-\d{5})$", "", str(path)))
    if not Path(f"{prefix}.index").is_file():
        raise CheckpointError(f"{prefix}.index: no such file (is {path} a checkpoint prefix?)")
    return prefix


class TfCheckpoint:
    """An opened checkpoint: its variables' entries now, their tensors when ``read``.

    Raises CheckpointError for a missing, truncated or corrupt index, a big-endian bundle, or a
    bundle newer than the version this reader understands.
    """

    def __init__(self, prefix: str | Path) -> None:
        self.prefix = resolve_prefix(prefix)
        self.index_path = Path(f"{self.prefix}.index")
        self.num_shards = 0  # set from the header, which every bundle has
        self.entries: dict[str, TensorEntry] = {}
        try:
            for key, value in read_sstable(self.index_path):
                if key == b"":
                    self._check_header(proto_fields(value))
                elif not key.startswith(b"\x00"):  # NUL-led keys: slices of partitioned ones
                    name = key.decode("utf-8")
                    self.entries[name] = _entry(name, value)
        except (ValueError, TypeError, IndexError) as e:  # Corrupt, bad UTF-8, a mistyped field
            raise CheckpointError(f"{self.index_path}: corrupt checkpoint index: {e}") from e
        if not self.num_shards:
            raise CheckpointError(f"{self.index_path}: no bundle header (not a V2 checkpoint?)")

    def _check_header(self, f: dict) -> None:
        if last_field(f, 2) == 1:
            raise CheckpointError(
                f"{self.index_path}: written by a big-endian machine; bertkit reads "
                "little-endian checkpoints only"
            )
        version = proto_fields(last_field(f, 3, b""))
        if int(last_field(version, 2)) > _BUNDLE_VERSION:  # VersionDef.min_consumer
            raise CheckpointError(
                f"{self.index_path}: tensor bundle version {last_field(version, 1)} needs a reader of "
                f"version >= {last_field(version, 2)}; this one is {_BUNDLE_VERSION}"
            )
        self.num_shards = max(1, int(last_field(f, 1)))

    def read(self, name: str) -> np.ndarray:
        """The variable ``name`` as a numpy array (bfloat16 widened to float32), CRC-checked."""
        entry = self.entries.get(name)
        if entry is None:
            raise CheckpointError(f"{self.index_path}: no variable {name!r}")
        dtype = _NUMPY.get(entry.dtype)
        if dtype is None or entry.sliced:
            why = "is partitioned (saved as slices)" if entry.sliced else f"has dtype {entry.dtype}"
            raise CheckpointError(
                f"{self.index_path}: variable {name!r} {why}, which bertkit does not read"
            )
        path = Path(f"{self.prefix}.data-{entry.shard:05d}-of-{self.num_shards:05d}")
        count = int(np.prod(entry.shape, dtype=np.int64))
        if entry.size != count * dtype.itemsize:
            raise CheckpointError(
                f"{self.index_path}: variable {name!r} has {entry.size} bytes for shape "
                f"{list(entry.shape)} of {entry.dtype} (corrupt index)"
            )
        buf = bytearray(entry.size)
        try:
            with open(path, "rb") as f:
                f.seek(entry.offset)
                got = f.readinto(buf)
        except OSError as e:
            raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from e
        if got != entry.size:
            raise CheckpointError(
                f"{path}: variable {name!r} needs bytes up to {entry.offset + entry.size}, the "
                f"file ends at {entry.offset + got} (truncated?)"
            )
        if crc32c(buf) != unmask_crc(entry.masked_crc):
            raise CheckpointError(f"{path}: CRC32C mismatch in variable {name!r} (corrupt file)")
        array = np.frombuffer(buf, dtype=dtype).reshape(entry.shape)
        if entry.dtype == "bfloat16":  # the upper half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        return array


def read_tf_checkpoint(prefix: str | Path) -> dict[str, np.ndarray]:
    """Every variable of a TensorFlow V2 checkpoint by name (see ``TfCheckpoint``)."""
    checkpoint = TfCheckpoint(prefix)
    return {name: checkpoint.read(name) for name in checkpoint.entries}
