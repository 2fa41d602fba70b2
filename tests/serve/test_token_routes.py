"""TEI's per-token routes against transformers: /embed_all (MiniLM's last hidden states),
/embed_sparse (SPLADE from a masked-LM head), /decode; the timing headers; POST / with several
models served."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from .conftest import serve

TEXTS = ["the movie was good", "a bad plot , a great cat"]


def test_embed_all_is_the_last_hidden_state_of_every_token(minilm: Path) -> None:
    transformers = pytest.importorskip("transformers")
    lines = ["A man is playing a guitar.", "hello"]
    tok = transformers.AutoTokenizer.from_pretrained(str(minilm))
    ref = transformers.AutoModel.from_pretrained(str(minilm)).eval()
    with serve(models=[str(minilm)]) as client:
        got = client.post("/embed_all", json={"inputs": lines})
        assert got.status_code == 200, got.text
        assert got.headers["x-compute-type"] == "cpu"
        assert int(got.headers["x-total-time"]) >= int(got.headers["x-compute-time"]) >= 0
        for text, vectors in zip(lines, got.json(), strict=True):
            enc = tok(text, return_tensors="pt")
            with torch.no_grad():
                want = ref(**enc).last_hidden_state[0].numpy()
            assert np.asarray(vectors).shape == want.shape  # [CLS] ... [SEP], 384 each
            np.testing.assert_allclose(np.asarray(vectors), want, atol=2e-5)
        one = client.post("/embed_all", json={"inputs": "hello"}).json()
        assert len(one) == 1 and len(one[0]) == 3  # a list per input, for one input too
        long = " ".join(["word"] * 300)
        r = client.post("/embed_all", json={"inputs": long})
        assert r.status_code == 413 and "truncate" in r.json()["error"]
        cut = client.post("/embed_all", json={"inputs": long, "truncate": True}).json()
        assert len(cut[0]) == 256  # MiniLM's max_seq_length
        r = client.post("/embed_sparse", json={"inputs": "x"})
        assert r.status_code == 404 and "embed_sparse" in r.json()["error"]  # no masked-LM head


def test_embed_sparse_is_splade_of_the_masked_lm_head(tiny_mlm: Path) -> None:
    transformers = pytest.importorskip("transformers")
    ref = transformers.BertForMaskedLM.from_pretrained(str(tiny_mlm)).eval()
    with serve(models=[str(tiny_mlm)]) as client:
        got = client.post("/embed_sparse", json={"inputs": TEXTS})
        assert got.status_code == 200, got.text
        ids = client.post("/tokenize", json={"inputs": TEXTS}).json()
        for sparse, pieces in zip(got.json(), ids, strict=True):
            with torch.no_grad():
                logits = ref(torch.tensor([[p["id"] for p in pieces]])).logits[0]
            want = torch.log1p(torch.relu(logits)).amax(0).numpy()
            index = [e["index"] for e in sparse]
            assert index == sorted(index) and index == np.flatnonzero(want).tolist()
            np.testing.assert_allclose([e["value"] for e in sparse], want[index], atol=1e-5)


def test_decode_reads_ids_back(tiny_mlm: Path) -> None:
    with serve(models=[str(tiny_mlm)]) as client:
        pieces = client.post("/tokenize", json={"inputs": "the cat sat"}).json()[0]
        ids = [p["id"] for p in pieces]
        assert client.post("/decode", json={"ids": ids}).json() == ["the cat sat"]
        both = client.post(
            "/decode", json={"ids": [ids, ids[1:3]], "skip_special_tokens": False}
        ).json()
        assert both == ["[CLS] the cat sat [SEP]", "the cat"]
        r = client.post("/decode", json={"ids": [10_000]})
        assert r.status_code == 422 and "outside the vocabulary" in r.json()["error"]


def test_decode_on_a_task_model(tiny_classifier: Path) -> None:
    """A fine-tuned model decodes what it tokenizes (TEI's /decode answers for its classifiers
    and rerankers too; it was a 404, no served model could decode)."""
    with serve(models=[f"sst={tiny_classifier}"]) as client:
        ids = [p["id"] for p in client.post("/tokenize", json={"inputs": "the cat sat"}).json()[0]]
        r = client.post("/decode", json={"ids": ids, "model": "sst"})
        assert r.status_code == 200 and r.json() == ["the cat sat"], r.text


def test_base_url_with_several_models_needs_the_model_field(
    tiny_mlm: Path, tiny_classifier: Path
) -> None:
    with serve(models=[f"enc={tiny_mlm}", f"sst={tiny_classifier}"]) as client:
        r = client.post("/", json={"inputs": "the movie was good"})
        assert r.status_code == 400 and "enc, sst" in r.json()["error"]
        assert (
            client.post("/", json={"inputs": "the movie was good", "model": "nope"}).status_code
            == 400
        )
        named = client.post("/", json={"inputs": "the movie was good", "model": "sst"})
        assert named.status_code == 200 and named.json()[0][0]["label"] in ("0", "1")
        vec = client.post("/", json={"inputs": "the movie was good", "model": "enc"}).json()
        assert np.asarray(vec).shape == (1, 32)
