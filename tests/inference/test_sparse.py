"""SPLADE vectors (bertkit.inference.sparse) against sentence-transformers' SparseEncoder on tiny
random masked-LM folders: the same non-zero entries and values within 1e-5, for each
SpladePooling setting, read from the folder sentence-transformers saved; windows, overrides and
the errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.errors import CheckpointError, ConfigError
from bertkit.inference.sparse import SparseEmbedder, SparseVector, keep_largest
from bertkit.interop.sentence_folder import splade_spec
from bertkit.model.pooling import SpladeSpec, splade_pool
from bertkit.tasks.windows import WindowConfig
from support.tiny_splade import MAX_SEQ_LENGTH, hf_masked_lm, saved_sparse_encoder, sparse_encoder

# mixed lengths in one batch: 1 to 30 words, the last two longer than MAX_SEQ_LENGTH (12)
TEXTS = [
    "the cat sat on the mat",
    "dog",
    "a big red house by the river , a small blue tree on the road .",
    "the cat ran",
    " ".join(["the big dog ran on the road", "a small cat sat"] * 3),
]


FP32 = {"precision": "fp32", "device": "cpu"}
"""sentence-transformers runs fp32 on the CPU: so do these (not the machine's bf16 choice)."""


def reference(st: object, texts: list[str]) -> np.ndarray:
    """sentence-transformers' vectors, dense (N, V)."""
    return st.encode(texts, convert_to_tensor=True).to_dense().cpu().numpy()  # type: ignore[attr-defined]


def assert_same(got: list[SparseVector], want: np.ndarray) -> float:
    """Same non-zero entries, values within 1e-5; returns the largest difference."""
    worst = 0.0
    for vec, row in zip(got, want, strict=True):
        nz = np.flatnonzero(row)
        assert vec.indices.tolist() == nz.tolist()
        assert vec.indices.dtype == np.int64 and vec.values.dtype == np.float32
        np.testing.assert_allclose(vec.values, row[nz], atol=1e-5, rtol=0)
        worst = max(worst, float(np.abs(vec.values - row[nz]).max(initial=0.0)))
    return worst


def test_splade_pool_worked_example() -> None:
    logits = torch.tensor([[[2.0, -1.0], [0.0, 3.0], [9.0, 9.0]]])  # the last token is padding
    mask = torch.tensor([[1, 1, 0]])
    torch.testing.assert_close(
        splade_pool(logits, mask), torch.tensor([[math.log(3), math.log(4)]])
    )
    torch.testing.assert_close(
        splade_pool(logits, mask, "sum"), torch.tensor([[math.log(3), math.log(4)]])
    )
    both = torch.tensor([[[2.0, 1.0], [1.0, 3.0]]])
    torch.testing.assert_close(
        splade_pool(both, torch.ones(1, 2), "sum"),
        torch.tensor([[math.log(3) + math.log(2), math.log(2) + math.log(4)]]),
    )
    torch.testing.assert_close(
        splade_pool(logits, mask, "max", "log1p_relu"),
        torch.tensor([[math.log1p(math.log(3)), math.log1p(math.log(4))]]),
    )


@pytest.mark.parametrize(
    "pooling",
    [
        {"pooling_strategy": "max", "activation_function": "relu"},
        {"pooling_strategy": "sum", "activation_function": "relu"},
        {"pooling_strategy": "max", "activation_function": "log1p_relu"},
        {"pooling_strategy": "max", "activation_function": "relu", "max_active_dims": 4},
        {
            "pooling_strategy": "sum",
            "activation_function": "log1p_relu",
            "fill_mask_transformer": 1,
        },
    ],
    ids=["max", "sum", "log1p_relu", "max_active_dims", "fill_mask_transformer"],
)
def test_matches_sparse_encoder_folder(tmp_path: Path, pooling: dict) -> None:
    folder, st = saved_sparse_encoder(tmp_path, **pooling)
    fields = {k: v for k, v in pooling.items() if k != "fill_mask_transformer"}
    assert splade_spec(folder) == SpladeSpec(**{"max_active_dims": None, **fields})
    # sentence-transformers cuts at max_seq_length: so does truncate (sum always does)
    model = SparseEmbedder.load(folder, batch_size=3, windows=WindowConfig(truncate=True), **FP32)
    assert model.embedder.max_length == MAX_SEQ_LENGTH  # the folder's, not the 24 positions
    got, counts = model.embed(TEXTS)
    want = reference(st, TEXTS)
    assert_same(got, want)
    assert counts.truncated == 2
    active = [len(v.indices) for v in got]
    assert max(active) <= pooling.get("max_active_dims", len(want[0]))
    assert min(active) > 0 and max(active) < want.shape[1]  # sparse, not empty: a real check
    if pooling["pooling_strategy"] == "sum":  # no windows for sum, whatever was asked
        again, _ = SparseEmbedder.load(folder, windows=WindowConfig(truncate=False), **FP32).embed(
            TEXTS
        )
        assert_same(again, want)


def test_plain_masked_lm_folder_and_overrides(tmp_path: Path) -> None:
    hf = hf_masked_lm(tmp_path / "hf")
    short = [TEXTS[0], TEXTS[1], TEXTS[3]]  # within max_seq_length: no windows, no cut
    model = SparseEmbedder.load(hf, **FP32)
    assert model.spec == SpladeSpec() and model.vocab_size == len(
        (hf / "vocab.txt").read_text().split()
    )
    st_max = sparse_encoder(hf)
    assert_same(model(short), reference(st_max, short))
    # explicit settings win over the folder's SpladePooling (sum there, max asked)
    folder, st_sum = saved_sparse_encoder(tmp_path / "sum", pooling_strategy="sum")
    asked = SparseEmbedder.load(folder, pooling_strategy="max", max_active_dims=3, **FP32)
    assert asked.spec == SpladeSpec("max", "relu", 3)
    want = reference(sparse_encoder(tmp_path / "sum" / "hf", max_active_dims=3), short)
    assert_same(asked(short), want)
    with pytest.raises(AssertionError):  # the folder's own sum differs: the override mattered
        assert_same(asked(short), reference(st_sum, short))


def test_long_text_windows_take_the_max_over_windows(tmp_path: Path) -> None:
    folder, st = saved_sparse_encoder(tmp_path)
    model = SparseEmbedder.load(folder, windows=WindowConfig(doc_stride=4), **FP32)
    long = TEXTS[-1]
    (vec,), counts = model.embed([long])
    assert counts.windowed == 1
    windows = model.embedder.window(model.embedder.encode([long])).inputs
    assert len(windows) > 2
    texts = [" ".join(model.tokenizer.convert_ids_to_tokens(w.input_ids[1:-1])) for w in windows]
    per_window = reference(st, texts)  # each fits: sentence-transformers reads it whole
    assert_same([vec], per_window.max(0, keepdims=True))
    with pytest.raises(AssertionError):  # the first window alone is not it
        assert_same([vec], reference(st, [long]))


def test_tokens_dense_and_keep_largest(tmp_path: Path) -> None:
    model = SparseEmbedder.load(hf_masked_lm(tmp_path / "hf"), **FP32)
    (vec,) = model(["the cat"])
    vocab = (tmp_path / "hf" / "vocab.txt").read_text().split()
    assert vec.tokens(model.tokenizer) == [vocab[i] for i in vec.indices]
    dense = vec.dense(model.vocab_size)
    assert np.flatnonzero(dense).tolist() == vec.indices.tolist()
    top = keep_largest(SparseVector(np.array([1, 4, 7, 9]), np.array([0.5, 0.1, 0.9, 0.3])), 2)
    assert top.indices.tolist() == [1, 7] and top.values.tolist() == [0.5, 0.9]


def test_errors_name_what_was_expected(tmp_path: Path) -> None:
    from transformers import BertConfig, BertModel

    hf = hf_masked_lm(tmp_path / "hf")
    encoder_only = tmp_path / "encoder"
    BertModel(BertConfig.from_pretrained(hf)).save_pretrained(encoder_only)
    (encoder_only / "vocab.txt").write_text((hf / "vocab.txt").read_text())
    with pytest.raises(CheckpointError, match="masked-LM head"):
        SparseEmbedder.load(encoder_only)
    with pytest.raises(ConfigError, match="one of max, sum"):
        SpladeSpec("mean")
    with pytest.raises(ConfigError, match="relu, log1p_relu"):
        SpladeSpec(activation_function="gelu")
    with pytest.raises(ConfigError, match="positive integer"):
        SpladeSpec(max_active_dims=0)
    folder, _ = saved_sparse_encoder(tmp_path / "bad", pooling_strategy="max")
    cfg = folder / "1_SpladePooling" / "config.json"
    cfg.write_text(json.dumps({"pooling_strategy": "mean"}))
    with pytest.raises(CheckpointError, match="pooling strategy must be one of max, sum"):
        SparseEmbedder.load(folder)
    cfg.write_text("{not json")
    with pytest.raises(CheckpointError, match="unreadable"):
        splade_spec(folder)
