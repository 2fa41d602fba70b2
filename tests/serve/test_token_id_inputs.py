"""Pre-tokenized inputs, as text-embeddings-inference and OpenAI's embeddings API take them: token
ids are the model's input as they are (no [CLS]/[SEP] added, token types 0, one window), on
/embed, /v1/embeddings, POST /, /embed_all and /embed_sparse; checked against the text the ids
encode, against transformers run on the same ids, and through the openai client."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from .conftest import prompted_copy, serve, serve_http

LINES = ["A man is playing a guitar.", "The new movie is awesome!", "hello"]


@pytest.fixture(scope="module")
def minilm_prompted(minilm: Path, tmp_path_factory) -> Path:
    """MiniLM's files (linked) as a folder whose default prompt is "query: "."""
    d = tmp_path_factory.mktemp("minilm_query")
    return prompted_copy(minilm, d, prompts={"query": "query: "}, default_prompt_name="query")


@pytest.fixture(scope="module")
def base(minilm: Path, minilm_prompted: Path, tiny_mlm: Path):
    """A real server: MiniLM, MiniLM with a default prompt, and the tiny masked LM (64
    positions, 25 ids)."""
    models = [f"minilm={minilm}", f"query={minilm_prompted}", f"tiny={tiny_mlm}"]
    with serve_http(models=models, max_client_batch_size=4) as url:
        yield url


@pytest.fixture(scope="module")
def ids(minilm: Path) -> list[list[int]]:
    """LINES as the model's own tokenizer (transformers') encodes them, [CLS] and [SEP] in."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(minilm))(LINES)["input_ids"]


def _post(base: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base}{route}", json=body, timeout=60)


def _vectors(base: str, body: dict, route: str = "/embed") -> np.ndarray:
    r = _post(base, route, body)
    assert r.status_code == 200, r.text
    if route == "/v1/embeddings":
        return np.asarray([d["embedding"] for d in r.json()["data"]])
    return np.asarray(r.json())


def _error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    return err["message"] if isinstance(err, dict) else err


def test_ids_embed_as_the_text_they_encode_in_every_shape(base: str, ids) -> None:
    text = _vectors(base, {"inputs": LINES})
    assert ids[2] == [101, 7592, 102]  # "hello": what the client sends is the whole input
    np.testing.assert_allclose(_vectors(base, {"inputs": ids}), text, atol=1e-6)  # a batch
    one = _vectors(base, {"inputs": ids[0]})  # a flat list: ONE input of ids, not 9 inputs
    assert one.shape == (1, 384)
    np.testing.assert_allclose(one, text[:1], atol=1e-6)
    np.testing.assert_allclose(_vectors(base, {"inputs": [ids[0]]}), one, atol=1e-6)
    mixed = _vectors(base, {"inputs": [LINES[0], ids[1], LINES[2]]})  # TEI allows the mix
    np.testing.assert_allclose(mixed, text, atol=1e-6)
    raw = _vectors(base, {"inputs": ids, "normalize": False})
    np.testing.assert_allclose(raw, _vectors(base, {"inputs": LINES, "normalize": False}), 1e-5)
    # TEI's base URL embeds with an embedding model, ids too
    np.testing.assert_allclose(_vectors(base, {"inputs": ids, "model": "minilm"}, "/"), text, 1e-5)
    oa = _vectors(base, {"input": ids, "model": "minilm"}, "/v1/embeddings")
    np.testing.assert_allclose(oa, text, atol=1e-6)
    oa_one = _vectors(base, {"input": ids[2], "model": "minilm"}, "/v1/embeddings")
    np.testing.assert_allclose(oa_one, text[2:], atol=1e-6)


def test_no_special_tokens_are_added_to_ids(base: str, minilm: Path, ids) -> None:
    """The ids without [CLS]/[SEP] are read as they are: transformers' MiniLM over exactly those
    ids (mean pooled, normalised), not the text's vector (the negative control)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    bare = ids[0][1:-1]
    model = transformers.AutoModel.from_pretrained(str(minilm)).eval()
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([bare])).last_hidden_state[0]
    want = hidden.mean(0).numpy()
    want /= np.linalg.norm(want)
    got = _vectors(base, {"inputs": [bare], "model": "minilm"})[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    text = _vectors(base, {"inputs": LINES[0], "model": "minilm"})[0]
    assert np.abs(got - text).max() > 1e-2


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"inputs": [[101, 102], [101, 30522, 102]]}, "input 1: token id 30522 is outside the vocabulary (0..30521)"),
        ({"inputs": [101, -1, 102]}, "input 0: token id -1 is outside the vocabulary (0..30521)"),
        ({"inputs": ["ok", [101, 10**30]]}, f"input 1: token id {10**30} is outside the vocabulary"),
        ({"inputs": [True, 2]}, "Input should be a valid integer"),  # strict: a bool is no id
        ({"inputs": [[101, True]]}, "Input should be a valid integer"),
        ({"inputs": [101, 2.0]}, "Input should be a valid integer"),
        ({"inputs": [101, "a"]}, "Input should be a valid integer"),
        ({"inputs": [[[101]]]}, "Input should be a valid integer"),
        ({"inputs": [7592], "prompt_name": "query", "model": "query"},
         "prompt_name cannot be used with token-id inputs (input 0)"),
    ],
)  # fmt: skip
def test_bad_ids_are_a_422_naming_the_input(base: str, body: dict, reason: str) -> None:
    assert reason in _error(_post(base, "/embed", {"model": "minilm", **body}), 422)
    if "prompt_name" not in body:  # the OpenAI route: the same reason, in its shape
        oa = _post(base, "/v1/embeddings", {"input": body["inputs"], "model": "minilm"})
        assert reason in _error(oa, 422)


