"""/embed_sparse through the real app on a sentence-transformers SparseEncoder folder: the
folder's SpladePooling (sum, max_active_dims) is what the route computes, as SparseEncoder.encode
gives it; long inputs 413 unless truncate; an inference-free Router folder answers by "task" (default:
document); a model without a masked-LM head 404 (in test_token_routes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.tiny_splade import MAX_SEQ_LENGTH, saved_router_encoder, saved_sparse_encoder

from .conftest import serve

TEXTS = ["the cat sat on the mat", "dog", "a big red house by the river"]


def _assert_same(a: list[dict], b: list[dict]) -> None:
    """The same sparse vector: the same indices, values within float32 rounding."""
    assert [e["index"] for e in a] == [e["index"] for e in b]
    np.testing.assert_allclose([e["value"] for e in a], [e["value"] for e in b], atol=1e-5)


def test_embed_sparse_is_the_sparse_encoders_vector(tmp_path: Path) -> None:
    folder, st = saved_sparse_encoder(tmp_path, pooling_strategy="sum", max_active_dims=5)
    long = " ".join(["the big dog ran on the road"] * 3)
    want = st.encode([*TEXTS, long], convert_to_tensor=True).to_dense().numpy()  # type: ignore[attr-defined]
    with serve(models=[str(folder)]) as client:
        assert "embed_sparse" in client.get("/info").json()["models"][0]["capabilities"]
        got = client.post("/embed_sparse", json={"inputs": TEXTS})
        assert got.status_code == 200, got.text
        for sparse, row in zip(got.json(), want[:3], strict=True):
            assert set(sparse[0]) == {"index", "value"}
            index = [e["index"] for e in sparse]
            assert index == np.flatnonzero(row).tolist() and len(index) == 5
            np.testing.assert_allclose([e["value"] for e in sparse], row[index], atol=1e-5)
        one = client.post("/embed_sparse", json={"inputs": "dog"}).json()
        assert len(one) == 1  # a list per input, for one too
        # alone, "dog" is batched without padding: another kernel may round the last bit apart
        _assert_same(one[0], got.json()[1])
        r = client.post("/embed_sparse", json={"inputs": long})
        assert r.status_code == 413 and "truncate" in r.json()["error"]
        cut = client.post("/embed_sparse", json={"inputs": [long], "truncate": True}).json()[0]
        assert [e["index"] for e in cut] == np.flatnonzero(want[-1]).tolist()
        np.testing.assert_allclose([e["value"] for e in cut], want[-1][want[-1] > 0], atol=1e-5)
        assert len(long.split()) + 2 > MAX_SEQ_LENGTH
        r = client.post("/embed_sparse", json={"inputs": 3})
        assert r.status_code == 422 and "inputs" in r.text


def test_a_sparse_encoder_folder_is_not_served_for_dense_embeddings(tmp_path: Path) -> None:
    """As TEI serves a SPLADE model: /embed, /v1/embeddings and /similarity are refused with a
    4xx naming what it serves, and TEI's default route (POST /) answers as /embed_sparse."""
    folder, _ = saved_sparse_encoder(tmp_path)
    with serve(models=[str(folder)]) as client:
        caps = client.get("/info").json()["models"][0]["capabilities"]
        assert "embed_sparse" in caps and "embed" not in caps and "similarity" not in caps
        for route, body in (
            ("/embed", {"inputs": TEXTS}),
            ("/v1/embeddings", {"input": TEXTS}),
            ("/similarity", {"inputs": {"source_sentence": "dog", "sentences": TEXTS}}),
        ):
            r = client.post(route, json=body)
            assert 400 <= r.status_code < 500 and "embed_sparse" in r.text, (route, r.text)
        default = client.post("/", json={"inputs": TEXTS})
        assert default.status_code == 200, default.text
        sparse = client.post("/embed_sparse", json={"inputs": TEXTS}).json()
        assert len(default.json()) == len(sparse) == len(TEXTS)
        for a, b in zip(default.json(), sparse, strict=True):
            _assert_same(a, b)


def test_router_folder_answers_by_task(tmp_path: Path) -> None:
    folder, st = saved_router_encoder(tmp_path, max_active_dims=4)
    want = {
        "query": st.encode_query(TEXTS, convert_to_tensor=True).to_dense().numpy(),  # type: ignore[attr-defined]
        "document": st.encode_document(TEXTS, convert_to_tensor=True).to_dense().numpy(),  # type: ignore[attr-defined]
    }
    with serve(models=[str(folder)]) as client:
        caps = client.get("/info").json()["models"][0]["capabilities"]
        assert "embed_sparse" in caps and "embed" not in caps
        for task in ("query", "document", None):
            body = {"inputs": TEXTS, **({"task": task} if task else {})}
            got = client.post("/embed_sparse", json=body)
            assert got.status_code == 200, got.text
            for sparse, row in zip(got.json(), want[task or "document"], strict=True):
                index = [e["index"] for e in sparse]
                assert index == np.flatnonzero(row).tolist()
                np.testing.assert_allclose([e["value"] for e in sparse], row[index], atol=1e-5)
        # TEI's default route answers as /embed_sparse, with the document route
        _assert_same(client.post("/", json={"inputs": TEXTS[:1]}).json()[0], got.json()[0])
        long = " ".join(["the big dog ran on the road"] * 3)
        r = client.post("/embed_sparse", json={"inputs": long, "task": "query"})
        assert r.status_code == 413 and "truncate" in r.json()["error"]
        r = client.post("/embed_sparse", json={"inputs": long, "task": "query", "truncate": True})
        assert r.status_code == 200
        r = client.post("/embed_sparse", json={"inputs": "dog", "task": "passage"})
        assert r.status_code == 422 and "task" in r.text
