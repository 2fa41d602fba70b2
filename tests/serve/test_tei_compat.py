"""TEI's API as its clients use it: huggingface_hub's InferenceClient pointed at `bertkit serve`
(every call of it goes to POST /), /embed's dimensions, truncation_direction and prompt_name, the
OpenAI client's dimensions, and /rerank against sentence-transformers' CrossEncoder."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from .conftest import QUERY, TEXTS, prompted_copy, serve_http

LINES = [
    "A man is playing a guitar.",
    "The new movie is awesome!",
    "hello",
    "Paris is the capital and most populous city of France, with an estimated population.",
]


@pytest.fixture(scope="module")
def minilm_mrl(minilm: Path, tmp_path_factory) -> Path:
    """MiniLM's files (linked) as a folder that names Matryoshka sizes and two prompts."""
    import json

    d = tmp_path_factory.mktemp("minilm_mrl")
    prompts = {"query": "query: ", "passage": "passage: "}
    prompted_copy(minilm, d, prompts=prompts, default_prompt_name=None)
    (d / "bertkit_embedding.json").write_text(json.dumps({"matryoshka_dims": [256, 128]}))
    return d


@pytest.fixture(scope="module")
def minilm_url(minilm: Path):
    with serve_http(models=[f"minilm={minilm}"], max_input_tokens=1024) as base:
        yield base


@pytest.fixture(scope="module")
def pair_url(minilm: Path, minilm_mrl: Path):
    """MiniLM as it is, and as a Matryoshka model with prompts."""
    with serve_http(
        models=[f"minilm={minilm}", f"mrl={minilm_mrl}"], max_input_tokens=1024
    ) as base:
        yield base


@pytest.fixture
def local_client(monkeypatch):
    """huggingface_hub's InferenceClient, allowed to reach 127.0.0.1: the suite runs with
    HF_HUB_OFFLINE=1, under which this version blocks every request, local ones too (the Hub
    itself is never contacted: the client is given the test server's URL)."""
    import huggingface_hub.constants
    from huggingface_hub import InferenceClient

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return InferenceClient


def _post(base: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base}{route}", json=body, timeout=60)


def test_inference_client_feature_extraction_and_similarity(minilm_url: str, local_client) -> None:
    client = local_client(model=minilm_url)
    got = np.asarray(client.feature_extraction(LINES[3]), dtype=np.float32)
    want = np.asarray(_post(minilm_url, "/embed", {"inputs": [LINES[3]]}).json(), dtype=np.float32)
    assert got.shape == want.shape == (1, 384)
    np.testing.assert_allclose(got, want, atol=1e-6)
    sims = client.sentence_similarity(LINES[0], [LINES[0], LINES[3], LINES[1]])
    body = {"inputs": {"source_sentence": LINES[0], "sentences": [LINES[0], LINES[3], LINES[1]]}}
    assert sims == pytest.approx(_post(minilm_url, "/similarity", body).json(), abs=1e-6)
    assert sims[0] == pytest.approx(1.0, abs=1e-5) and sims[1] < 0.5
    # TEI's similarity body carries optional parameters; truncate is honoured from there too
    with_params = {**body, "parameters": {"truncate": True, "truncation_direction": "Right"}}
    assert _post(minilm_url, "/similarity", with_params).json() == pytest.approx(sims, abs=1e-6)