def test_the_default_prompt_leaves_ids_as_they_are(base: str, ids) -> None:
    """A folder's default prompt goes before texts (sentence-transformers); ids are the model's
    input as sent, so the ids of "hello" give what "hello" gives without the prompt."""
    plain = _vectors(base, {"inputs": LINES[2], "model": "minilm"})
    prompted = _vectors(base, {"inputs": LINES[2], "model": "query"})
    assert np.abs(plain - prompted).max() > 1e-2  # the prompt is there for the text
    np.testing.assert_allclose(_vectors(base, {"inputs": ids[2], "model": "query"}), plain, 1e-6)
    by_hand = _vectors(base, {"inputs": "query: hello", "model": "minilm"})
    np.testing.assert_allclose(prompted, by_hand, atol=1e-6)


def test_ids_over_the_models_length_are_cut_or_refused(base: str) -> None:
    """Ids are not read in windows: over the model's 64 positions a 413 (the OpenAI route too,
    it has no truncate), with "truncate": true the first 64 ids, as sent."""
    long = [2] + [5 + i % 20 for i in range(68)] + [3]  # 70 ids of the tiny model's 25
    reason, cut = "input 1 has 70 token ids, more than the model's 64", '"truncate": true'
    tei = _error(_post(base, "/embed", {"inputs": ["a", long], "model": "tiny"}), 413)
    assert reason in tei and cut in tei
    oa = _post(base, "/v1/embeddings", {"input": [[2, 3], long], "model": "tiny"})
    assert reason in _error(oa, 413) and oa.json()["error"]["type"] == "payload_too_large"
    assert "truncate" not in _error(oa, 413)  # OpenAI's shape has no such field to send
    cut = _vectors(base, {"inputs": [long], "truncate": True, "model": "tiny"})
    np.testing.assert_allclose(cut, _vectors(base, {"inputs": [long[:64]], "model": "tiny"}), 1e-6)
    assert np.abs(cut - _vectors(base, {"inputs": [long[:63]], "model": "tiny"})).max() > 1e-3
    assert _post(base, "/embed", {"inputs": long[:64], "model": "tiny"}).status_code == 200


