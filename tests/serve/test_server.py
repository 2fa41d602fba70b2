"""bertkit serve: endpoint shapes, equality with the offline commands, limits and error bodies."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.inference import Classifier
from bertkit.serve.worker import HeapTrim, token_budget_batches
from bertkit.tasks.windows import WindowConfig

from .conftest import serve, wait_ready

LINES = [
    "A man is playing a guitar.",
    "The new movie is awesome!",
    "hello",
    "Paris is the capital and most populous city of France, with an estimated population.",
]


@pytest.fixture(scope="module")
def minilm_client(minilm: Path):
    with serve(
        models=[f"minilm={minilm}"],
        max_client_batch_size=8,
        payload_limit=20_000,
        max_input_tokens=1024,
    ) as c:
        yield c


def test_embed_equals_bertkit_embed_and_openai_shape(minilm_client, minilm: Path, tmp_path: Path):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    argv = [
        "embed",
        "--model",
        str(minilm),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "v.npy"),
        "--precision",
        "fp32",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    offline = np.load(tmp_path / "v.npy")
    r = minilm_client.post("/embed", json={"inputs": LINES})
    assert r.status_code == 200
    got = np.asarray(r.json(), dtype=np.float32)
    assert got.shape == (4, 384)
    assert np.abs(got - offline).max() <= 1e-5
    single = minilm_client.post("/embed", json={"inputs": LINES[0]}).json()
    assert np.abs(np.asarray(single[0]) - offline[0]).max() <= 1e-5
    raw = np.asarray(
        minilm_client.post("/embed", json={"inputs": LINES, "normalize": False}).json()
    )
    assert np.linalg.norm(raw, axis=1).min() > 1.5  # MiniLM's unnormalised vectors are long
    o = minilm_client.post(
        "/v1/embeddings", json={"input": LINES[:2], "model": "text-embedding-3-small"}
    )
    assert o.status_code == 200
    body = o.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    assert np.abs(np.asarray(body["data"][1]["embedding"]) - offline[1]).max() <= 1e-5
    n_tokens = sum(
        len(x) for x in minilm_client.post("/tokenize", json={"inputs": LINES[:2]}).json()
    )
    assert body["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    b64 = minilm_client.post(
        "/v1/embeddings", json={"input": "hello", "encoding_format": "base64"}
    ).json()
    import base64

    vec = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    assert np.abs(vec - offline[2]).max() <= 1e-5


def test_similarity_tokenize_info_metrics(minilm_client):
    sim = minilm_client.post(
        "/similarity",
        json={"inputs": {"source_sentence": LINES[0], "sentences": [LINES[0], LINES[3]]}},
    ).json()
    assert sim[0] == pytest.approx(1.0, abs=1e-5) and sim[1] < 0.5
    toks = minilm_client.post("/tokenize", json={"inputs": "Hello world!"}).json()
    assert [(t["text"], t["start"], t["stop"], t["special"]) for t in toks[0]] == [
        ("[CLS]", 0, 0, True),
        ("hello", 0, 5, False),
        ("world", 6, 11, False),
        ("!", 11, 12, False),
        ("[SEP]", 0, 0, True),
    ]
    info = minilm_client.get("/info").json()
    (m,) = info["models"]
    assert m["name"] == "minilm" and m["task"] == "feature-extraction"
    assert m["pooling"] == "mean" and m["max_input_length"] == 256 and m["dimensions"] == 384
    assert info["limits"]["max_client_batch_size"] == 8
    text = minilm_client.get("/metrics").text
    for name in (
        "bertkit_request_count_total",
        "bertkit_batch_size_bucket",
        "bertkit_inference_duration_seconds_count",
        "bertkit_request_failure_total",
        "bertkit_queue_size",
    ):
        assert name in text, name
    assert minilm_client.get("/docs").status_code == 200
    assert "/v1/embeddings" in minilm_client.get("/openapi.json").json()["paths"]


def test_request_metrics_count_by_route_and_bound_the_labels(minilm_client):
    """Every request is counted and timed by route, 2xx answers as successes; paths that are not
    routes count as "other", so random paths cannot grow /metrics."""
    count = 'bertkit_request_count_total{route="%s"}'
    ok = 'bertkit_request_success_total{route="%s"}'
    names = [k % r for k in (count, ok) for r in ("/embed", "other")]
    before = {n: _count(minilm_client, n) for n in names}
    assert minilm_client.post("/embed", json={"inputs": "a"}).status_code == 200
    assert minilm_client.post("/embed", json={"inputs": 3}).status_code == 422
    for i in range(3):
        assert minilm_client.get(f"/no/such/path/{i}").status_code == 404
    after = {n: _count(minilm_client, n) for n in names}
    assert after[count % "/embed"] - before[count % "/embed"] == 2
    assert after[ok % "/embed"] - before[ok % "/embed"] == 1
    assert after[count % "other"] - before[count % "other"] == 3
    assert after[ok % "other"] == before[ok % "other"]
    assert "/no/such/path" not in minilm_client.get("/metrics").text


def test_long_inputs_are_windowed_like_the_library_and_truncate_cuts(minilm_client, minilm: Path):
    """Over the model's 256 tokens and under --max-input-tokens: windows, the same vector as
    Embedder (and bertkit embed) gives; "truncate": true gives the first window's vector."""
    from bertkit.inference import Embedder

    text = " ".join(LINES * 16)  # ~480 tokens
    emb = Embedder.load(minilm, precision="fp32", device="cpu")
    windowed, counts = emb.embed([text])
    assert counts.windowed == 1 and counts.windows > 1
    cut = Embedder.load(
        minilm, precision="fp32", device="cpu", windows=WindowConfig(truncate=True)
    )([text])
    got = np.asarray(minilm_client.post("/embed", json={"inputs": [text]}).json())
    assert np.abs(got - windowed).max() <= 1e-5
    got_cut = np.asarray(
        minilm_client.post("/embed", json={"inputs": [text], "truncate": True}).json()
    )
    assert np.abs(got_cut - cut).max() <= 1e-5 and np.abs(windowed - cut).max() > 1e-3
    # OpenAI's shape has no truncate field: windows too (normalised, as /v1/embeddings always is)
    oa = minilm_client.post("/v1/embeddings", json={"input": [text]}).json()
    unit = windowed / np.linalg.norm(windowed, axis=1, keepdims=True)
    assert np.abs(np.asarray(oa["data"][0]["embedding"]) - unit).max() <= 1e-5
    assert oa["usage"]["prompt_tokens"] > 256