def test_dimensions_keep_the_first_values_then_normalise(pair_url: str) -> None:
    mrl = {"model": "mrl"}
    raw = np.asarray(_post(pair_url, "/embed", {"inputs": LINES, "normalize": False, **mrl}).json())
    want = raw[:, :128] / np.linalg.norm(raw[:, :128], axis=1, keepdims=True)
    cut = np.asarray(_post(pair_url, "/embed", {"inputs": LINES, "dimensions": 128, **mrl}).json())
    assert cut.shape == (4, 128)
    np.testing.assert_allclose(cut, want, atol=1e-6)
    openai = _post(pair_url, "/v1/embeddings", {"input": LINES, "dimensions": 128, **mrl}).json()
    got = np.asarray([d["embedding"] for d in openai["data"]])
    np.testing.assert_allclose(got, want, atol=1e-6)
    info = {m["name"]: m for m in httpx.get(f"{pair_url}/info").json()["models"]}
    assert info["mrl"]["matryoshka_dims"] == [256, 128] and info["minilm"]["matryoshka_dims"] == []
    # a model not trained with Matryoshka refuses, the OpenAI route too (and the full size is fine)
    for route, body in (("/embed", {"inputs": "x"}), ("/v1/embeddings", {"input": "x"})):
        r = _post(pair_url, route, {**body, "dimensions": 128, "model": "minilm"})
        err = r.json()["error"]
        assert r.status_code == 422 and "not trained with Matryoshka" in (
            err["message"] if isinstance(err, dict) else err
        ), r.text
    assert (
        _post(pair_url, "/embed", {"inputs": "x", "dimensions": 384, "model": "minilm"}).status_code
        == 200
    )


def test_prompts_from_the_folder_as_sentence_transformers_applies_them(
    pair_url: str, minilm_mrl: Path
) -> None:
    st = pytest.importorskip("sentence_transformers")
    want = st.SentenceTransformer(str(minilm_mrl), device="cpu").encode(
        LINES[:2], prompt_name="query"
    )
    got = np.asarray(
        _post(
            pair_url, "/embed", {"inputs": LINES[:2], "prompt_name": "query", "model": "mrl"}
        ).json()
    )
    np.testing.assert_allclose(got, want, atol=2e-6)
    by_hand = _post(
        pair_url, "/embed", {"inputs": ["query: " + t for t in LINES[:2]], "model": "mrl"}
    ).json()
    np.testing.assert_allclose(got, np.asarray(by_hand), atol=1e-6)
    sim = {
        "inputs": {"source_sentence": LINES[0], "sentences": LINES[:2]},
        "model": "mrl",
        "parameters": {"prompt_name": "passage"},
    }
    assert _post(pair_url, "/similarity", sim).status_code == 200


