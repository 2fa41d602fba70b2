"""``sentence_bert_config.json``'s ``do_lower_case``: sentence-transformers lowercases each text
before a cased tokenizer (a ``Lowercase`` normalizer in front of the tokenizer's own, accents
kept); bertkit read the flag nowhere and tokenized such a folder's texts cased."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.inference import Embedder
from bertkit.tokenizer import BertTokenizer

st = pytest.importorskip("sentence_transformers")

TEXTS = ["Hello WORLD", "The Film Was GOOD", "a CAT sat", "Dog"]


@pytest.fixture(scope="module")
def lowercasing_folder(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a cased tokenizer, mean pooling, and do_lower_case true."""
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    out = tmp_path_factory.mktemp("lower") / "m"
    t = Transformer(str(tiny_model), processor_kwargs={"do_lower_case": False})
    pooling = Pooling(t.get_embedding_dimension(), "mean")
    st.SentenceTransformer(modules=[t, pooling], device="cpu").save(str(out))
    config = out / "sentence_bert_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_lower_case": True}))
    return out


def test_texts_are_lowercased_as_sentence_transformers_does(lowercasing_folder: Path) -> None:
    theirs = st.SentenceTransformer(str(lowercasing_folder), device="cpu")
    embedder = Embedder.load(lowercasing_folder, precision="fp32")
    assert not BertTokenizer.from_pretrained(lowercasing_folder).do_lower_case  # cased on its own
    for text in TEXTS:
        assert embedder.tokenizer.encode(text).input_ids == theirs.tokenizer(text)["input_ids"]
    assert (
        embedder.tokenizer.encode("Hello").input_ids
        != BertTokenizer.from_pretrained(lowercasing_folder).encode("Hello").input_ids
    )  # the fixture's words are lower-case: cased, they are unknown
    np.testing.assert_allclose(embedder(TEXTS), theirs.encode(TEXTS), rtol=0, atol=1e-5)


def test_a_saved_folder_keeps_lowercasing(lowercasing_folder: Path, tmp_path: Path) -> None:
    embedder = Embedder.load(lowercasing_folder, precision="fp32")
    embedder.save(tmp_path / "out")
    want = embedder(TEXTS)
    theirs = st.SentenceTransformer(str(tmp_path / "out"), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(theirs, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(Embedder.load(tmp_path / "out")(TEXTS), want, rtol=0, atol=1e-6)


def test_lowercased_keeps_the_accents(tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ncafé\ncafe\n", encoding="utf-8")
    cased = BertTokenizer(vocab, do_lower_case=False)
    assert cased.tokenize("CAFÉ Cafe") == ["[UNK]", "[UNK]"]
    assert cased.lowercased().tokenize("CAFÉ Cafe") == ["café", "cafe"]
    uncased = BertTokenizer(vocab)  # lowercases and strips accents already: itself
    assert uncased.lowercased() is uncased and uncased.tokenize("CAFÉ") == ["cafe"]
