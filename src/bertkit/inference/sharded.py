"""A folder of fixed-size output shards plus ``manifest.json``, written so that a crash at any
moment can be resumed: the home of corpus-scale output for ``embed`` (``.npy`` shards) and any
other per-line output (e.g. JSONL shards of predictions).

Layout of an output folder ``DIR``::

    DIR/manifest.json        rewritten atomically after every shard: it lists exactly the
                             shards that are complete, in input order; ``"complete": true`` last
    DIR/vectors-00000.npy    shard k holds input lines k*S+1 .. (k+1)*S (S = shard size; 1-based)
    DIR/vectors-00001.npy    ...

The manifest (format ``bertkit-sharded-output``, version 1)::

    {"format": ..., "version": 1, "kind": "vectors", "complete": true,
     "inputs": [{"path": "in.txt", "size": 123456, "lines": 20000, "text_sha256": "..."}],
     "model": {"path": "...", "sha256": "...", "files": 5},
     "settings": {"pooling": "mean", ..., "shard_size": 10000, "sort_window": 50000},
     "dim": 384, "dtype": "float32",
     "shards": [{"path": "vectors-00000.npy", "lines": [1, 10000], "sha256": "...",
                 "input_sha256": "..."}, ...]}

``lines`` and ``text_sha256`` of an input appear once the run is complete. ``text_sha256`` (per
input, and ``input_sha256`` per shard) is the sha256 of the lines as read, each UTF-8 encoded and
followed by ``\\n``: the text that was embedded, the same for a file, a ``.gz`` of it or stdin.
``sha256`` of a shard is that of its file's bytes. Nothing in the manifest depends on time or on
whether the run was interrupted, so a resumed run's folder equals an uninterrupted one's byte for
byte.

Resume (:meth:`ShardedOutput.resume`): the model fingerprint, every setting and (for a complete
folder) the input's size must equal the manifest's, else one :class:`~bertkit.errors.ConfigError`
line names what changed (an unfinished folder may continue from an input fixed after its last
shard, and a strict ``encoding_errors`` may become ``replace``);
the caller then re-reads the consumed lines and checks each complete shard's ``input_sha256``
(:meth:`ShardedOutput.check_input`) before computing anything new. Temporary files and shards not
listed in the manifest (a crash between a shard's rename and the manifest's) are removed and redone.

The input is its text, not its file: a folder started from ``corpus.txt`` resumes from
``corpus.txt.gz`` of the same lines (or stdin), and the other way round. Sizes are compared only
between files stored alike (both plain, or both with the same compression suffix), since a
compressed file's size says nothing about its text; the shards' ``input_sha256`` decide. The
manifest's ``inputs`` keep the path and size the folder was started with whatever file a resumed
run read, so a refusal names that input as what the folder was started with and the file given
now as what differs, and a resumed folder equals an uninterrupted run's byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import ConfigError, InputError
from bertkit.io import (
    COMPRESSED_SUFFIXES,
    atomic_write_bytes,
    make_folder,
    read_json_manifest,
    sha256_file,
    write_json_manifest,
)
from bertkit.progress import counted

MANIFEST = "manifest.json"
FORMAT_NAME = "bertkit-sharded-output"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class StreamConfig:
    """How a corpus-scale run cuts its output into shards and its input into sorted windows."""

    shard_size: int = 10_000
    """Lines per output shard (vectors-00000.npy, ...): the unit of resume after a crash."""
    sort_window: int = 50_000
    """Lines read at once and batched by length; memory grows with it, not with the corpus (rounded
    down to a multiple of --shard-size)."""

    def __post_init__(self) -> None:
        if self.shard_size < 1 or self.sort_window < 1:
            raise ConfigError(
                f"shard size and sort window must be >= 1, got {self.shard_size} and {self.sort_window}"
            )

    @property
    def window(self) -> int:
        """The window actually used: a whole number of shards (at least one), so that every
        window starts at a shard boundary and a resumed run batches exactly as the first did."""
        return max(1, self.sort_window // self.shard_size) * self.shard_size


@dataclass(frozen=True)
class ShardRecord:
    """One complete shard as the manifest lists it; ``lines`` is 1-based and inclusive."""

    path: str
    lines: tuple[int, int]
    sha256: str
    input_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "lines": list(self.lines),
            "sha256": self.sha256,
            "input_sha256": self.input_sha256,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardRecord:
        return cls(
            d["path"], (int(d["lines"][0]), int(d["lines"][1])), d["sha256"], d["input_sha256"]
        )

    @property
    def count(self) -> int:
        return self.lines[1] - self.lines[0] + 1


def lines_bytes(lines: Sequence[str]) -> bytes:
    """``lines``, each UTF-8 encoded and followed by ``\\n``: the text whose sha256 is a shard's
    ``input_sha256`` and (over the whole input) ``text_sha256``."""
    return b"".join(line.encode("utf-8", "surrogatepass") + b"\n" for line in lines)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of a sharded output folder; InputError when missing or not ours."""
    return read_json_manifest(
        Path(folder) / MANIFEST, FORMAT_NAME, FORMAT_VERSION, "a sharded output folder"
    )


