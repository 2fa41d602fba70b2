"""Binary shards of pre-training instances, their manifest, and a dataset reading them.

Layout of an output folder ``DIR`` (written by ``bertkit prepare-pretraining``)::

    DIR/manifest.json          written last and atomically: counts, settings, sha256 per shard
    DIR/vocab.txt              the vocabulary the ids refer to
    DIR/train-00003-0000.npz   shards: split, input file index, shard number within that file
    DIR/eval-00003-0000.npz    held-out shards (when a holdout fraction was asked for)
    DIR/train-00003-p0002-0000.npz   piece 2 (the third) of a large input file

A shard is an uncompressed ``.npz`` of flat integer arrays (no pickle; loaded with
``allow_pickle=False``), for ``n`` instances:

=====================  ============  ==========================================================
``input_ids``          uint16/int32  all instances' ids concatenated (uint16 when the vocabulary
                                     has at most 65,536 entries)
``offsets``            int64 (n+1)   instance ``i`` is ``input_ids[offsets[i]:offsets[i+1]]``
``num_segment_a``      int32 (n)     tokens with segment id 0 ([CLS] A [SEP])
``next_sentence_label`` int8 (n)     0 = actual next, 1 = random next
``masked_positions``   int32         flat, ascending within an instance (empty when dynamic)
``masked_labels``      like ids      original ids at those positions
``masked_offsets``     int64 (n+1)   instance ``i``'s masks are ``[masked_offsets[i]:...[i+1]]``
=====================  ============  ==========================================================
"""

from __future__ import annotations

import bisect
import hashlib
import io
import zipfile
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.masking import MaskingSpec
from bertkit.data.prepare_settings import PrepareSettings
from bertkit.data.pretraining import TrainingInstance
from bertkit.errors import ConfigError, InputError
from bertkit.io import (
    atomic_write_bytes,
    read_json_manifest,
    write_json_manifest,
)

MANIFEST = "manifest.json"
FORMAT_NAME = "bertkit-pretraining-shards"
FORMAT_VERSION = 1
_ARRAYS = (
    "input_ids",
    "offsets",
    "num_segment_a",
    "next_sentence_label",
    "masked_positions",
    "masked_labels",
    "masked_offsets",
)


@dataclass
class ShardInfo:
    """One written shard, as recorded in the manifest."""

    file: str
    num_instances: int
    num_tokens: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype that holds every id."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


class ShardWriter:
    """Collects instances and writes a shard every ``shard_size`` instances (atomically).

    Holds at most ``shard_size`` instances in memory. File names are
    ``{prefix}-{k:04d}.npz``; :meth:`close` flushes the last partial shard and returns the shards
    written, in order.
    """

    def __init__(self, folder: str | Path, prefix: str, shard_size: int, vocab_size: int) -> None:
        if shard_size < 1:
            raise ValueError("shard_size must be >= 1")
        self.folder = Path(folder)
        self.prefix = prefix
        self.shard_size = shard_size
        self.dtype = id_dtype(vocab_size)
        self.shards: list[ShardInfo] = []
        self._pending: list[TrainingInstance] = []

    def add(self, instance: TrainingInstance) -> None:
        self._pending.append(instance)
        if len(self._pending) >= self.shard_size:
            self._flush()

    def close(self) -> list[ShardInfo]:
        if self._pending:
            self._flush()
        return self.shards

    def _flush(self) -> None:
        items, self._pending = self._pending, []
        lengths = np.fromiter((len(x.input_ids) for x in items), np.int64, len(items))
        n_masked = np.fromiter((len(x.masked_positions) for x in items), np.int64, len(items))
        arrays = {
            "input_ids": np.concatenate([x.input_ids for x in items]).astype(self.dtype),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "num_segment_a": np.array([x.num_segment_a for x in items], np.int32),
            "next_sentence_label": np.array([x.next_sentence_label for x in items], np.int8),
            "masked_positions": np.concatenate(
                [np.zeros(0, np.int32)] + [x.masked_positions for x in items]
            ).astype(np.int32),
            "masked_labels": np.concatenate(
                [np.zeros(0, np.int32)] + [x.masked_labels for x in items]
            ).astype(self.dtype),
            "masked_offsets": np.concatenate([[0], np.cumsum(n_masked)]).astype(np.int64),
        }
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        data = buf.getvalue()
        name = f"{self.prefix}-{len(self.shards):04d}.npz"
        atomic_write_bytes(self.folder / name, data)
        info = ShardInfo(name, len(items), int(lengths.sum()), hashlib.sha256(data).hexdigest())
        self.shards.append(info)


