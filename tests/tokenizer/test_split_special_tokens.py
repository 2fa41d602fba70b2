"""``split_special_tokens``: literal special tokens in user text are text (transformers' option of
the same name; Google's original tokenizer's behaviour), or special (the default, as transformers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bertkit.tokenizer import BertTokenizer

VOCAB = Path(__file__).resolve().parents[1] / "fixtures" / "tok_vocab.txt"
TEXTS = ["hello [SEP] world", "[CLS][MASK] x [PAD]", "a [UNK] b", "no specials here", "[sep] lower"]


def test_both_modes_match_transformers() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    for split in (False, True):
        ours = BertTokenizer(VOCAB, split_special_tokens=split)
        ref = transformers.BertTokenizerFast(str(VOCAB), split_special_tokens=split)
        for text in TEXTS:
            assert ours(text)["input_ids"] == ref(text)["input_ids"], (split, text)
            assert (
                ours(text, return_offsets_mapping=True)["offset_mapping"]
                == ref(text, return_offsets_mapping=True)["offset_mapping"]
            ), (split, text)


def test_split_mode_never_yields_a_special_id_from_text() -> None:
    default, split = BertTokenizer(VOCAB), BertTokenizer(VOCAB, split_special_tokens=True)
    ids = default.encode("a [SEP] b").input_ids
    assert ids.count(default.sep_token_id) == 2  # injected: the text's [SEP] plus the final one
    ids = split.encode("a [SEP] b").input_ids
    assert ids.count(split.sep_token_id) == 1 and ids[-1] == split.sep_token_id
    for text in TEXTS:
        inner = split.encode(text).input_ids[1:-1]
        assert not set(inner) & split.all_special_ids - {split.unk_token_id}


def test_from_pretrained_reads_the_option(tmp_path: Path) -> None:
    import json

    (tmp_path / "vocab.txt").write_bytes(VOCAB.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"split_special_tokens": True}))
    assert BertTokenizer.from_pretrained(tmp_path).split_special_tokens
    assert not BertTokenizer.from_pretrained(
        tmp_path, split_special_tokens=False
    ).split_special_tokens
