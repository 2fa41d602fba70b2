"""What decides a ``prepare-pretraining`` output: :class:`PrepareSettings` (the flags, recorded in
the manifest's ``settings``), read by the run (:mod:`bertkit.data.prepare`) and by each file's
worker (:mod:`bertkit.data.prepare_files`)."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.data.corpus import CorpusOptions
from bertkit.data.masking import MaskingSpec, check_mask_ratios
from bertkit.data.pretraining import InstanceConfig
from bertkit.errors import ConfigError


@dataclass(frozen=True)
class PrepareSettings:
    """Everything that decides the output (recorded in the manifest's ``settings``).

    The instance, masking and corpus fields take their defaults from :class:`InstanceConfig`,
    :class:`MaskingSpec` and :class:`CorpusOptions`, their homes (the manifest and the flags keep
    this flat layout)."""

    max_seq_length: int = InstanceConfig.max_seq_length
    """Tokens per instance, [CLS] and [SEP]s included."""
    short_seq_prob: float = InstanceConfig.short_seq_prob
    """Probability of a shorter target length (google-research/bert's 0.1)."""
    dupe_factor: int = InstanceConfig.dupe_factor
    """Uses of each document, with fresh masks each time."""
    masked_lm_prob: float = MaskingSpec.masked_lm_prob
    """Fraction of tokens masked."""
    max_predictions_per_seq: int = MaskingSpec.max_predictions_per_seq
    """At most this many masked tokens per instance."""
    whole_word_mask: bool = MaskingSpec.whole_word_mask
    """Mask all pieces of a word together."""
    split_special_tokens: bool = False
    """Literal [CLS], [SEP], [MASK] ... in the corpus are text, not special tokens."""
    mask_ratios: tuple[float, float, float] = MaskingSpec.mask_ratios
    """Of the masked positions: shares made [MASK], kept, replaced by a random id (sum 1)."""
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
    format: str = CorpusOptions.format
    """Corpus format (auto: detected per file)."""
    text_field: str = CorpusOptions.text_field
    """JSONL field holding the text."""
    encoding_errors: str = CorpusOptions.encoding_errors
    """strict: invalid UTF-8 is an error naming file and line; replace: U+FFFD."""
    buffer_docs: int = InstanceConfig.buffer_docs
    """Documents per chunk (memory bound)."""
    buffer_tokens: int = InstanceConfig.buffer_tokens
    """Tokens per chunk (memory bound)."""
    balanced_next: bool = InstanceConfig.balanced_next
    """Single-sentence chunks get an actual-next B half the time (google-research/bert makes them
    all random-next, which skews short instances' NSP labels; see ``InstanceConfig``)."""

    def __post_init__(self) -> None:
        """Check every value up front, so workers never fail on a setting (ConfigError)."""
        problems = []
        if not 0.0 <= self.holdout_fraction < 1.0:
            problems.append("holdout fraction must be in [0, 1)")
        if self.shard_size < 1:
            problems.append("shard size must be >= 1")
        if not 0.0 < self.masked_lm_prob < 1.0:
            problems.append("masked_lm_prob must be in (0, 1)")
        if self.max_predictions_per_seq < 1:
            problems.append("max_predictions_per_seq must be >= 1")
        try:
            object.__setattr__(self, "mask_ratios", check_mask_ratios(self.mask_ratios))
        except ValueError as e:
            problems.append(str(e))
        try:
            self.instance_config()
            CorpusOptions(self.format, self.text_field, self.encoding_errors)
        except ValueError as e:
            problems.append(str(e))
        if problems:
            raise ConfigError("; ".join(problems))

    def instance_config(self) -> InstanceConfig:
        return InstanceConfig(
            self.max_seq_length,
            self.short_seq_prob,
            self.dupe_factor,
            self.buffer_docs,
            self.buffer_tokens,
            balanced_next=self.balanced_next,
        )