def write_manifest(folder: str | Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` atomically; call it after every shard is on disk."""
    write_json_manifest(Path(folder) / MANIFEST, FORMAT_NAME, FORMAT_VERSION, manifest)


def is_prepared(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by ``bertkit prepare`` (holds its manifest.json)."""
    p = Path(path)
    return p.is_dir() and (p / MANIFEST).is_file()


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """Load and check ``manifest.json``; InputError when missing or not ours."""
    return read_json_manifest(
        Path(folder) / MANIFEST,
        FORMAT_NAME,
        FORMAT_VERSION,
        "the output folder of bertkit prepare-pretraining",
    )


def load_shard(path: str | Path, expected_sha256: str | None = None) -> dict[str, np.ndarray]:
    """Read a shard's arrays (no pickle), checking its sha256 when one is given."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(path, None, f"cannot read shard ({e.strerror or e})") from e
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise InputError(
            path, None, "sha256 does not match the manifest (corrupt or modified shard)"
        )
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in _ARRAYS}
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(path, None, f"expected a pre-training shard .npz ({e})") from e
    n = len(arrays["num_segment_a"])
    ok = (
        len(arrays["offsets"]) == n + 1
        and len(arrays["masked_offsets"]) == n + 1
        and len(arrays["next_sentence_label"]) == n
        and int(arrays["offsets"][-1]) == len(arrays["input_ids"])
        and int(arrays["masked_offsets"][-1]) == len(arrays["masked_positions"])
    )
    if not ok:
        raise InputError(path, None, "inconsistent shard arrays (expected offsets matching data)")
    return arrays


class PretrainingDataset:
    """Random access to the instances of one split of a ``prepare-pretraining`` output.

    ``ds[i]`` is a dict of numpy arrays: ``input_ids`` (T,) int64 (masked when static),
    ``token_type_ids`` (T,), ``masked_positions`` (M,), ``masked_labels`` (M,) (both empty when
    the data uses dynamic masking), ``next_sentence_label`` (int) and ``index`` (``i``, the key
    for dynamic masking).

    verify: ``"lazy"`` checks a shard's sha256 when it is first loaded, ``"eager"`` checks every
    shard now, ``"none"`` skips the check. max_cached_shards bounds the shards kept in memory
    (None: keep all that were loaded).
    """

    def __init__(
        self,
        folder: str | Path,
        split: str = "train",
        *,
        verify: str = "lazy",
        max_cached_shards: int | None = None,
    ) -> None:
        if verify not in ("lazy", "eager", "none"):
            raise ValueError("verify must be 'lazy', 'eager' or 'none'")
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        splits = self.manifest.get("splits", {})
        if split not in splits:
            raise InputError(
                self.folder / MANIFEST, None, f"no split {split!r} (has {sorted(splits)})"
            )
        self.split = split
        self.shards = [ShardInfo(**s) for s in splits[split]["shards"]]
        self.settings: dict[str, Any] = self.manifest["settings"]
        try:
            self.prepared_with = PrepareSettings.from_record(self.settings)
        except ConfigError as e:
            raise InputError(self.folder / MANIFEST, None, f"settings: {e}") from e
        self.dynamic_masking = self.prepared_with.dynamic_masking
        self.pad_token_id = int(self.manifest["vocab"]["pad_token_id"])
        self._verify = verify != "none"
        self._starts = [0]
        for s in self.shards:
            self._starts.append(self._starts[-1] + s.num_instances)
        self._cache: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._max_cached = max_cached_shards
        if verify == "eager":
            for k in range(len(self.shards)):
                self._shard(k)

    def __len__(self) -> int:
        return self._starts[-1]

    @property
    def vocab_path(self) -> Path:
        return self.folder / "vocab.txt"

    def masking_spec(self) -> MaskingSpec:
        """The masking settings this data was prepared with (for the dynamic-masking collator)."""
        return MaskingSpec.from_vocab_file(self.vocab_path, **asdict(self.prepared_with.masking))

    def next_sentence_labels(self) -> np.ndarray:
        """Every instance's ``next_sentence_label`` (0 = actual next), read from the shard
        arrays without building the instances."""
        parts = [self._shard(k)["next_sentence_label"] for k in range(len(self.shards))]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    def shard_ranges(self) -> list[range]:
        """Instance index range of each shard (for shard-local shuffling)."""
        return [range(a, b) for a, b in zip(self._starts[:-1], self._starts[1:])]

    def _shard(self, k: int) -> dict[str, np.ndarray]:
        if k in self._cache:
            self._cache.move_to_end(k)
            return self._cache[k]
        info = self.shards[k]
        arrays = load_shard(self.folder / info.file, info.sha256 if self._verify else None)
        if len(arrays["num_segment_a"]) != info.num_instances:
            raise InputError(self.folder / info.file, None, "instance count differs from manifest")
        self._cache[k] = arrays
        if self._max_cached is not None:
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
        return arrays

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"instance {i} out of range (dataset has {len(self)})")
        k = bisect.bisect_right(self._starts, i) - 1
        a = self._shard(k)
        j = i - self._starts[k]
        ids = a["input_ids"][a["offsets"][j] : a["offsets"][j + 1]].astype(np.int64)
        types = np.ones(len(ids), dtype=np.int64)
        types[: a["num_segment_a"][j]] = 0
        m0, m1 = a["masked_offsets"][j], a["masked_offsets"][j + 1]
        return {
            "input_ids": ids,
            "token_type_ids": types,
            "masked_positions": a["masked_positions"][m0:m1].astype(np.int64),
            "masked_labels": a["masked_labels"][m0:m1].astype(np.int64),
            "next_sentence_label": int(a["next_sentence_label"][j]),
            "index": i,
        }


class ActualNextView:
    """The instances of a dataset whose B segment is the actual next text (``next_sentence_label``
    0): pre-training without NSP on contiguous text only. Indexes like a dataset; an item keeps
    its original ``index`` (the key of its dynamic masks) and the source's collate settings."""

    def __init__(self, dataset: PretrainingDataset) -> None:
        self.source = dataset
        self.indices = np.flatnonzero(dataset.next_sentence_labels() == 0)
        self.pad_token_id = dataset.pad_token_id
        self.dynamic_masking = dataset.dynamic_masking
        self.manifest = dataset.manifest

    def masking_spec(self) -> MaskingSpec:
        return self.source.masking_spec()

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.source[int(self.indices[i])]
