"""Loading for inference (inference/loading.py and the classes over it): the warning about
weights a head leaves missing or unused, the bounds of an embedder's max length, fill-mask's
default top-k, and the default depth of reranking."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.errors import ConfigError
from bertkit.inference import Embedder, FillMasker
from bertkit.inference.loading import load_for_inference
from bertkit.interop import save_pretrained
from bertkit.model import BertForMaskedLM, BertModel
from bertkit.tokenizer import BertTokenizer

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "."]
LOGGER = "bertkit.inference.loading"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A masked-LM folder and an encoder-only folder (no head weights), 16 positions."""
    root = tmp_path_factory.mktemp("loading")
    (root / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    )
    tok = BertTokenizer(root / "vocab.txt")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    save_pretrained(BertForMaskedLM(config), root / "mlm", tok)
    save_pretrained(BertModel(config), root / "encoder", tok)
    return {"mlm": root / "mlm", "encoder": root / "encoder"}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_head_with_missing_weights_is_warned_and_a_complete_one_is_not(
    folders: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    load_for_inference(folders["mlm"], "BertForMaskedLM", device="cpu", precision="fp32")
    assert warnings_of(caplog) == []  # every weight used, none missing
    Embedder.load(folders["mlm"], device="cpu", precision="fp32")
    assert warnings_of(caplog) == []  # the MLM head unused on purpose: an encoder read from it
    load_for_inference(
        folders["encoder"], "BertForSequenceClassification", device="cpu", precision="fp32"
    )
    (message,) = warnings_of(caplog)  # the classifier is missing (nothing unused)
    assert "BertForSequenceClassification" in message and "classifier.weight" in message


def test_an_embedders_max_length_is_bounded_by_2_and_the_positions(
    folders: dict[str, Path],
) -> None:
    for ok in (2, 16):
        assert Embedder.load(folders["mlm"], max_length=ok, device="cpu").max_length == ok
    for bad in (1, 17):
        with pytest.raises(ConfigError, match=f"max length {bad} is outside 2..16"):
            Embedder.load(folders["mlm"], max_length=bad, device="cpu")


def test_fill_mask_gives_five_candidates_by_default(folders: dict[str, Path]) -> None:
    masker = FillMasker.load(folders["mlm"], device="cpu", precision="fp32")
    ((candidates,),) = masker(["the cat sat on the [MASK] ."])
    assert len(candidates) == 5


def test_the_cli_reranks_the_documented_depth_by_default() -> None:
    from bertkit.cli.main import build_parser
    from bertkit.cli.rerank_options import rerank_top_k

    args = build_parser().parse_args(["evaluate", "--model", "m", "--data", "d"])
    assert rerank_top_k(args) == 50  # docs/search.md: "--rerank-top-k 50"
