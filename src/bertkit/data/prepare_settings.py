"""What decides a ``prepare-pretraining`` output: :class:`PrepareSettings` (the flags, recorded in
the manifest's ``settings``), read by the run (:mod:`bertkit.data.prepare`) and by each file's
worker (:mod:`bertkit.data.prepare_files`).

The settings are composed of their homes' dataclasses (:class:`InstanceConfig`,
:class:`MaskingSettings`, :class:`CorpusOptions`), each option defined there once. The manifest
and the command line keep one flat layout, the *record*: ``{field name: value}`` with no
``instance.`` / ``masking.`` / ``corpus.`` prefixes (:meth:`PrepareSettings.to_record`,
:meth:`PrepareSettings.from_record`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bertkit.data.corpus import CorpusOptions
from bertkit.data.masking import MaskingSettings
from bertkit.data.pretraining import InstanceConfig
from bertkit.errors import ConfigError

PARTS: dict[str, type] = {
    "instance": InstanceConfig,
    "masking": MaskingSettings,
    "corpus": CorpusOptions,
}
"""The fields of :class:`PrepareSettings` that hold another dataclass, and its type."""

RECORD = (
    "instance.max_seq_length",
    "instance.short_seq_prob",
    "instance.dupe_factor",
    "masking.masked_lm_prob",
    "masking.max_predictions_per_seq",
    "masking.whole_word_mask",
    "split_special_tokens",
    "masking.mask_ratios",
    "dynamic_masking",
    "do_lower_case",
    "seed",
    "shard_size",
    "holdout_fraction",
    "corpus.format",
    "corpus.text_field",
    "corpus.encoding_errors",
    "instance.buffer_docs",
    "instance.buffer_tokens",
    "instance.balanced_next",
    "piece_mib",
)
"""The keys of the record, always written, in this order: the flat layout manifests have had
since before the settings were composed (prepared data folders, benchmarks and resumed runs read
them). Each key is the last part of its path."""


@dataclass(frozen=True)
class PrepareSettings:
    """Everything that decides the output (recorded in the manifest's ``settings``)."""

    instance: InstanceConfig = field(default_factory=InstanceConfig)
    """How documents become instances: length, pairs, copies, chunk bounds."""
    masking: MaskingSettings = field(default_factory=MaskingSettings)
    """How instances are masked (when stored masked, or by the collator with dynamic masking)."""
    corpus: CorpusOptions = field(default_factory=CorpusOptions)
    """How the corpus files are read."""
    split_special_tokens: bool = False
    """Literal [CLS], [SEP], [MASK] ... in the corpus are text, not special tokens."""
    dynamic_masking: bool = False
    """Store unmasked instances; the collator masks them again each epoch."""
    do_lower_case: bool = True
    """Lower-case and strip accents (uncased BERT)."""
    seed: int = 12345
    """Seed of the document order, pairing and masks."""
    shard_size: int = 10_000
    """Instances per shard."""
    holdout_fraction: float = 0.0
    """Fraction of documents put in an 'eval' split."""
    piece_mib: float = 256.0
    """Uncompressed text files larger than this (MiB) are cut at document boundaries into
    pieces of about this size, each prepared by its own worker with its own RNG."""

    def __post_init__(self) -> None:
        """Check this class's own values (the parts check theirs), every problem in one
        ConfigError, so workers never fail on a setting."""
        problems = []
        if not 0.0 <= self.holdout_fraction < 1.0:
            problems.append("holdout fraction must be in [0, 1)")
        if self.shard_size < 1:
            problems.append("shard size must be >= 1")
        if not self.piece_mib > 0:
            problems.append("piece size must be > 0 MiB")
        for name, part in PARTS.items():
            if not isinstance(getattr(self, name), part):
                problems.append(f"{name} must be a {part.__name__}")
        if problems:
            raise ConfigError("; ".join(problems))

    def to_record(self) -> dict[str, Any]:
        """The flat record: the :data:`RECORD` keys in their order, then any other field of a
        part that differs from its default (``carry_docs``, which no flag sets)."""
        record = {_key(path): _value(self, path) for path in RECORD}
        for path, default in _EXTRA.items():
            if (value := _value(self, path)) != default:
                record[_key(path)] = value
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PrepareSettings:
        """The settings of a flat record (a manifest's ``settings``, or the flags). A key left out
        takes its default (a manifest written before the option existed); an unknown key and
        every invalid value are reported together in one ConfigError."""
        problems = []
        unknown = sorted(set(record) - set(_PATHS))
        if unknown:
            problems.append(f"unknown settings {', '.join(unknown)}")
        parts = {}
        for name in ("masking", "instance", "corpus"):  # the order their problems are told
            part = PARTS[name]
            given = {k: record[k] for k in _fields(part) if k in record}
            try:
                parts[name] = part(**given)
            except ValueError as e:
                problems.append(str(e))
                parts[name] = part()  # a stand-in, so that the own fields are still checked
        own = {k: record[k] for k in _PATHS if "." not in _PATHS[k] and k in record}
        try:
            settings = cls(**parts, **own)
        except ConfigError as e:
            problems.insert(0, str(e))
        if problems:
            raise ConfigError("; ".join(problems))
        return settings


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _key(path: str) -> str:
    return path.rpartition(".")[2]


def _value(settings: PrepareSettings, path: str) -> Any:
    value: Any = settings
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _paths() -> dict[str, str]:
    """``{record key: path}`` for every option, parts first (keys are unique)."""
    out = {}
    for f in dataclasses.fields(PrepareSettings):
        names = [f"{f.name}.{n}" for n in _fields(PARTS[f.name])] if f.name in PARTS else [f.name]
        for path in names:
            if _key(path) in out:
                raise TypeError(
                    f"{out[_key(path)]} and {path} would both be recorded as {_key(path)}"
                )
            out[_key(path)] = path
    return out


_PATHS = _paths()
_EXTRA = {path: _value(PrepareSettings(), path) for path in _PATHS.values() if path not in RECORD}
"""The options written only when they differ from their default, with that default."""
