"""Hand-built TensorFlow bundles for the tests: what TensorFlow does not write for us (snappy
blocks, a big-endian header, a variable the model has no place for), in LevelDB's table format
with protobuf values encoded by hand. Only float32/int32/int64 tensors, one shard."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertkit.interop.sstable import crc32c

MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
CODES = {np.dtype("float32"): 1, np.dtype("int32"): 3, np.dtype("int64"): 9}


def mask(crc: int) -> int:
    """LevelDB's crc32c::Mask."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def field(number: int, value: int | bytes) -> bytes:
    """A protobuf field: varint for an int, length-delimited for bytes."""
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value)


HEADER = field(1, 1) + field(3, field(1, 1))  # num_shards 1, version {producer 1}


def snappy_literals(data: bytes) -> bytes:
    """Valid snappy made of literals only (tag 61<<2: a 2-byte length follows)."""
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    body = b"".join(b"\xf4" + (len(c) - 1).to_bytes(2, "little") + c for c in chunks)
    return varint(len(data)) + body


def write_table(
    path: Path, entries: list[tuple[bytes, bytes]], kind: int = 0, per_block: int = 1 << 30
) -> None:
    """An SSTable: data blocks of ``per_block`` entries (no key sharing, one restart point each),
    metaindex, index, footer; ``kind`` is every block's compression byte (1: snappy)."""
    out = bytearray()

    def block(items: list[tuple[bytes, bytes]]) -> bytes:
        body = b"".join(varint(0) + varint(len(k)) + varint(len(v)) + k + v for k, v in items)
        contents = body + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
        contents = snappy_literals(contents) if kind == 1 else contents
        handle = varint(len(out)) + varint(len(contents))
        trailer = bytes([kind]) + mask(crc32c(contents + bytes([kind]))).to_bytes(4, "little")
        out.extend(contents + trailer)
        return handle

    groups = [entries[i : i + per_block] for i in range(0, len(entries), per_block)]
    index = [(group[-1][0], block(group)) for group in groups]
    handles = block([]) + block(index)
    path.write_bytes(bytes(out) + handles.ljust(40, b"\0") + MAGIC)


def write_bundle(
    prefix: Path,
    arrays: dict[str, np.ndarray],
    header: bytes = HEADER,
    kind: int = 0,
    per_block: int = 1 << 30,
) -> None:
    """PREFIX.index + PREFIX.data-00000-of-00001 holding ``arrays``."""
    data, entries = bytearray(), [(b"", header)]
    for name in sorted(arrays):
        a = np.asarray(arrays[name])  # not ascontiguousarray: it turns a scalar into shape (1,)
        raw = a.tobytes()
        shape = b"".join(field(2, field(1, d)) for d in a.shape)
        crc = varint(6 << 3 | 5) + mask(crc32c(raw)).to_bytes(4, "little")  # fixed32
        proto = field(1, CODES[a.dtype]) + field(2, shape) + field(4, len(data))
        entries.append((name.encode(), proto + field(5, len(raw)) + crc))
        data += raw
    Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(data))
    write_table(Path(f"{prefix}.index"), entries, kind, per_block)
