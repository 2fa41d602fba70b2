"""sentence-transformers folders with Dense modules after the pooling (LaBSE's projection):
bertkit's vectors equal sentence-transformers', a saved folder keeps them, pickled Dense weights
need --allow-pickle, a module chain bertkit does not compute is refused, never skipped (the
vectors came back unprojected, 32 values where sentence-transformers gave 16), and ``finetune
embeddings`` trains and saves the projection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.errors import CheckpointError
from bertkit.inference import Embedder
from bertkit.tasks.windows import WindowConfig

st = pytest.importorskip("sentence_transformers")

TEXTS = ["a cat sat on the mat", "the film was good", "dog", "a lovely plot and a bad film"]


def _st_folder(tiny_model: Path, out: Path) -> Path:
    """Transformer -> Pooling (cls) -> Dense (tanh, 32 -> 16) -> Dropout -> Dense (identity, no
    bias, 16 -> 8) -> Normalize, random Dense weights, saved by sentence-transformers."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Dense,
        Dropout,
        Normalize,
        Pooling,
        Transformer,
    )

    torch.manual_seed(0)
    t = Transformer(str(tiny_model))
    width = t.get_embedding_dimension()
    modules = [
        t,
        Pooling(width, "cls"),
        Dense(width, 16, activation_function=torch.nn.Tanh()),
        Dropout(0.1),  # nothing at inference
        Dense(16, 8, bias=False, activation_function=torch.nn.Identity()),
        Normalize(),
    ]
    SentenceTransformer(modules=modules, device="cpu").save(str(out))
    return out


