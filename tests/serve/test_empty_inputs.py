"""An empty input is a 400 naming it, as text-embeddings-inference answers (its tokenizer's
``EncodingInput::is_empty`` check, ``ErrorType::Empty``): a text ``""``, an id list ``[]``, a
pair whose two texts are (a rerank query with its text), an empty list of inputs. Under /v1/ in
OpenAI's shape (OpenAI's embeddings API: "cannot be an empty string", a 400). The routes TEI
does not have answer what they answered: /ner tags no words, /fill-mask finds no [MASK];
/qa refuses a blank question or context, as the SQuAD reader does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import serve


@pytest.fixture(scope="module")
def client(tiny_mlm: Path, tiny_classifier: Path, task_models: dict[str, Path]) -> Iterator:
    models = [f"enc={tiny_mlm}", f"sst={tiny_classifier}", f"rr={task_models['rerank']}"]
    models += [f"ner={task_models['ner']}", f"qa={task_models['qa']}"]
    with serve(models=models) as c:
        yield c


EMPTY = [
    ("/embed", {"inputs": ["a", ""], "model": "enc"}, "`inputs` cannot be empty: input 1 is an empty text"),
    ("/embed", {"inputs": "", "model": "enc"}, "`inputs` cannot be empty: input 0 is an empty text"),
    ("/embed", {"inputs": ["a", []], "model": "enc"},
     "`inputs` cannot be empty: input 1 is an empty list of token ids"),
    ("/embed", {"inputs": [], "model": "enc"}, "`inputs` cannot be empty"),
    ("/", {"inputs": ["a", ""], "model": "enc"}, "`inputs` cannot be empty: input 1 is an empty text"),
    ("/v1/embeddings", {"input": ["a", ""], "model": "enc"}, "`input` cannot be empty: input 1 is an empty text"),
    ("/v1/embeddings", {"input": "", "model": "enc"}, "`input` cannot be empty: input 0 is an empty text"),
    ("/v1/embeddings", {"input": [], "model": "enc"}, "`input` cannot be empty"),
    ("/embed_all", {"inputs": ["a", ""], "model": "enc"}, "`inputs` cannot be empty: input 1 is an empty text"),
    ("/embed_sparse", {"inputs": ["", "a"], "model": "enc"}, "`inputs` cannot be empty: input 0 is an empty text"),
    ("/tokenize", {"inputs": ["a", ""], "model": "enc"}, "`inputs` cannot be empty: input 1 is an empty text"),
    ("/decode", {"ids": [[2, 5], []], "model": "enc"}, "`ids` cannot be empty: input 1 is an empty list of token ids"),
    ("/predict", {"inputs": ["a", ""], "model": "sst"}, "`inputs` cannot be empty: input 1 is an empty text"),
    ("/predict", {"inputs": [["a", "b"], ["", ""]], "model": "sst"},
     "`inputs` cannot be empty: input 1 is a pair of empty texts"),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b", ""]}, "model": "enc"},
     "`inputs.sentences` cannot be empty: input 1 is an empty text"),
    ("/similarity", {"inputs": {"source_sentence": "", "sentences": ["b"]}, "model": "enc"},
     "`inputs.source_sentence` cannot be empty"),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": []}, "model": "enc"},
     "`inputs.sentences` cannot be empty"),
    ("/rerank", {"query": "", "texts": ["a", ""], "model": "rr"},
     "`texts` cannot be empty: input 1 is an empty text, and so is the query"),
    ("/rerank", {"query": "q", "texts": [], "model": "rr"}, "`texts` cannot be empty"),
    # not TEI's route: a question needs words to ask and a context words to answer from (as the
    # SQuAD reader), so a blank one is refused too
    ("/qa", {"inputs": [{"question": "q", "context": "c"}, {"question": "", "context": "c"}], "model": "qa"},
     "`inputs` cannot be empty: input 1 has an empty question"),
    ("/qa", {"inputs": {"question": "q", "context": " \n"}, "model": "qa"},
     "`inputs` cannot be empty: input 0 has a blank context"),
]  # fmt: skip


@pytest.mark.parametrize(("route", "body", "reason"), EMPTY)
def test_an_empty_input_is_a_400_naming_it(client, route: str, body: dict, reason: str) -> None:
    r = client.post(route, json=body)
    assert r.status_code == 400, r.text
    if route.startswith("/v1/"):
        error = r.json()["error"]
        assert (error["type"], error["param"], error["code"]) == ("empty", None, None)
        message = error["message"]
    else:
        assert r.json()["error_type"] == "empty"
        message = r.json()["error"]
    assert message == f"Input validation error: {reason}"


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/predict", {"inputs": [["", "b"]], "model": "sst"}),  # a pair with one text is input
        ("/rerank", {"query": "", "texts": ["a"], "model": "rr"}),  # as TEI: the pair is not empty
        ("/rerank", {"query": "q", "texts": ["a", ""], "model": "rr"}),
        ("/embed", {"inputs": [" "], "model": "enc"}),  # blank is text, as in TEI
        ("/ner", {"inputs": ["a", ""], "model": "ner"}),  # not TEI's: no words, no tags
        ("/qa", {"inputs": {"question": "q", "context": "c"}, "model": "qa"}),
    ],
)
def test_what_tei_reads_is_read(client, route: str, body: dict) -> None:
    r = client.post(route, json=body)
    assert r.status_code == 200, r.text
