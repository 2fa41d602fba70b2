"""bertkit.inference.sparse_static (an inference-free query's vector: one learned weight per
distinct token, no transformer) on a hand-made vocabulary: exact indices and values, the cut at
model_max_length and its count, and the folder checks of load."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from bertkit.errors import CheckpointError
from bertkit.inference.sparse_static import WEIGHTS, StaticSparseEmbedder
from bertkit.tokenizer import BertTokenizer

VOCAB = Path(__file__).parents[1] / "fixtures" / "tok_vocab.txt"


def _folder(root: Path, weight: np.ndarray, max_length: int | None = 4) -> Path:
    BertTokenizer(VOCAB, model_max_length=max_length).save_pretrained(root)
    save_file({"weight": weight}, str(root / WEIGHTS))
    return root


def _weights(tokenizer: BertTokenizer) -> tuple[np.ndarray, dict[str, int]]:
    ids = {t: tokenizer.vocab.token_to_id[t] for t in ("hello", "world", "hi", "cafe", "lowest")}
    weight = np.zeros(len(tokenizer), np.float32)
    weight[[ids["hello"], ids["world"], ids["hi"], ids["cafe"]]] = [0.8, 1.0, -0.5, 0.25]
    return weight, ids  # "lowest": weight 0


def test_each_distinct_token_gives_its_weight_once_zeros_left_out(tmp_path: Path) -> None:
    tokenizer = BertTokenizer(VOCAB)
    weight, ids = _weights(tokenizer)
    model = StaticSparseEmbedder.load(_folder(tmp_path, weight, None))
    assert model.max_length is None  # no model_max_length: nothing is cut
    (v, w), counts = model.embed(["hello lowest world hello hi", "lowest"])
    want = sorted((ids[t], weight[ids[t]]) for t in ("hello", "world", "hi"))
    assert v.indices.tolist() == [i for i, _ in want]  # ascending, "hello" once, "lowest" out
    assert v.values.tolist() == [x for _, x in want]  # 1.0 and the negative weight kept
    assert w.indices.tolist() == [] and counts.truncated == 0


def test_a_text_of_exactly_model_max_length_tokens_is_not_cut(tmp_path: Path) -> None:
    tokenizer = BertTokenizer(VOCAB)
    weight, ids = _weights(tokenizer)
    model = StaticSparseEmbedder.load(_folder(tmp_path, weight))
    assert model.max_length == 4
    texts = ["hello world hi cafe", "hello world hi hello cafe", "hi"]
    (four, five, _), counts = model.embed(texts)
    assert four.indices.tolist() == sorted(ids[t] for t in ("hello", "world", "hi", "cafe"))
    assert five.indices.tolist() == sorted(ids[t] for t in ("hello", "world", "hi"))  # 5th cut
    assert counts.truncated == 1 and counts.inputs == 3
    _, exact = model.embed(texts[:1])
    assert exact.truncated == 0


def test_load_wants_one_weight_per_vocabulary_id(tmp_path: Path) -> None:
    tokenizer = BertTokenizer(VOCAB)
    weight, _ = _weights(tokenizer)
    assert StaticSparseEmbedder.load(_folder(tmp_path / "ok", weight)).vocab_size == len(weight)
    for bad in (weight[:-1], weight.reshape(4, -1)):
        folder = _folder(tmp_path / f"bad{bad.ndim}", bad)
        with pytest.raises(CheckpointError, match=r"expected \(92,\): one per vocabulary id"):
            StaticSparseEmbedder.load(folder)
    shutil.copytree(tmp_path / "ok", tmp_path / "none")
    (tmp_path / "none" / WEIGHTS).unlink()
    with pytest.raises(CheckpointError, match=r"no model\.safetensors"):
        StaticSparseEmbedder.load(tmp_path / "none")