@pytest.fixture(scope="module")
def dense_folder(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _st_folder(tiny_model, tmp_path_factory.mktemp("dense") / "m")


def _theirs(folder: Path, texts=TEXTS) -> np.ndarray:
    return st.SentenceTransformer(str(folder), device="cpu").encode(texts)


def test_vectors_equal_sentence_transformers(dense_folder: Path) -> None:
    embedder = Embedder.load(dense_folder, precision="fp32")
    assert (embedder.dim, embedder.token_dim) == (8, 32)
    got = embedder(TEXTS)
    assert got.shape == (4, 8)
    np.testing.assert_allclose(got, _theirs(dense_folder), rtol=0, atol=1e-5)
    tokens = embedder.token_vectors(embedder.window(embedder.encode(TEXTS[:1])).inputs)
    assert tokens[0].shape[1] == 32  # token vectors come before the pooling and the projection


def test_a_truncated_long_text_equals_sentence_transformers(dense_folder: Path) -> None:
    long = [" ".join(["the film was good and the cat sat"] * 12)]
    embedder = Embedder.load(
        dense_folder, precision="fp32", max_length=16, windows=WindowConfig(truncate=True)
    )
    model = st.SentenceTransformer(str(dense_folder), device="cpu")
    model.max_seq_length = 16
    np.testing.assert_allclose(embedder(long), model.encode(long), rtol=0, atol=1e-5)


def test_saved_folder_keeps_the_projection(dense_folder: Path, tmp_path: Path) -> None:
    embedder = Embedder.load(dense_folder, precision="fp32")
    embedder.save(tmp_path / "out")
    chain = json.loads((tmp_path / "out" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in chain] == [
        "Transformer",
        "Pooling",
        "Dense",
        "Dropout",
        "Dense",
        "Normalize",
    ]
    assert json.loads((tmp_path / "out" / "3_Dropout" / "config.json").read_text()) == {
        "dropout": 0.1
    }
    pooling = json.loads((tmp_path / "out" / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == 32
    want = embedder(TEXTS)
    np.testing.assert_allclose(_theirs(tmp_path / "out"), want, rtol=0, atol=1e-5)
    again = Embedder.load(tmp_path / "out", precision="fp32")(TEXTS)
    np.testing.assert_allclose(again, want, rtol=0, atol=1e-6)


def test_pickled_dense_weights_need_allow_pickle(dense_folder: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder = tmp_path / "m"
    shutil.copytree(dense_folder, folder)
    dense = folder / "2_Dense"
    torch.save(load_file(str(dense / "model.safetensors")), dense / "pytorch_model.bin")
    (dense / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"2_Dense/pytorch_model.bin is a pickle file"):
        Embedder.load(folder, precision="fp32")
    got = Embedder.load(folder, precision="fp32", allow_pickle=True)(TEXTS)
    np.testing.assert_allclose(got, _theirs(dense_folder), rtol=0, atol=1e-5)


def _chain(folder: Path, change) -> None:
    path = folder / "modules.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            lambda c: [*c[:2], {**c[2], "type": "sentence_transformers.models.LayerNorm"}, *c[3:]],
            r"names LayerNorm \(2_Dense\), which bertkit does not compute",
        ),
        (lambda c: [c[0], c[1], c[5], c[2], c[4]], r"chains Transformer -> Pooling -> Normalize"),
        (lambda c: [c[0], c[1], c[1], c[5]], r"each but Dense at most once"),
    ],
)
def test_a_chain_bertkit_does_not_compute_is_refused(
    dense_folder: Path, tmp_path: Path, change, said: str
) -> None:
    folder = tmp_path / "m"
    shutil.copytree(dense_folder, folder)
    _chain(folder, change)
    with pytest.raises(CheckpointError, match=said):
        Embedder.load(folder, precision="fp32")


def test_an_activation_bertkit_does_not_compute_is_refused(
    dense_folder: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "m"
    shutil.copytree(dense_folder, folder)
    config = folder / "2_Dense" / "config.json"
    cfg = json.loads(config.read_text())
    config.write_text(json.dumps({**cfg, "activation_function": "torch.nn.modules.Softsign"}))
    with pytest.raises(CheckpointError, match=r"activation 'torch.nn.modules.Softsign' is not"):
        Embedder.load(folder, precision="fp32")
    config.write_text(json.dumps({**cfg, "in_features": 31}))
    with pytest.raises(CheckpointError, match=r"takes 31 values, the vector before it has 32"):
        Embedder.load(folder, precision="fp32")


def test_the_dropout_modules_the_pooled_vector_goes_through(
    dense_folder: Path, tmp_path: Path
) -> None:
    """A Dropout between the Pooling and Normalize is kept (in training it drops values of the
    vector), one before the Pooling or after Normalize is left out (bertkit trains neither);
    a probability outside [0, 1) is refused with the file."""
    from bertkit.interop.sentence_dense import DenseModule, DropoutModule
    from bertkit.interop.sentence_folder import sentence_transformers_spec

    spec = sentence_transformers_spec(dense_folder)
    assert [type(m) for m in spec.dense] == [DenseModule, DropoutModule, DenseModule]
    assert spec.dense[1] == DropoutModule(dense_folder / "3_Dropout", 0.1)
    folder = tmp_path / "m"
    shutil.copytree(dense_folder, folder)
    # Transformer -> Dropout -> Pooling -> Dense -> Dense -> Normalize -> Dropout
    _chain(folder, lambda c: [c[0], c[3], c[1], c[2], c[4], c[5], {**c[3], "idx": 6}])
    assert [type(m) for m in sentence_transformers_spec(folder).dense] == [DenseModule] * 2
    _chain(folder, lambda c: [c[0], c[2], c[3], c[4], c[1], c[5]])  # after the last Dense
    assert [type(m) for m in sentence_transformers_spec(folder).dense] == [
        DenseModule,
        DenseModule,
        DropoutModule,
    ]
    np.testing.assert_allclose(
        Embedder.load(folder, precision="fp32")(TEXTS), _theirs(dense_folder), rtol=0, atol=1e-5
    )
    (folder / "3_Dropout" / "config.json").write_text('{"dropout": 1.5}')
    with pytest.raises(CheckpointError, match=r"3_Dropout/config.json: dropout 1.5 is not a pro"):
        sentence_transformers_spec(folder)
    (folder / "3_Dropout" / "config.json").write_text("{}")  # sentence-transformers' default
    assert sentence_transformers_spec(folder).dense[2].dropout == 0.2


def test_through_the_onnx_export(dense_folder: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from bertkit.export import OnnxExportConfig, OnnxModel, export_onnx

    path = export_onnx(dense_folder, tmp_path / "x" / "m.onnx", OnnxExportConfig()).path
    got = Embedder.load(path.parent, precision="fp32", model=OnnxModel(path.parent))(TEXTS)
    np.testing.assert_allclose(got, _theirs(dense_folder), rtol=0, atol=1e-5)


def test_finetune_embeddings_trains_and_saves_the_projection(
    dense_folder: Path, tmp_path: Path
) -> None:
    """The Dense modules are trained with the encoder (as sentence-transformers' fit trains
    every module) and saved again; before, such a start folder was refused."""
    from safetensors.torch import load_file

    from bertkit.cli.main import main
    from bertkit.interop.pretrained import load_pretrained
    from bertkit.model.contrastive import BiEncoder
    from bertkit.recipes.finetune_folder import folder_dense_head
    from bertkit.tokenizer import BertTokenizer
    from training.finetune.test_search_finetune import RUN, _data

    # the bi-encoder that training starts from gives the start folder's vectors
    head = folder_dense_head(dense_folder, 32, False)
    start = BiEncoder(load_pretrained(dense_folder, "BertModel"), "cls", head=head).eval()
    batch = BertTokenizer.from_pretrained(dense_folder)(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = start.vectors(batch["input_ids"], batch["attention_mask"])
    ours = torch.nn.functional.normalize(ours, dim=-1).numpy()
    np.testing.assert_allclose(ours, _theirs(dense_folder), rtol=0, atol=1e-5)
    # and in training its Dropout drops values, as sentence-transformers' fit does
    assert [type(m).__name__ for m in head] == ["Linear", "Tanh", "Dropout", "Linear", "Identity"]
    assert head[2].p == 0.1
    x = torch.randn(12, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        kept = head[:3](x)
        torch.manual_seed(0)
        dropped = head[:3].train()(x)
    assert 0.03 < (dropped == 0).float().mean() < 0.2  # 192 values at p 0.1: 19 expected
    mask = dropped != 0
    torch.testing.assert_close(dropped[mask], kept[mask] / 0.9)

    train, beir, _ = _data(tmp_path)
    out = tmp_path / "o"
    argv = ["finetune", "embeddings", "--model", str(dense_folder), "--train", str(train)]
    assert main([*argv, "--dev", str(beir), "--output", str(out), *RUN[:1], "1", *RUN[2:]]) == 0
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert kinds == ["Transformer", "Pooling", "Dense", "Dropout", "Dense", "Normalize"]
    before = load_file(dense_folder / "2_Dense" / "model.safetensors")["linear.weight"]
    after = load_file(out / "2_Dense" / "model.safetensors")["linear.weight"]
    assert after.shape == before.shape and (after - before).abs().max() > 1e-4  # trained
    got = Embedder.load(out, precision="fp32")(TEXTS)
    assert got.shape == (len(TEXTS), 8)
    np.testing.assert_allclose(got, _theirs(out), rtol=0, atol=1e-5)