def test_limits_answer_with_tei_statuses_and_json_reasons(minilm_client):
    def err(r, status: int, kind: str) -> str:
        assert r.status_code == status, r.text
        body = r.json()
        assert set(body) == {"error", "error_type"} and body["error_type"] == kind
        return body["error"]

    assert "batch size 9 > maximum allowed batch size 8" in err(
        minilm_client.post("/embed", json={"inputs": ["x"] * 9}), 413, "payload_too_large"
    )
    assert "over the 20000-byte limit" in err(
        minilm_client.post(
            "/embed",
            content=json.dumps({"inputs": ["y" * 30_000]}),
            headers={"content-type": "application/json"},
        ),
        413,
        "payload_too_large",
    )
    too_long = " ".join(["word"] * 1100)  # over --max-input-tokens 1024
    assert "at most 1024 tokens" in err(
        minilm_client.post("/embed", json={"inputs": [too_long]}), 413, "payload_too_large"
    )
    assert (
        minilm_client.post("/embed", json={"inputs": [too_long], "truncate": True}).status_code
        == 200
    )
    err(minilm_client.post("/embed", json={"inputs": []}), 400, "empty")  # as TEI
    err(minilm_client.post("/embed", json={"inputs": "x", "nonsense": 1}), 422, "validation")
    err(minilm_client.post("/predict", json={"inputs": "x"}), 404, "not_found")
    err(minilm_client.post("/embed", json={"inputs": "x", "model": "other"}), 404, "not_found")
    err(minilm_client.get("/nowhere"), 404, "not_found")


def test_api_key_protects_every_route_but_health(tiny_mlm: Path):
    with serve(models=[str(tiny_mlm)], api_key="s3cret") as client:
        assert client.get("/health").status_code == 200
        for auth in (None, "Bearer wrong", "s3cret"):
            headers = {"authorization": auth} if auth else {}
            r = client.post("/embed", json={"inputs": "the cat"}, headers=headers)
            assert r.status_code == 401 and r.json()["error_type"] == "unauthorized"
        assert client.get("/info").status_code == 401
        ok = client.post(
            "/embed", json={"inputs": "the cat"}, headers={"authorization": "Bearer s3cret"}
        )
        assert ok.status_code == 200