class ShardedOutput:
    """Writes shards ``{prefix}-{k:05d}{suffix}`` and the manifest into ``folder``.

    ``header``: the manifest's fixed part, with ``kind``, ``inputs`` (a list of dicts with at
    least ``path`` and ``size``, None when unknown), ``model``
    (:func:`~bertkit.inference.model_fingerprint.model_fingerprint`) and ``settings``
    (everything that changes the output, the shard size and window included). Call
    :meth:`resume` once, then per shard :meth:`write` (its file) and :meth:`record` (listed in
    the manifest, in input order), then :meth:`finish`.
    """

    def __init__(
        self, folder: str | Path, header: dict[str, Any], *, prefix: str, suffix: str
    ) -> None:
        self.folder = Path(folder)
        self.header = header
        self.prefix, self.suffix = prefix, suffix
        self.shards: list[ShardRecord] = []
        shard = rf"{re.escape(prefix)}-\d+{re.escape(suffix)}"
        self._name = re.compile(rf"^{shard}$")
        # atomic_write's temporary files are ".{final name}.{random}.tmp"
        self._tmp = re.compile(rf"^\.(?:{re.escape(MANIFEST)}|{shard})\..*\.tmp$")

    def shard_name(self, k: int) -> str:
        return f"{self.prefix}-{k:05d}{self.suffix}"

    def resume(self, clean: bool = True) -> list[ShardRecord]:
        """Start or continue the folder; returns the shards already complete (a new folder:
        none). Raises ConfigError naming the first difference from the manifest's model,
        settings or input size, or when the folder holds files that are not this output's.
        ``clean``: remove leftovers (one process of a multi-process run does, before the others
        write anything)."""
        make_folder(self.folder)
        if (self.folder / MANIFEST).exists():
            old = read_manifest(self.folder)
            self._check_header(old)
            self.shards = [ShardRecord.from_dict(s) for s in old.get("shards", [])]
            # the folder keeps naming the input it was started from (a resume may read the same
            # text from a .gz of it, or stdin), unless an unfinished folder now reads a file of
            # another size (a bad line fixed): that file is then the one its lines come from.
            # Lines and text hash come again with finish()
            started = [
                b if _resized(a, b) else _started(a)
                for a, b in zip(old.get("inputs", []), self.header.get("inputs", []))
            ]
            self.header = {**self.header, "inputs": started}
        else:
            strangers = [p.name for p in self.folder.iterdir() if not self._ours(p.name)]
            if strangers:
                raise ConfigError(
                    f"{self.folder}: holds {strangers[0]!r} and no {MANIFEST}; "
                    "choose an empty or new folder for --output"
                )
        keep = {s.path for s in self.shards} | {MANIFEST}
        for p in self.folder.iterdir() if clean else ():  # tmp files, shards never listed
            if p.name not in keep and self._ours(p.name):
                p.unlink()
        # the manifest is rewritten only with the first new shard (or by finish), after the
        # caller has checked the input: a refused run leaves the folder as it found it
        return list(self.shards)

    def check_input(self, k: int, lines: tuple[int, int], input_sha256: str, path: Any) -> None:
        """Raise InputError when the lines now read for complete shard ``k`` differ from those it
        was made from (a changed input is never mixed into an existing folder)."""
        s = self.shards[k]
        if s.lines != lines or s.input_sha256 != input_sha256:
            raise InputError(
                path,
                lines[0],
                f"input changed since {self.folder} was started: lines "
                f"{s.lines[0]}-{s.lines[1]} (shard {s.path}) differ from the ones read "
                "now; remove the folder or choose another --output",
            )

    def write(self, k: int, data: bytes) -> str:
        """Write shard ``k``'s file atomically (not yet listed: :meth:`record`); its sha256."""
        atomic_write_bytes(self.folder / self.shard_name(k), data)
        return hashlib.sha256(data).hexdigest()

    def written(self, k: int) -> bool:
        """Whether shard ``k``'s file is on disk: complete, since files appear by rename only."""
        return (self.folder / self.shard_name(k)).is_file()

    def record(self, k: int, lines: tuple[int, int], sha256: str, input_sha256: str) -> ShardRecord:
        """List shard ``k`` (the next one; its file on disk) in the manifest, rewritten atomically."""
        if k != len(self.shards):
            raise ValueError(f"shard {k} listed out of order (next is {len(self.shards)})")
        record = ShardRecord(self.shard_name(k), lines, sha256, input_sha256)
        self.shards.append(record)
        self._write_manifest(False)
        return record

    def finish(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Write the final manifest (``complete: true``) with the inputs' line counts and hashes;
        each input keeps the record (path, size) the folder was started with; returns it."""
        started = self.header.get("inputs") or [{} for _ in inputs]
        self.header = {**self.header, "inputs": [{**i, **s} for i, s in zip(inputs, started)]}
        return self._write_manifest(True)

    def _ours(self, name: str) -> bool:
        """This output's manifest, shards, or bertkit.io.atomic_write temporaries of them."""
        return name == MANIFEST or bool(self._name.match(name) or self._tmp.match(name))

    def _check_header(self, old: dict[str, Any]) -> None:
        where = f"{self.folder} was started with"
        hint = "; remove the folder or choose another --output"
        new = self.header
        if old.get("kind") != new.get("kind"):
            raise ConfigError(
                f"{where} {old.get('kind')!r} output, this run writes {new.get('kind')!r}{hint}"
            )
        om, nm = old.get("model", {}), new.get("model", {})
        if om.get("sha256") != nm.get("sha256"):
            raise ConfigError(
                f"{where} a different model ({om.get('path')}, sha256 "
                f"{str(om.get('sha256'))[:12]}), this run uses {nm.get('path')} "
                f"(sha256 {str(nm.get('sha256'))[:12]}){hint}"
            )
        os_, ns = old.get("settings", {}), new.get("settings", {})
        for key in sorted(set(os_) | set(ns)):
            if os_.get(key) != ns.get(key) and not _widened(key, os_.get(key)):
                raise ConfigError(
                    f"{where} {key} {os_.get(key)!r}, this run asks for {ns.get(key)!r}{hint}"
                )
        oi, ni = old.get("inputs", []), new.get("inputs", [])
        for a, b in zip(oi, ni):
            # an unfinished folder may continue from an input edited past its last shard (the
            # line that stopped the run, fixed): the shards' input_sha256 check what was consumed
            if _resized(a, b) and old.get("complete"):
                raise ConfigError(
                    f"{where} an input of {a['size']} bytes ({a.get('path')}), "
                    f"{b.get('path')} now has {b['size']} bytes{hint}"
                )
        if len(oi) != len(ni):
            raise ConfigError(f"{where} {len(oi)} inputs, this run reads {len(ni)}{hint}")

    def _write_manifest(self, complete: bool) -> dict[str, Any]:
        body = {**self.header, "complete": complete, "shards": [s.to_dict() for s in self.shards]}
        return write_json_manifest(self.folder / MANIFEST, FORMAT_NAME, FORMAT_VERSION, body)


def _started(record: dict[str, Any]) -> dict[str, Any]:
    """An input's record as the run that started the folder wrote it (no lines, no text hash)."""
    return {k: v for k, v in record.items() if k not in ("lines", "text_sha256")}


def _stored_as(path: Any) -> str:
    """An input's compression suffix (``.gz``, ...), or "" for a plain file or stdin."""
    suffix = Path(str(path or "")).suffix.lower()
    return suffix if suffix in COMPRESSED_SUFFIXES else ""


def _sizes_compare(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two inputs' sizes say whether their text differs: both known, and both files
    stored alike (a .gz of the same text has other bytes; its shards' input hashes decide)."""
    known = a.get("size") is not None and b.get("size") is not None
    return known and _stored_as(a.get("path")) == _stored_as(b.get("path"))


def _resized(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether input ``b`` is known to differ in size from ``a`` (stored alike)."""
    return _sizes_compare(a, b) and a["size"] != b["size"]


def _widened(key: str, started: Any) -> bool:
    """Whether a setting may change on resume without changing what was written: a folder
    started with strict UTF-8 decoding read only valid lines, which every ``encoding_errors``
    mode decodes alike (so "pass --encoding-errors replace", the hint a bad byte stops a strict
    run with, continues its folder)."""
    return key == "encoding_errors" and started == "strict"


def shard_paths(folder: str | Path, verify: bool = True) -> list[tuple[ShardRecord, Path]]:
    """The complete shards of ``folder`` in input order, each checked against its manifest
    sha256 when ``verify`` (InputError on a mismatch: a corrupt or modified shard)."""
    folder = Path(folder)
    out = []
    for d in read_manifest(folder).get("shards", []):
        record = ShardRecord.from_dict(d)
        path = folder / record.path
        if verify and (not path.is_file() or sha256_file(path) != record.sha256):
            raise InputError(path, None, "missing, or its sha256 differs from the manifest's")
        out.append((record, path))
    return out


def kept_note(folder: str | Path) -> str | None:
    """What an unfinished output folder keeps, for the line an interrupted run ends with
    (``vectors keeps lines 1-20000 (2 shards); the same command continues it``); None when
    ``folder`` is no such folder or is complete."""
    try:
        manifest = read_manifest(folder)
    except (InputError, OSError):
        return None
    shards = manifest.get("shards") or []
    if manifest.get("complete") or not isinstance(shards, list):
        return None
    held = shards[-1]["lines"][1] if shards else 0
    kept = f"lines 1-{held} ({counted(len(shards), 'shard')})" if held else "no complete shard yet"
    return f"{Path(folder)} keeps {kept}; the same command continues it"


def file_size(path: str | Path | None) -> int | None:
    """Bytes of a regular file (None for stdin or anything else), for the cheap input check."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None  # a FIFO's 0 says nothing
