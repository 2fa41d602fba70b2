"""Fixtures of the model tests: a tiny cross-encoder folder for the rerank group losses."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def cross_encoder_folder(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny encoder under a seeded one-output head, saved by sentence-transformers."""
    st = pytest.importorskip("sentence_transformers")
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ce")
    st.CrossEncoder(str(tiny_model), num_labels=1, device="cpu").save(str(folder))
    return folder