def test_health_is_503_until_a_real_forward_pass_has_run(tiny_mlm: Path, monkeypatch):
    from fastapi.testclient import TestClient

    from bertkit.serve import engine as E
    from bertkit.serve.app import create_app
    from bertkit.serve.settings import ServeSettings

    gate, real_warm_up = threading.Event(), E.Engine._warm_up

    def held_warm_up(self):
        gate.wait(30)
        real_warm_up(self)

    monkeypatch.setattr(E.Engine, "_warm_up", held_warm_up)
    app = create_app(ServeSettings(models=[str(tiny_mlm)], precision="fp32", device="cpu"))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/health")
        assert r.status_code == 503 and r.json()["error_type"] == "unhealthy"
        assert r.json()["error"].endswith("'loading'}"), r.json()  # each model's state, named
        assert client.post("/embed", json={"inputs": "the cat"}).status_code == 503
        gate.set()
        wait_ready(client)
        assert client.post("/embed", json={"inputs": "the cat"}).status_code == 200


def test_several_models_in_one_server(tiny_mlm: Path, tiny_classifier: Path):
    with serve(models=[f"enc={tiny_mlm}", f"sst={tiny_classifier}"]) as client:
        names = {m["name"]: m for m in client.get("/info").json()["models"]}
        assert names["enc"]["capabilities"] == [
            "embed",
            "embed_all",
            "similarity",
            "tokenize",
            "decode",
            "fill-mask",
            "embed_sparse",
        ]
        assert names["sst"]["capabilities"] == ["predict", "tokenize", "decode"] and names["sst"][
            "labels"
        ] == ["0", "1"]
        offline = Classifier.load(tiny_classifier, device="cpu", precision="fp32")

        def ranked(text: str | tuple[str, str]) -> list[tuple[str, float]]:
            """The labels by the model's own probability, highest first (the API's order)."""
            p0, p1 = offline(text)[0]["probabilities"]
            assert p0 != p1, "a tie would leave the order unchecked"
            return [("0", p0), ("1", p1)] if p0 > p1 else [("1", p1), ("0", p0)]

        def labels_scores(answer: list[dict]) -> list[tuple[str, float]]:
            return [(x["label"], pytest.approx(x["score"], abs=1e-5)) for x in answer]

        one = client.post("/predict", json={"inputs": "the movie was good"}).json()
        assert labels_scores(one) == ranked("the movie was good")
        assert sum(x["score"] for x in one) == pytest.approx(1.0, abs=1e-5)
        many = client.post(
            "/predict", json={"inputs": [["the movie", "was good"], ["a", "b"]]}
        ).json()
        assert [labels_scores(x) for x in many] == [
            ranked(("the movie", "was good")),
            ranked(("a", "b")),
        ]
        assert client.post("/embed", json={"inputs": "the cat", "model": "enc"}).status_code == 200
        bad = client.post("/embed", json={"inputs": "the cat", "model": "sst"})
        assert bad.status_code == 422 and "cannot embed" in bad.json()["error"]
        fm = client.post(
            "/fill-mask", json={"inputs": "the cat sat on the [MASK] .", "top_k": 3}
        ).json()
        assert len(fm) == 1 and len(fm[0]) == 3 and {"token", "score"} == set(fm[0][0])
        nomask = client.post("/fill-mask", json={"inputs": "the cat"})
        assert nomask.status_code == 422 and "no [MASK]" in nomask.json()["error"]


