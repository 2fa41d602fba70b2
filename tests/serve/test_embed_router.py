"""/embed through the real app on a dense sentence-transformers ``Router`` folder (a query BERT
and a document BERT): "task" picks the route as encode_query / encode_document do (default: the
Router's default route, as encode), a query cut (truncate) at the query route's own length, an
unknown task is a 422 naming the field; and /embed_sparse on a two-encoder SPLADE
Router answers a query by the query route's own encoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.tiny_router import saved_dense_router
from support.tiny_splade import saved_router_encoder

from .conftest import serve

TEXTS = ["the cat sat on the mat", "dog", "a big red house by the river"]
LONG = "a big red house by the river , a small blue tree on the road . the dog ran"  # 17 tokens


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_embed_takes_the_tasks_route(tmp_path: Path) -> None:
    folder, st = saved_dense_router(tmp_path)
    want = {
        "query": st.encode_query(TEXTS),  # type: ignore[attr-defined]
        "document": st.encode_document(TEXTS),  # type: ignore[attr-defined]
        None: st.encode(TEXTS),  # type: ignore[attr-defined]
    }
    with serve(models=[str(folder)]) as client:
        for task, rows in want.items():
            # the request says whether to normalise (TEI's default: yes), as for any model
            got = client.post("/embed", json={"inputs": TEXTS, **({"task": task} if task else {})})
            assert got.status_code == 200, got.text
            np.testing.assert_allclose(np.array(got.json()), unit(rows), atol=1e-5, rtol=0)
        # cut at the query route's own 10 tokens, as encode_query cuts it (the document's: 24)
        r = client.post("/embed", json={"inputs": LONG, "task": "query", "truncate": True})
        want_long = unit(st.encode_query([LONG]))  # type: ignore[attr-defined]
        np.testing.assert_allclose(np.array(r.json()), want_long, atol=1e-5, rtol=0)
        r = client.post("/embed", json={"inputs": "dog", "task": "passage"})
        assert r.status_code == 422 and "task" in r.text
        assert r.headers["content-type"].startswith("application/json")


def test_embed_sparse_takes_a_two_encoder_routers_query_encoder(tmp_path: Path) -> None:
    folder, st = saved_router_encoder(tmp_path, "splade")
    with serve(models=[str(folder)]) as client:
        for task in ("query", "document"):
            want = getattr(st, f"encode_{task}")(TEXTS, convert_to_tensor=True).to_dense().numpy()
            body = {"inputs": TEXTS, "task": task, "truncate": True}  # the query route: 8 tokens
            got = client.post("/embed_sparse", json=body)
            assert got.status_code == 200, got.text
            for sparse, row in zip(got.json(), want, strict=True):
                index = [e["index"] for e in sparse]
                assert index == np.flatnonzero(row).tolist()
                np.testing.assert_allclose([e["value"] for e in sparse], row[index], atol=1e-5)
