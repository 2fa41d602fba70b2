"""``PrepareSettings``: composed of its parts' dataclasses, recorded flat in the manifest with the
keys, values and order manifests have always had (prepared folders, benchmarks and resumed runs
read them), and read back from that record with every problem in one error."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bertkit.data.corpus import FORMATS, CorpusOptions
from bertkit.data.masking import MaskingSettings, MaskingSpec
from bertkit.data.prepare import PrepareSettings, prepare_pretraining
from bertkit.data.pretraining import InstanceConfig
from bertkit.data.shards import PretrainingDataset
from bertkit.errors import ConfigError

FIX = Path(__file__).resolve().parents[1] / "fixtures"

# The manifest's "settings" of the default settings, as written before they were composed.
DEFAULT_RECORD = (
    '{"max_seq_length": 128, "short_seq_prob": 0.1, "dupe_factor": 10, "masked_lm_prob": 0.15, '
    '"max_predictions_per_seq": 20, "whole_word_mask": false, "split_special_tokens": false, '
    '"mask_ratios": [0.8, 0.1, 0.1], "dynamic_masking": false, "do_lower_case": true, '
    '"seed": 12345, "shard_size": 10000, "holdout_fraction": 0.0, "format": "auto", '
    '"text_field": "text", "encoding_errors": "strict", "buffer_docs": 1000, '
    '"buffer_tokens": 250000, "balanced_next": false, "piece_mib": 256.0}'
)

EVERY_OPTION_CHANGED = PrepareSettings(
    instance=InstanceConfig(
        max_seq_length=32,
        short_seq_prob=0.2,
        dupe_factor=3,
        buffer_docs=7,
        buffer_tokens=900,
        balanced_next=True,
    ),
    masking=MaskingSettings(
        masked_lm_prob=0.2, max_predictions_per_seq=5, whole_word_mask=True, mask_ratios=(1, 0, 0)
    ),
    corpus=CorpusOptions(format="jsonl", text_field="body", encoding_errors="replace"),
    split_special_tokens=True,
    dynamic_masking=True,
    do_lower_case=False,
    seed=7,
    shard_size=40,
    holdout_fraction=0.25,
    piece_mib=64.0,
)


def test_the_default_record_has_todays_keys_values_and_order() -> None:
    assert json.dumps(PrepareSettings().to_record()) == DEFAULT_RECORD


def test_the_record_reads_back_to_the_same_settings() -> None:
    for settings in (PrepareSettings(), EVERY_OPTION_CHANGED):
        record = json.loads(json.dumps(settings.to_record()))  # as the manifest holds it
        assert PrepareSettings.from_record(record) == settings
    assert EVERY_OPTION_CHANGED.masking.mask_ratios == (1.0, 0.0, 0.0)  # floats, as recorded
    assert list(EVERY_OPTION_CHANGED.to_record()) == list(json.loads(DEFAULT_RECORD))


def test_an_option_no_flag_sets_is_recorded_after_the_others_only_when_changed() -> None:
    carried = PrepareSettings(instance=InstanceConfig(carry_docs=8))
    record = carried.to_record()
    assert list(record) == [*json.loads(DEFAULT_RECORD), "carry_docs"] and record["carry_docs"] == 8
    assert PrepareSettings.from_record(record) == carried


def test_a_key_left_out_takes_its_default() -> None:
    """A manifest written before mask_ratios, split_special_tokens and balanced_next existed."""
    old = json.loads(DEFAULT_RECORD)
    for key in ("mask_ratios", "split_special_tokens", "balanced_next"):
        del old[key]
    old["max_seq_length"] = 64
    assert PrepareSettings.from_record(old) == PrepareSettings(
        instance=InstanceConfig(max_seq_length=64)
    )
    assert PrepareSettings.from_record({}) == PrepareSettings()


def test_every_problem_is_one_config_error() -> None:
    record = json.loads(DEFAULT_RECORD) | {
        "holdout_fraction": 1.0,
        "shard_size": 0,
        "piece_mib": 0,
        "masked_lm_prob": 0.0,
        "mask_ratios": [0.5, 0.1, 0.1],
        "max_seq_length": 3,
        "short_seq_prob": 2.0,
        "format": "xml",
        "colour": "red",
    }
    with pytest.raises(ConfigError) as e:
        PrepareSettings.from_record(record)
    assert str(e.value) == (
        "holdout fraction must be in [0, 1); shard size must be >= 1; piece size must be > 0 MiB; "
        "unknown settings colour; "
        "masked_lm_prob must be in (0, 1); mask ratios must sum to 1, got [0.5, 0.1, 0.1] "
        "(sum 0.7); max_seq_length must be >= 5; short_seq_prob must be in [0, 1]; "
        f"format must be one of {FORMATS}, got 'xml'"
    )


def test_the_parts_check_their_own_values() -> None:
    with pytest.raises(ValueError, match=r"^max_predictions_per_seq must be >= 1; mask ratios"):
        MaskingSettings(max_predictions_per_seq=0, mask_ratios=(1, 1, 1))
    with pytest.raises(
        ValueError, match=r"^max_seq_length must be >= 5; buffer_docs must be >= 1, got 0$"
    ):
        InstanceConfig(max_seq_length=4, buffer_docs=0)
    with pytest.raises(ValueError, match=r"^format must be one of .*; encoding_errors must be"):
        CorpusOptions(format="xml", encoding_errors="ignore")
    with pytest.raises(ConfigError, match=r"^shard size must be >= 1; masking must be a Masking"):
        PrepareSettings(masking=0.15, shard_size=0)  # type: ignore[arg-type]
    spec = MaskingSpec.from_tokens(["[CLS]", "[SEP]", "[MASK]", "a"], **vars(MaskingSettings()))
    assert MaskingSettings(**vars(MaskingSettings())) == MaskingSettings()
    assert (spec.vocab_size, spec.mask_ratios) == (4, (0.8, 0.1, 0.1))


def test_a_prepared_folder_records_the_settings_and_reads_them_back(tmp_path: Path) -> None:
    settings = replace(
        EVERY_OPTION_CHANGED,
        corpus=CorpusOptions(format="auto"),
        instance=InstanceConfig(max_seq_length=32, dupe_factor=2),
        holdout_fraction=0.0,
    )
    out = tmp_path / "data"
    prepare_pretraining(
        [FIX / "pt_bert.txt"], FIX / "pt_vocab.txt", out, settings, show_progress=False
    )
    text = (out / "manifest.json").read_text()
    assert list(json.loads(text)["settings"].items()) == list(
        json.loads(json.dumps(settings.to_record())).items()
    )
    ds = PretrainingDataset(out)
    assert ds.prepared_with == settings and ds.dynamic_masking
    assert ds.masking_spec().mask_ratios == (1.0, 0.0, 0.0) and ds.masking_spec().whole_word_mask