def test_concurrent_requests_are_merged_into_one_batch(tiny_mlm: Path):
    """Requests queued while the worker is busy come out of one forward pass."""
    with serve(models=[str(tiny_mlm)]) as client:
        server = client.app.state.server
        engine = server.engines[next(iter(server.engines))]
        gate = threading.Event()
        engine.worker.run(lambda: gate.wait(10))  # keep the worker busy while requests queue
        results = []

        def post(i: int) -> None:
            results.append(
                client.post("/embed", json={"inputs": [f"the cat {WORD[i % 3]}"] * 2}).status_code
            )

        WORD = ["sat", "dog", "mat"]
        threads = [threading.Thread(target=post, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while engine.worker.queued() < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = _count(client, "bertkit_batch_size_count")
        gate.set()
        for t in threads:
            t.join()
        assert results == [200] * 6
        assert _count(client, "bertkit_batch_size_count") - before == 1  # 12 inputs, one pass
        assert _count(client, "bertkit_batch_size_sum") >= 12


def _count(client, name: str) -> float:
    """The value of the first sample named ``name`` (with its labels, if given), 0 if absent."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " ") or ("{" not in name and line.startswith(name + "{")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_overload_is_429_with_retry_after_and_slow_results_504(tiny_mlm: Path):
    with serve(models=[str(tiny_mlm)], max_concurrent_requests=1, request_timeout=0.5) as client:
        engine = next(iter(client.app.state.server.engines.values()))
        gate = threading.Event()
        engine.worker.run(lambda: gate.wait(10))
        first: list = []
        t = threading.Thread(
            target=lambda: first.append(client.post("/embed", json={"inputs": "the cat"}))
        )
        t.start()
        time.sleep(0.2)
        r = client.post("/embed", json={"inputs": "the dog"})
        assert (
            r.status_code == 429
            and r.headers["retry-after"] == "1"
            and r.json()["error_type"] == "overloaded"
        )
        t.join()
        assert first[0].status_code == 504 and first[0].json()["error_type"] == "timeout"
        gate.set()
        time.sleep(0.1)
        assert client.post("/embed", json={"inputs": "the cat"}).status_code == 200


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_heap_trim_runs_when_due():
    """The worker gives free heap pages back between passes: when due, not before."""
    trim = HeapTrim(every=60.0, idle_every=0.0)
    assert trim(idle=True)  # idle: due at once
    assert not trim(idle=False)  # under load: not within 60 s of the last trim
    assert HeapTrim(every=0.0)(idle=False)


def test_token_budget_batches():
    assert token_budget_batches([5, 9, 2, 8], 18) == [[1, 3], [0, 2]]
    assert token_budget_batches([100], 10) == [[0]]  # longer than the budget: alone
    lengths = list(range(1, 200))
    batches = token_budget_batches(lengths, 512)
    assert sorted(i for b in batches for i in b) == list(range(199))
    assert all(lengths[b[0]] * len(b) <= 512 or len(b) == 1 for b in batches)


def test_request_text_cannot_inject_special_tokens_by_default(tiny_mlm: Path):
    with serve(models=[str(tiny_mlm)]) as client:
        toks = client.post("/tokenize", json={"inputs": "the [SEP] cat"}).json()[0]
        inner = toks[1:-1]
        assert [t["special"] for t in toks] == [True] + [False] * len(inner) + [True]
        assert "[SEP]" not in [t["text"] for t in inner]
    with serve(models=[str(tiny_mlm)], split_special_tokens=False) as client:
        toks = client.post("/tokenize", json={"inputs": "the [SEP] cat"}).json()[0]
        assert [t["text"] for t in toks] == ["[CLS]", "the", "[SEP]", "cat", "[SEP]"]


def test_non_finite_vectors_are_a_json_500_not_nulls(tiny_mlm: Path):
    """JSON has no NaN: a model that gives one is the server's fault, said in a JSON reason."""
    with serve(models=[str(tiny_mlm)]) as client:
        engine = next(iter(client.app.state.server.engines.values()))
        real = engine.worker.embed
        engine.worker.embed = lambda encodings: np.full((len(encodings), 8), np.nan, np.float32)
        try:
            r = client.post("/embed", json={"inputs": ["the cat"]})
            assert r.status_code == 500 and r.json()["error_type"] == "backend"
            assert "non-finite" in r.json()["error"]
        finally:
            engine.worker.embed = real
        assert client.post("/embed", json={"inputs": ["the cat"]}).status_code == 200


def test_non_finite_task_scores_are_a_json_500_not_nulls(tiny_classifier: Path):
    with serve(models=[str(tiny_classifier)]) as client:
        engine = next(iter(client.app.state.server.engines.values()))
        good = client.post("/predict", json={"inputs": "the cat"})
        assert good.status_code == 200
        engine.predict = lambda items, raw, truncate: [[{"label": "a", "score": float("nan")}]]
        try:
            r = client.post("/predict", json={"inputs": "the cat"})
            assert r.status_code == 500 and r.json()["error_type"] == "backend"
            assert "non-finite" in r.json()["error"]
        finally:
            del engine.predict
        assert client.post("/predict", json={"inputs": "the cat"}).json() == good.json()


def test_all_finite_walks_task_answers():
    from bertkit.serve.app import _all_finite

    assert _all_finite([{"label": "x", "score": 0.5, "spans": [(0, 3)]}, np.float32(1.0)])
    assert _all_finite({"v": np.arange(3)})  # integer arrays have no NaN
    for bad in (
        float("inf"),
        [{"score": float("nan")}],
        {"a": np.float64("nan")},
        (np.array([1.0, np.inf]),),
    ):
        assert not _all_finite(bad)
