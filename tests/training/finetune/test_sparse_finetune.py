"""``bertkit finetune sparse``: SPLADE training from a masked-LM folder. The loss equals
sentence-transformers' SpladeLoss on the same vectors; training raises sparse retrieval quality;
the selected dev score equals ``bertkit evaluate`` on the saved folder; the folder loads in
sentence-transformers' SparseEncoder with bertkit's vectors; a folder without MLM head weights
is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.errors import CheckpointError
from training.finetune.test_search_finetune import RUN, _data, _evaluate


@pytest.fixture(scope="module")
def tiny_mlm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_model's vocabulary and sizes, with a masked-LM head (bertkit's BertForMaskedLM)."""
    from bertkit.model import BertForMaskedLM
    from support.tiny_glue import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_mlm"), model_class=BertForMaskedLM)


def _finetune(model: Path, train: Path, dev: Path, out: Path, *extra: str) -> int:
    args = ["finetune", "sparse", "--model", str(model), "--train", str(train), "--dev", str(dev)]
    return main([*args, "--output", str(out), *RUN, *extra])


def test_loss_equals_sentence_transformers_splade_loss(tmp_path: Path) -> None:
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sparse_encoder.losses import (
        SparseMultipleNegativesRankingLoss,
        SpladeLoss,
    )

    from bertkit.config import BertConfig
    from bertkit.model import BertForMaskedLM
    from bertkit.model.pooling import SpladeSpec
    from bertkit.model.splade import SpladeEncoder, splade_loss
    from support.tiny_splade import saved_sparse_encoder

    _folder, encoder = saved_sparse_encoder(tmp_path)
    reference = SpladeLoss(
        encoder,
        SparseMultipleNegativesRankingLoss(encoder),
        document_regularizer_weight=3e-2,  # large enough that the regularisers count here
        query_regularizer_weight=5e-2,
    )
    texts = [["the cat", "a dog ran", "big red house"], ["cat on mat", "dog road", "red tree"]]
    texts.append(["blue river", "small house", "the road"])  # a column of hard negatives
    features = [encoder.tokenize(c) for c in texts]
    encoder.eval()  # no dropout: SpladeLoss' own forward makes the same vectors as ours
    with torch.no_grad():
        theirs_value = sum(reference(features, None).values())
    columns = [encoder(dict(f))["sentence_embedding"].detach() for f in features]
    ours_in = [c.clone().requires_grad_(True) for c in columns]
    ours = splade_loss(ours_in[0], torch.cat(ours_in[1:]), 5e-2, 3e-2)
    assert float(ours.detach()) == pytest.approx(float(theirs_value), abs=1e-6)
    # gradients on the same vectors: the components SpladeLoss adds up
    ref_in = [c.clone().requires_grad_(True) for c in columns]
    theirs = (
        reference.loss.compute_loss_from_embeddings(ref_in, None)
        + reference.document_regularizer_weight
        * reference.document_regularizer.compute_loss_from_embeddings(torch.cat(ref_in[1:]))
        + reference.query_regularizer_weight
        * reference.query_regularizer.compute_loss_from_embeddings(ref_in[0])
    )
    theirs.backward()
    ours.backward()
    for a, b in zip(ours_in, ref_in, strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-7, rtol=1e-5)
    # the regularisers are in: without them the loss is another number
    bare = splade_loss(ours_in[0], torch.cat(ours_in[1:]), 0.0, 0.0)
    assert abs(float(bare) - float(theirs_value)) > 1e-4
    assert st is not None
    # the encoder's objective cuts a batch's rows (queries, then every candidate) as SpladeLoss
    weights = {"query_regularizer_weight": 5e-2, "document_regularizer_weight": 3e-2}
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32,
    )  # fmt: skip
    model = SpladeEncoder(BertForMaskedLM(config), SpladeSpec(), **weights)
    rows, labels = torch.cat(columns), torch.arange(len(texts[0]))
    got = model.objective(rows, labels, None)
    assert float(got) == pytest.approx(float(theirs_value), abs=1e-6)


def test_chunked_checkpointed_pooling_has_the_whole_gradient() -> None:
    """splade_vectors' slices (checkpointed under autograd) give the vectors and gradients of
    pooling all positions at once."""
    from bertkit.config import BertConfig
    from bertkit.model import BertForMaskedLM
    from bertkit.model.pooling import SpladeSpec, splade_pool
    from bertkit.model.splade import splade_vectors

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    m = BertForMaskedLM(config)
    with torch.no_grad():
        m.mlm.bias.normal_()
    word = m.bert.embeddings.word.weight
    mask = torch.ones(3, 10)
    mask[1, 6:] = 0
    for strategy in ("max", "sum"):
        spec = SpladeSpec(strategy)
        h1 = torch.randn(3, 10, 16, requires_grad=True)
        h2 = h1.detach().clone().requires_grad_(True)
        a = splade_vectors(m.mlm, word, h1, mask, spec, chunk=3)
        b = splade_pool(m.mlm(h2, word), mask, strategy)
        torch.testing.assert_close(a, b)
        w = torch.randn_like(a)
        (a * w).sum().backward()
        (b * w).sum().backward()
        torch.testing.assert_close(h1.grad, h2.grad)