def test_ids_count_against_the_batch_and_token_limits(tiny_mlm: Path) -> None:
    """A flat list is one input (5 ids pass a batch limit of 4), a list of lists one per list;
    --max-input-tokens counts ids as tokens, and truncate lifts it as for texts."""
    with serve(models=[str(tiny_mlm)], max_client_batch_size=4, max_input_tokens=12) as client:
        assert client.post("/embed", json={"inputs": [5, 6, 7, 8, 9]}).status_code == 200
        r = client.post("/embed", json={"inputs": [[5]] * 5})
        assert r.status_code == 413 and "batch size 5 > maximum allowed batch size 4" in r.text
        assert client.post("/embed", json={"inputs": [[5] * 12]}).status_code == 200
        r = client.post("/embed", json={"inputs": ["the cat", [5] * 13]})
        assert r.status_code == 413 and "at most 12 tokens" in r.text and "Input 1 has 13" in r.text
        assert '\\"truncate\\": true' in r.text  # the cut /embed offers, quoted in its JSON
        r = client.post("/v1/embeddings", json={"input": ["the cat", [5] * 13]})
        assert r.status_code == 413 and "Input 1 has 13" in r.text and "truncate" not in r.text
        assert (
            client.post("/embed", json={"inputs": [[5] * 13], "truncate": True}).status_code == 200
        )


def test_usage_counts_the_ids(base: str, ids) -> None:
    body = _post(base, "/v1/embeddings", {"input": [ids[0], [101, 102]], "model": "minilm"}).json()
    n = len(ids[0]) + 2
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}
    text = _post(base, "/v1/embeddings", {"input": LINES[0], "model": "minilm"}).json()
    assert text["usage"]["prompt_tokens"] == len(ids[0])  # the same count as the text's


def test_the_openai_client_sends_ids(base: str, ids) -> None:
    """The openai package's client with token arrays (it asks for base64 and decodes it)."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    text = _vectors(base, {"inputs": LINES, "model": "minilm"})
    got = client.embeddings.create(input=ids, model="minilm")
    np.testing.assert_allclose([d.embedding for d in got.data], text, atol=1e-6)
    assert got.usage.prompt_tokens == got.usage.total_tokens == sum(map(len, ids))
    one = client.embeddings.create(input=ids[1], model="minilm", encoding_format="float")
    assert len(one.data) == 1
    np.testing.assert_allclose(one.data[0].embedding, text[1], atol=1e-6)
    with pytest.raises(openai.UnprocessableEntityError, match="token id 40000 is outside"):
        client.embeddings.create(input=[[101, 40000, 102]], model="minilm")


def test_per_token_routes_take_ids(base: str) -> None:
    """/embed_all and /embed_sparse (TEI's Input too): the ids of a text give the text's rows."""
    tokens = _post(base, "/tokenize", {"inputs": "the cat sat", "model": "tiny"}).json()[0]
    ids = [t["id"] for t in tokens]
    for route in ("/embed_all", "/embed_sparse"):
        text = _post(base, route, {"inputs": "the cat sat", "model": "tiny"}).json()
        got = _post(base, route, {"inputs": ids, "model": "tiny"}).json()
        assert len(got) == 1 and np.allclose(_flat(got), _flat(text), atol=1e-6), route
    r = _post(base, "/embed_all", {"inputs": [[2] * 70], "model": "tiny"})
    assert "at most 64 tokens" in _error(r, 413)
    cut = _post(base, "/embed_all", {"inputs": [[2] * 70], "truncate": True, "model": "tiny"})
    assert np.asarray(cut.json()).shape == (1, 64, 32)
    # TEI's /tokenize reads texts only: ids there are a 422
    assert _post(base, "/tokenize", {"inputs": ids, "model": "tiny"}).status_code == 422


def _flat(answer: list) -> np.ndarray:
    """/embed_all's rows or /embed_sparse's values as one array."""
    first = answer[0]
    if first and isinstance(first[0], dict):
        return np.asarray([[e["index"], e["value"]] for e in first])
    return np.asarray(first)