def test_openai_client_embeddings_and_dimensions(pair_url: str) -> None:
    """The openai package's client (it asks for base64 and decodes it) against the pair server."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{pair_url}/v1", api_key="unused", max_retries=0)
    got = client.embeddings.create(model="mrl", input=LINES[:2], dimensions=128)
    vectors = np.asarray([d.embedding for d in got.data])
    want = np.asarray(
        _post(pair_url, "/embed", {"inputs": LINES[:2], "dimensions": 128, "model": "mrl"}).json()
    )
    assert vectors.shape == (2, 128) and got.model == "mrl" and got.usage.prompt_tokens > 0
    np.testing.assert_allclose(vectors, want, atol=1e-6)
    full = client.embeddings.create(model="minilm", input=LINES[0], encoding_format="float")
    np.testing.assert_allclose(
        full.data[0].embedding,
        _post(pair_url, "/embed", {"inputs": LINES[0], "model": "minilm"}).json()[0],
        atol=1e-6,
    )
    with pytest.raises(openai.UnprocessableEntityError, match="not trained with Matryoshka"):
        client.embeddings.create(model="minilm", input="x", dimensions=128)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"inputs": "x", "dimensions": 385, "model": "mrl"}, "dimensions 385 > the model's 384"),
        ({"inputs": "x", "dimensions": 0}, "dimensions"),
        ({"inputs": "x", "truncation_direction": "Left"}, "cuts the end of a long input"),
        (
            {"inputs": "x", "prompt_name": "query", "model": "minilm"},
            "not one of this model's prompts (none)",
        ),
        (
            {"inputs": "x", "prompt_name": "doc", "model": "mrl"},
            "not one of this model's prompts (passage, query)",
        ),
    ],
)
def test_what_bertkit_cannot_do_is_a_422_with_the_reason(pair_url: str, body, reason) -> None:
    r = _post(pair_url, "/embed", body)
    assert r.status_code == 422 and reason in r.json()["error"], r.text


def test_rerank_equals_the_cross_encoder(cross_encoder) -> None:
    folder, ce = cross_encoder
    pairs = [(QUERY, t) for t in TEXTS]
    want = ce.predict(pairs)  # sigmoid, CrossEncoder's default for one output
    logits = ce.predict(pairs, activation_fn=torch.nn.Identity())
    assert np.ptp(want) > 0.05  # distinct scores: the order below is not a tie-break
    with serve_http(models=[f"rr={folder}"]) as base:
        info = httpx.get(f"{base}/info").json()["models"][0]
        assert "rerank" in info["capabilities"] and info["task"] == "text-classification"
        got = _post(base, "/rerank", {"query": QUERY, "texts": TEXTS}).json()
        assert [g["index"] for g in got] == list(np.argsort(-want, kind="stable"))
        for g in got:
            assert g["score"] == pytest.approx(float(want[g["index"]]), abs=1e-5)
            assert "text" not in g
        raw = _post(
            base,
            "/rerank",
            {"query": QUERY, "texts": TEXTS, "raw_scores": True, "return_text": True, "top_n": 2},
        ).json()
        assert len(raw) == 2 and [r["index"] for r in raw] == [g["index"] for g in got[:2]]
        for r in raw:
            assert r["score"] == pytest.approx(float(logits[r["index"]]), abs=1e-4)  # logits ~4
            assert r["text"] == TEXTS[r["index"]]
        # TEI's base URL takes the same body
        assert _post(base, "/", {"query": QUERY, "texts": TEXTS}).json() == got
        bad = _post(base, "/rerank", {"query": QUERY, "texts": []})
        assert bad.status_code == 400 and "`texts` cannot be empty" in bad.json()["error"]  # TEI


def test_base_url_answers_with_the_models_task(tiny_classifier: Path, local_client) -> None:
    """A classifier at POST /: huggingface_hub's text_classification, as against TEI."""
    with serve_http(models=[f"sst2={tiny_classifier}"]) as base:
        client = local_client(model=base)
        got = client.text_classification("the movie was good")
        want = _post(base, "/predict", {"inputs": "the movie was good"}).json()
        assert [(g.label, g.score) for g in got] == [
            (w["label"], pytest.approx(w["score"])) for w in want
        ]
        top = client.text_classification("the movie was good", top_k=1)
        assert len(top) == 1 and top[0].label == want[0]["label"]
        r = _post(base, "/", {"inputs": {"source_sentence": "a", "sentences": ["b"]}})
        assert r.status_code == 404 and "no served model can similarity" in r.json()["error"]


def test_a_transformers_classifier_folder_is_served_as_saved(
    tiny_mlm: Path, tmp_path: Path
) -> None:
    """No bertkit_task.json: labels from id2label, probabilities as transformers computes them."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    labels = {0: "neg", 1: "neutral", 2: "pos"}
    hf = transformers.BertForSequenceClassification.from_pretrained(
        str(tiny_mlm), num_labels=3, id2label=labels, label2id={v: k for k, v in labels.items()}
    ).eval()
    folder = tmp_path / "hf-clf"
    hf.save_pretrained(str(folder))
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        if (tiny_mlm / name).exists():
            (folder / name).write_bytes((tiny_mlm / name).read_bytes())
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    with torch.no_grad():
        logits = hf(**tok(TEXTS, padding=True, return_tensors="pt")).logits
    want, logits = logits.softmax(-1).numpy(), logits.numpy()
    with serve_http(models=[f"clf={folder}"]) as base:
        info = httpx.get(f"{base}/info").json()["models"][0]
        assert info["labels"] == ["neg", "neutral", "pos"] and "rerank" not in info["capabilities"]
        got = _post(base, "/predict", {"inputs": TEXTS}).json()
        raw = _post(base, "/predict", {"inputs": TEXTS, "raw_scores": True}).json()
    for ranked, probs in zip(got, want, strict=True):
        assert {r["label"]: r["score"] for r in ranked} == pytest.approx(
            dict(zip(labels.values(), probs.tolist())), abs=1e-5
        )
    for ranked, row in zip(raw, logits, strict=True):  # raw_scores: the logits, as TEI gives
        assert {r["label"]: r["score"] for r in ranked} == pytest.approx(
            dict(zip(labels.values(), row.tolist())), abs=1e-4
        )