def test_sparse_learns_and_saves_a_sparse_encoder_folder(
    tiny_mlm_model: Path, tmp_path: Path
) -> None:
    train, beir, _ = _data(tmp_path)
    before = _evaluate(tiny_mlm_model, beir, tmp_path / "before.json", "--pooling", "splade")
    out = tmp_path / "splade"
    assert _finetune(tiny_mlm_model, train, beir, out) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    selected = metrics["selected"]["dev"]["dev"]
    after = _evaluate(out, beir, tmp_path / "after.json")["retrieval"]
    assert after["MRR@10"] == pytest.approx(selected["MRR@10"], abs=1e-6)  # evaluate's scorer
    assert after["MRR@10"] > before["retrieval"]["MRR@10"] + 0.25, (before, after)
    assert not (out / "bertkit_task.json").exists()
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert kinds == ["MLMTransformer", "SpladePooling"]

    st = pytest.importorskip("sentence_transformers")
    from bertkit.inference.sparse import SparseEmbedder

    texts = ["good movie", "the plot was very dull really"]
    ours = SparseEmbedder.load(out, precision="fp32")(texts)
    theirs = st.SparseEncoder(str(out), device="cpu")
    assert theirs.similarity_fn_name == "dot"
    dense = theirs.encode(texts, convert_to_tensor=True, convert_to_sparse_tensor=False).numpy()
    mine = np.zeros_like(dense)
    for row, v in zip(mine, ours, strict=True):
        row[v.indices] = v.values
    np.testing.assert_allclose(mine, dense, atol=1e-5)


def test_sum_pooling_and_log1p_relu_are_saved(tiny_mlm_model: Path, tmp_path: Path) -> None:
    train, beir, _ = _data(tmp_path)
    out = tmp_path / "splade"
    extra = ["--splade-pooling", "sum", "--splade-activation", "log1p_relu", "--epochs", "1"]
    assert _finetune(tiny_mlm_model, train, beir, out, *extra) == 0
    from bertkit.interop.sentence_folder import splade_spec

    spec = splade_spec(out)
    assert (spec.pooling_strategy, spec.activation_function) == ("sum", "log1p_relu")
    # fine-tuned again without the flags, the SparseEncoder folder keeps its own SPLADE pooling,
    # its named prompts and its default prompt (encode's)
    versions = out / "config_sentence_transformers.json"
    saved = json.loads(versions.read_text())
    saved.update(prompts={"classify": "the plot "}, default_prompt_name="classify")
    versions.write_text(json.dumps(saved), encoding="utf-8")
    again = tmp_path / "again"
    assert _finetune(out, train, beir, again, "--epochs", "1") == 0
    spec = splade_spec(again)
    assert (spec.pooling_strategy, spec.activation_function) == ("sum", "log1p_relu")
    kept = json.loads((again / "config_sentence_transformers.json").read_text())
    assert (kept["prompts"], kept["default_prompt_name"]) == ({"classify": "the plot "}, "classify")


def test_a_folder_without_mlm_head_weights_is_refused(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """Refused from the weights' names, before the training data are read and windowed."""
    from bertkit.recipes import finetune as recipe

    def read(*_):
        raise AssertionError("the training data were read before the head was checked")

    monkeypatch.setattr(recipe, "build_task", read)
    train, beir, _ = _data(tmp_path)
    assert _finetune(tiny_model, train, beir, tmp_path / "out", "--epochs", "1") != 0
    assert "no masked-LM head weights" in capsys.readouterr().err
    assert not (tmp_path / "out" / "config.json").exists()


def test_the_library_refuses_a_folder_without_mlm_head_weights(tiny_model: Path) -> None:
    from bertkit.recipes.finetune import sparse_encoder
    from bertkit.tasks.sparse import SparseAdapter

    adapter = SparseAdapter("sparse", "t", 16)
    with pytest.raises(CheckpointError, match=r"no masked-LM head weights \(cls\.predictions"):
        sparse_encoder(tiny_model, adapter, False, {})


def test_the_torch_free_splade_settings_match_the_model_s() -> None:
    from dataclasses import fields

    from bertkit.model import pooling
    from bertkit.tasks import TaskSettings
    from bertkit.tasks import sparse as task

    assert task.SPLADE_STRATEGIES == pooling.SPLADE_STRATEGIES
    assert task.SPLADE_ACTIVATIONS == pooling.SPLADE_ACTIVATIONS
    spec = pooling.SpladeSpec()
    adapter = task.SparseAdapter("sparse", "t", 16)
    settings = {f.name: f.default for f in fields(TaskSettings)}
    for name in ("pooling_strategy", "activation_function"):
        assert getattr(adapter, name) == getattr(spec, name)
        assert settings[name] is None  # the starting folder's, else the model's default
    for name in ("query_regularizer_weight", "document_regularizer_weight"):
        assert getattr(adapter, name) == settings[name]
    with pytest.raises(Exception, match="query_regularizer_weight must be zero or positive"):
        task.SparseAdapter("sparse", "t", 16, query_regularizer_weight=-1.0)


def test_starts_from_a_sentence_transformers_sparse_encoder_folder(tmp_path: Path) -> None:
    """A SparseEncoder folder's masked-LM weights are the starting point (not a new head)."""
    from bertkit.recipes.finetune import sparse_encoder
    from bertkit.tasks.sparse import SparseAdapter
    from support.tiny_splade import saved_sparse_encoder

    folder, reference = saved_sparse_encoder(tmp_path)
    model = sparse_encoder(folder, SparseAdapter("sparse", "t", 12), False, {})
    tok = reference.tokenize(["the cat sat on the mat"])
    with torch.no_grad():
        ours = model.vectors(tok["input_ids"], tok["attention_mask"])
    theirs = reference.encode(["the cat sat on the mat"], convert_to_tensor=True)
    torch.testing.assert_close(ours, theirs.to_dense(), atol=1e-5, rtol=1e-5)
