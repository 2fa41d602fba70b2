"""Pre-tokenized inputs of the Embedder (:class:`TokenIds`): the model's input as it is, one
window, no special tokens added; checked before any forward pass."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bertkit.inference import Embedder, TokenIds
from bertkit.inference.token_ids import TokenIdsError
from support.tiny_mlm import tiny_mlm


@pytest.fixture(scope="module")
def embedder(tmp_path_factory) -> Embedder:
    """The tiny masked LM's encoder: 18 ids, 32 positions."""
    e = Embedder.load(tiny_mlm(tmp_path_factory.mktemp("tiny")), device="cpu", precision="fp32")
    e.show_progress = False
    return e


def test_the_ids_of_a_text_embed_as_the_text(embedder: Embedder) -> None:
    text = "the cat sat on the mat"
    ids = embedder.tokenizer.encode(text).input_ids
    assert ids == [2, 5, 6, 8, 9, 5, 10, 3]  # [CLS] the cat sat on the mat [SEP]
    want = embedder([text, "a dog ran"])
    np.testing.assert_array_equal(embedder([TokenIds(ids), "a dog ran"]), want)
    # as they are: without [CLS]/[SEP] the model reads other tokens (none are put back)
    windowed = embedder.window(embedder.encode([TokenIds(ids[1:-1])]))
    assert [w.input_ids for w in windowed.inputs] == [ids[1:-1]]
    assert windowed.inputs[0].token_type_ids == [0] * 6 and windowed.tokens == 6
    assert np.abs(embedder([TokenIds(ids[1:-1])]) - want[:1]).max() > 1e-3


def test_long_ids_are_one_window_cut_or_refused(embedder: Embedder) -> None:
    long = TokenIds([2, *[5, 6] * 20, 3])  # 42 ids, over the 32 positions
    windowed = embedder.window(embedder.encode(["the cat", long]), truncate=True)
    assert windowed.inputs[1].input_ids == list(long.input_ids[:32])  # no [SEP] put back
    assert (windowed.counts.windows, windowed.counts.truncated) == (2, 1)
    with pytest.raises(TokenIdsError, match="42 token ids, more than the model's 32") as e:
        embedder.window(embedder.encode(["the cat", long]))  # a text that long gets windows
    assert (e.value.index, e.value.too_long) == (1, True)


@pytest.mark.parametrize(
    ("ids", "message"),
    [([], "an empty list of token ids"), ([2, 18, 3], "token id 18 is outside the vocabulary (0..17)"),
     ([-1], "token id -1 is outside")],
)  # fmt: skip
def test_bad_ids_name_the_input(embedder: Embedder, ids: list[int], message: str) -> None:
    with pytest.raises(TokenIdsError, match=re.escape(message)) as e:
        embedder.encode(["the cat", "a dog", TokenIds(ids)])
    assert (e.value.index, e.value.too_long) == (2, False)
