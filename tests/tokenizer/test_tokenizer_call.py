"""``tok(...)`` conventions without transformers installed: shapes, defaults (no padding, no
truncation), the over-the-maximum warning, ``model_max_length`` loading, the Tokenizer protocol.
(Exact parity with BertTokenizerFast: test_tokenizer_call_parity.py.)"""

from __future__ import annotations

import inspect
import json
import logging
import types
import typing
from pathlib import Path

import pytest

from bertkit.errors import ConfigError, InputError
from bertkit.tokenizer import VERY_LARGE_INTEGER, BertTokenizer, Tokenizer, Vocab
from bertkit.tokenizer import protocol as protocol_module

VOCAB = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"
TEN = "one two three four five six seven eight nine ten"
LOGGER = "bertkit.tokenizer.tokenizer"


@pytest.fixture(scope="module")
def tok() -> BertTokenizer:
    return BertTokenizer(VOCAB)


def test_single_is_flat_batch_is_nested(tok: BertTokenizer) -> None:
    assert tok("hello world") == {
        "input_ids": [2, 27, 28, 3],
        "token_type_ids": [0, 0, 0, 0],
        "attention_mask": [1, 1, 1, 1],
    }
    assert tok("hello world", "hi")["token_type_ids"] == [0, 0, 0, 0, 1, 1]
    assert tok(["hello world"])["input_ids"] == [[2, 27, 28, 3]]
    assert tok(["hello world", "hi"])["input_ids"] == [[2, 27, 28, 3], [2, 29, 3]]  # no padding
    # a batch dimension whenever tensors or overflow rows are asked for
    assert tok("hi", return_tensors="np")["input_ids"].shape == (1, 3)
    out = tok(TEN, max_length=5, return_overflowing_tokens=True)
    assert out["overflow_to_sample_mapping"] == [0, 0, 0, 0]
    assert out["input_ids"][0] == [2, 59, 60, 61, 3]


def test_defaults_neither_pad_nor_truncate(caplog: pytest.LogCaptureFixture) -> None:
    long_text = " ".join([TEN] * 300)  # 3,000 words
    tok = BertTokenizer(VOCAB, model_max_length=512)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ids = tok(long_text)["input_ids"]
    assert len(ids) == 3002  # not cut
    assert [r.getMessage() for r in caplog.records] == [
        "Token indices sequence length is longer than the specified maximum sequence length "
        "for this model (3002 > 512). Running this sequence through the model will result in "
        "indexing errors"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert len(tok(long_text)["input_ids"]) == 3002
        assert len(tok(long_text, truncation=True)["input_ids"]) == 512
        assert len(tok([long_text], padding="max_length")["input_ids"][0]) == 3002
        assert tok(["hi"], padding="max_length")["attention_mask"][0] == [1] * 3 + [0] * 509
    assert caplog.records == []  # once per tokenizer
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        BertTokenizer(VOCAB, model_max_length=512)(long_text, verbose=False)
        BertTokenizer(VOCAB)(long_text)  # no model maximum: nothing to warn about
    assert caplog.records == []


def test_no_model_maximum_means_no_limit(tok: BertTokenizer) -> None:
    assert tok.model_max_length == VERY_LARGE_INTEGER == int(1e30)
    assert BertTokenizer(VOCAB, model_max_length=None).model_max_length == VERY_LARGE_INTEGER
    assert tok([TEN], truncation=True)["input_ids"][0] == tok.encode(TEN).input_ids
    assert tok(["hi", TEN], padding="max_length")["input_ids"][0] == [2, 29, 3]  # no padding


def test_argument_errors(tok: BertTokenizer) -> None:
    with pytest.raises(ValueError, match="unknown padding"):
        tok("hi", padding="left")
    with pytest.raises(ValueError, match="unknown truncation"):
        tok("hi", truncation="middle")
    with pytest.raises(TypeError, match="text_pair"):
        tok(["hi"], "a")
    with pytest.raises(TypeError, match="text_pair"):
        tok("hi", ["a"])
    no_pad = BertTokenizer(Vocab(["[UNK]", "[CLS]", "[SEP]", "hi"]))
    assert no_pad(["hi", "hi hi"])["input_ids"] == [[1, 3, 2], [1, 3, 3, 2]]
    with pytest.raises(ValueError, match=r"\[PAD\]"):
        no_pad(["hi", "hi hi"], padding=True)
    with pytest.raises(ConfigError, match="model_max_length"):
        BertTokenizer(VOCAB, model_max_length=-1)
    with pytest.raises(ConfigError, match="model_max_length"):
        BertTokenizer(VOCAB, model_max_length="512")  # type: ignore[arg-type]


def test_from_pretrained_reads_model_max_length(tmp_path: Path) -> None:
    BertTokenizer(VOCAB, model_max_length=128, do_lower_case=False).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == 128
    loaded = BertTokenizer.from_pretrained(tmp_path)
    assert (loaded.model_max_length, loaded.do_lower_case) == (128, False)
    assert BertTokenizer.from_pretrained(tmp_path, model_max_length=64).model_max_length == 64
    # what pre-training writes (training/pretraining.py export_model)
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "model_max_length": 512})
    )
    assert BertTokenizer.from_pretrained(tmp_path).model_max_length == 512
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": None}))
    assert BertTokenizer.from_pretrained(tmp_path).model_max_length == VERY_LARGE_INTEGER
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1e30}))
    assert BertTokenizer.from_pretrained(tmp_path).model_max_length == VERY_LARGE_INTEGER
    for bad in ("512", -3, 5.5, True):
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": bad}))
        with pytest.raises(InputError, match="model_max_length"):
            BertTokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("[]")
    with pytest.raises(InputError, match="JSON object"):
        BertTokenizer.from_pretrained(tmp_path)
    # config.json is not read (as in transformers)
    (tmp_path / "tokenizer_config.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    assert BertTokenizer.from_pretrained(tmp_path).model_max_length == VERY_LARGE_INTEGER


def test_bert_tokenizer_satisfies_the_protocol(tok: BertTokenizer) -> None:
    assert isinstance(tok, Tokenizer)
    assert not isinstance(object(), Tokenizer)
    # every method of the protocol exists on BertTokenizer with compatible parameters
    for name, member in inspect.getmembers(Tokenizer, inspect.isfunction):
        if name.startswith("_") and name != "__len__":
            continue
        ours = inspect.signature(getattr(BertTokenizer, name)).parameters
        # an overloaded member is a stub at runtime: its overloads are registered by name
        named = types.SimpleNamespace(
            __module__=Tokenizer.__module__, __qualname__=f"Tokenizer.{name}"
        )
        variants = typing.get_overloads(named) or [member]  # type: ignore[arg-type]
        for param in (p for v in variants for p in inspect.signature(v).parameters.values()):
            if param.kind is param.VAR_KEYWORD:
                assert any(p.kind is p.VAR_KEYWORD for p in ours.values()), name
                continue
            assert param.name in ours, (name, param.name)
            assert ours[param.name].default == param.default, (name, param.name)
    annotations = inspect.get_annotations(Tokenizer)
    assert set(annotations) <= set(vars(tok)), set(annotations) - set(vars(tok))
    assert protocol_module.Tokenizer is Tokenizer
