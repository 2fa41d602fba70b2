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

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER = 48  # two block handles (varints, padded to 40 bytes) + the 8-byte magic
_TRAILER = 5  # compression type (1 byte) + masked CRC32C (4 bytes) after each block
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


class _Corrupt(ValueError):
    """A format violation; the caller adds the file name and raises CheckpointError."""


# ---- CRC32C (Castagnoli), as LevelDB and TensorFlow compute and mask it ----------------------

_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _crc_of_byte(c: int) -> int:
    for _ in range(8):
        c = (c >> 1) ^ (_POLY if c & 1 else 0)
    return c


_CRC_TABLE = [_crc_of_byte(b) for b in range(256)]
_CRC_TABLE_NP = np.array(_CRC_TABLE, dtype=np.uint32)
_LANES = 4096


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32C of ``data`` (``crc32c(b"123456789") == 0xE3069283``).

    Long inputs are cut into up to 4,096 equal lanes whose CRC registers advance together in
    numpy, then folded in order: the register is linear over GF(2), so feeding lane k after the
    lanes before it equals ``Z(reg) ^ lane_k`` with Z the map "feed one lane's worth of zero
    bytes", which 32 extra all-zero lanes starting from the basis vectors compute alongside.
    A 100 MB tensor takes about a second instead of a pure-Python minute.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    reg = 0xFFFFFFFF
    lanes = min(_LANES, buf.size // 512)
    if lanes >= 2:
        step = buf.size // lanes
        rows = np.zeros((step, lanes + 32), dtype=np.uint8)  # (byte position, lane)
        rows[:, :lanes] = buf[: lanes * step].reshape(lanes, step).T
        regs = np.zeros(lanes + 32, dtype=np.uint32)
        regs[lanes:] = 1 << np.arange(32, dtype=np.uint32)
        for row in rows:
            regs = _CRC_TABLE_NP[(regs ^ row) & 0xFF] ^ (regs >> 8)
        t0, t1, t2, t3 = _byte_tables(regs[lanes:].tolist())
        for lane in regs[:lanes].tolist():
            reg = t0[reg & 255] ^ t1[(reg >> 8) & 255] ^ t2[(reg >> 16) & 255] ^ t3[reg >> 24]
            reg ^= lane
        buf = buf[lanes * step :]
    table = _CRC_TABLE
    for b in buf.tolist():
        reg = table[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg ^ 0xFFFFFFFF


def _byte_tables(columns: list[int]) -> list[list[int]]:
    """A GF(2) 32x32 matrix (its columns: the images of bit 0..31) as 4 tables of 256 entries."""
    tables = []
    for k in range(4):
        t = [0]
        for bit in range(8):
            t += [v ^ columns[8 * k + bit] for v in t]
        tables.append(t)
    return tables


def unmask_crc(masked: int) -> int:
    """LevelDB's crc32c::Unmask: stored CRCs are rotated right by 15 bits plus a constant."""
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


# ---- snappy (the one compression an SSTable block may use) -------------------------------------


def snappy_decompress(data: bytes) -> bytes:
    """Decode a raw snappy block (format_description.txt of google/snappy)."""
    size, pos = _varint(data, 0)
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind, arg = tag & 3, tag >> 2
        if kind == 0:  # literal; lengths over 60 follow in 1-4 bytes
            if arg >= 60:
                n = arg - 59
                arg = int.from_bytes(_take(data, pos, n), "little")
                pos += n
            out += _take(data, pos, arg + 1)
            pos += arg + 1
            continue
        if kind == 1:  # copy, 11-bit offset
            length, offset = 4 + (arg & 7), ((arg >> 3) << 8) | _take(data, pos, 1)[0]
            pos += 1
        else:  # copy, 16- or 32-bit offset
            n = 2 if kind == 2 else 4
            length, offset = arg + 1, int.from_bytes(_take(data, pos, n), "little")
            pos += n
        if not 0 < offset <= len(out):
            raise _Corrupt(f"snappy copy offset {offset} outside the {len(out)} bytes decoded")
        start = len(out) - offset
        piece = out[start : start + length]
        out += (piece * (length // len(piece) + 1))[:length]  # a copy may overlap its own output
    if len(out) != size:
        raise _Corrupt(f"snappy block decodes to {len(out)} bytes, its header says {size}")
    return bytes(out)


# ---- protobuf wire format and SSTable blocks ---------------------------------------------------


def _take(buf: bytes, pos: int, n: int) -> bytes:
    if n < 0 or pos + n > len(buf):
        raise _Corrupt(f"record ends after {len(buf)} bytes, {pos + n} needed (truncated?)")
    return buf[pos : pos + n]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Corrupt("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _fields(buf: bytes) -> dict[int, list[int | bytes]]:
    """A protobuf message as {field number: [values]} (varints as unsigned ints, bytes as bytes)."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        wire = key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire in (1, 5):  # fixed64, fixed32
            n = 8 if wire == 1 else 4
            value, pos = int.from_bytes(_take(buf, pos, n), "little"), pos + n
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = _take(buf, pos, n), pos + n
        else:
            raise _Corrupt(f"unsupported protobuf wire type {wire}")
        fields.setdefault(key >> 3, []).append(value)
    return fields


def _last(fields: dict, number: int, default: int | bytes = 0) -> int | bytes:
    return fields.get(number, [default])[-1]  # protobuf: the last occurrence wins


def _block_handle(buf: bytes, pos: int) -> tuple[tuple[int, int], int]:
    offset, pos = _varint(buf, pos)
    size, pos = _varint(buf, pos)
    return (offset, size), pos


def _read_block(data: bytes, handle: tuple[int, int]) -> bytes:
    """The contents of the block at ``handle``, CRC-checked and decompressed."""
    offset, size = handle
    end = offset + size
    if end + _TRAILER > len(data) - _FOOTER:
        raise _Corrupt(f"block at offset {offset} ({size} bytes) runs past the end (truncated?)")
    stored = unmask_crc(int.from_bytes(data[end + 1 : end + _TRAILER], "little"))
    if crc32c(memoryview(data)[offset : end + 1]) != stored:
        raise _Corrupt(f"CRC32C mismatch in the block at offset {offset} (the file is corrupt)")
    kind = data[end]
    if kind == 0:
        return data[offset:end]
    if kind == 1:
        return snappy_decompress(data[offset:end])
    raise _Corrupt(f"block at offset {offset} has unknown compression type {kind}")


def _block_entries(block: bytes) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs of a block: each key shares a prefix with the previous one."""
    if len(block) < 4:
        raise _Corrupt("block too short for its restart count")
    restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 - 4 * restarts
    if limit < 0:
        raise _Corrupt(f"block claims {restarts} restart points, more than fit in it")
    entries, key, pos = [], b"", 0
    while pos < limit:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        length, pos = _varint(block, pos)
        if shared > len(key) or pos + unshared + length > limit:
            raise _Corrupt("block entry runs past its block")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        entries.append((key, block[pos : pos + length]))
        pos += length
    return entries


def read_sstable(path: str | Path) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of an SSTable file, in key order; CheckpointError if it is corrupt."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from e
    try:
        if len(data) < _FOOTER:
            raise _Corrupt(
                f"{len(data)} bytes, shorter than the {_FOOTER}-byte footer (truncated?)"
            )
        footer = data[-_FOOTER:]
        if int.from_bytes(footer[-8:], "little") != _TABLE_MAGIC:
            raise _Corrupt("no SSTable magic number at the end (truncated, or not an .index file)")
        _metaindex, pos = _block_handle(footer, 0)
        index, _ = _block_handle(footer, pos)
        entries = []
        for _, value in _block_entries(_read_block(data, index)):
            entries += _block_entries(_read_block(data, _block_handle(value, 0)[0]))
        return entries
    except (_Corrupt, IndexError, ValueError) as e:  # the last two: a safety net, never expected
        raise CheckpointError(f"{path}: corrupt checkpoint index: {e}") from e


# ---- the tensor bundle ------------------------------------------------------------------------


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
    f = _fields(value)
    shape_fields = _fields(_last(f, 2, b""))  # TensorShapeProto: repeated Dim dim = 2
    dims = tuple(int(_last(_fields(d), 1)) for d in shape_fields.get(2, []))
    code = int(_last(f, 1))
    dtype = _DTYPES.get(code, (f"DataType {code}", None))[0]
    return TensorEntry(
        name,
        dtype,
        dims,
        int(_last(f, 3)),
        int(_last(f, 4)),
        int(_last(f, 5)),
        int(_last(f, 6)),
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
                    self._check_header(_fields(value))
                elif not key.startswith(b"\x00"):  # NUL-led keys: slices of partitioned ones
                    name = key.decode("utf-8")
                    self.entries[name] = _entry(name, value)
        except (ValueError, TypeError, IndexError) as e:  # _Corrupt, bad UTF-8, a mistyped field
            raise CheckpointError(f"{self.index_path}: corrupt checkpoint index: {e}") from e
        if not self.num_shards:
            raise CheckpointError(f"{self.index_path}: no bundle header (not a V2 checkpoint?)")

    def _check_header(self, f: dict) -> None:
        if _last(f, 2) == 1:
            raise CheckpointError(
                f"{self.index_path}: written by a big-endian machine; bertkit reads "
                "little-endian checkpoints only"
            )
        version = _fields(_last(f, 3, b""))
        if int(_last(version, 2)) > _BUNDLE_VERSION:  # VersionDef.min_consumer
            raise CheckpointError(
                f"{self.index_path}: tensor bundle version {_last(version, 1)} needs a reader of "
                f"version >= {_last(version, 2)}; this one is {_BUNDLE_VERSION}"
            )
        self.num_shards = max(1, int(_last(f, 1)))

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
