"""load_pretrained / save_pretrained: key table coverage, prefixes, errors, and pickle safety."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit.config import BertConfig
from bertkit.errors import BertkitError, CheckpointError
from bertkit.interop import hf_to_ours, load_pretrained, ours_to_hf, save_pretrained
from bertkit.interop.hf import hf_names
from bertkit.model import HEAD_CLASSES, BertForSequenceClassification, BertModel

CONFIG = dict(
    vocab_size=50,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=24,
    max_position_embeddings=20,
)


def tiny(**overrides) -> BertConfig:
    return BertConfig(**{**CONFIG, **overrides})


def write_dir(path, state: dict, config: BertConfig, architectures=("BertModel",)) -> None:
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"))
    data = {**config.to_dict(), "architectures": list(architectures)}
    (path / "config.json").write_text(json.dumps(data))


@pytest.mark.parametrize("cls_name", sorted(HEAD_CLASSES))
def test_table_covers_every_parameter_and_round_trips(cls_name: str, tmp_path) -> None:
    torch.manual_seed(0)
    model = HEAD_CLASSES[cls_name](tiny(is_decoder=cls_name == "BertLMHeadModel"))
    names = hf_names(model)  # raises if any parameter has no table row
    assert set(names) == set(model.state_dict())
    save_pretrained(model, tmp_path)
    again = load_pretrained(tmp_path)
    assert type(again) is type(model)
    for (k, a), (k2, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(a, b), k
    assert not again.training  # returned in eval mode


def test_qkv_is_fused_in_query_key_value_order() -> None:
    model = BertModel(tiny())
    hf = ours_to_hf(model)
    qkv = model.encoder.layers[1].attention.qkv.weight
    assert torch.equal(hf["encoder.layer.1.attention.self.key.weight"], qkv[16:32])
    assert "cls.predictions.decoder.weight" not in hf


def test_loads_with_and_without_bert_prefix_and_reports_unused(tmp_path) -> None:
    torch.manual_seed(0)
    pre = HEAD_CLASSES["BertForPreTraining"](tiny())
    hf = ours_to_hf(pre)  # "bert."-prefixed, with cls.* heads
    bare = {k.removeprefix("bert."): v for k, v in hf.items() if k.startswith("bert.")}
    encoder = BertModel(tiny())
    _, report = hf_to_ours(encoder, bare)
    assert not report.missing and not report.unused
    _, report = hf_to_ours(encoder, hf)
    assert report.unused == sorted(k for k in hf if k.startswith("cls."))
    # An encoder-only checkpoint into a classifier: head and nothing else newly initialised.
    write_dir(tmp_path, bare, tiny())
    clf = load_pretrained(tmp_path, BertForSequenceClassification, num_labels=4)
    assert clf.classifier.out_features == 4
    torch.testing.assert_close(clf.bert.embeddings.word.weight, pre.bert.embeddings.word.weight)
    with pytest.raises(CheckpointError, match=r"strict load.*classifier\.weight"):
        load_pretrained(tmp_path, "BertForSequenceClassification", strict=True)


def test_missing_encoder_weight_and_unknown_key_are_errors(tmp_path) -> None:
    state = ours_to_hf(BertModel(tiny()))
    missing = dict(state)
    del missing["encoder.layer.1.attention.self.value.bias"]
    with pytest.raises(
        CheckpointError, match=r"missing encoder weights: encoder\.layers\.1\.attention\.qkv\.bias"
    ):
        hf_to_ours(BertModel(tiny()), missing)
    with pytest.raises(CheckpointError, match=r"not BERT weights: lm_head\.dense\.weight"):
        hf_to_ours(BertModel(tiny()), {**state, "lm_head.dense.weight": torch.zeros(2)})


def test_config_weight_shape_mismatch_is_a_clear_error(tmp_path) -> None:
    write_dir(tmp_path, ours_to_hf(BertModel(tiny())), tiny(intermediate_size=32))
    with pytest.raises(CheckpointError) as err:
        load_pretrained(tmp_path)
    message = str(err.value)
    assert "shape mismatch" in message and "encoder.layer.0.intermediate.dense.weight" in message
    assert "(24, 16)" in message and "(32, 16)" in message


def test_another_models_config_is_a_short_error_naming_the_first_mismatches(tmp_path) -> None:
    """A config.json of another size (convert --config, a copied folder) mismatches every tensor
    and lacks layers: the line names the first few and counts the rest (it listed them all, some
    10,000 characters for MiniLM's config on a 2-layer checkpoint)."""
    write_dir(tmp_path, ours_to_hf(BertModel(tiny())), tiny(hidden_size=32, num_hidden_layers=6))
    with pytest.raises(CheckpointError) as err:
        load_pretrained(tmp_path)
    message = str(err.value)
    shapes, missing = message.split(" | ")
    assert shapes.startswith(f"{tmp_path}: shape mismatch (does config.json match the weights?): ")
    assert shapes.count("checkpoint shape") == 4 and shapes.endswith(" more")
    assert missing.startswith("missing encoder weights: encoder.layers.2.")
    assert missing.count("encoder.layers.") == 4 and missing.endswith(" more")
    assert len(message) < 1200, len(message)


def test_no_weights_and_no_config_are_clear_errors(tmp_path) -> None:
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(tiny().to_dict()))
    with pytest.raises(CheckpointError, match="no weights found") as err:
        load_pretrained(tmp_path)
    assert "ONNX" not in str(err.value)
    # an `export onnx` folder (config.json, model.onnx) passed where weights are read: say so
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"it holds model\.onnx, an ONNX export: `bertkit"):
        load_pretrained(tmp_path)


def test_a_run_folder_names_the_model_folder_inside_it(tmp_path) -> None:
    """``--model run1`` where pretrain wrote the model to run1/model: the error points there."""
    run = tmp_path / "run1"
    write_dir(run / "model", BertModel(tiny()).state_dict(), tiny())
    with pytest.raises(CheckpointError, match=rf"no config\.json; did you mean {run / 'model'}\?"):
        load_pretrained(run)


class _Payload:
    """Unpickling this calls open(canary, "w"): what a malicious checkpoint would do."""

    def __init__(self, canary: str) -> None:
        self.canary = canary

    def __reduce__(self):
        return (open, (self.canary, "w"))


def malicious_checkpoint(directory, canary) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(tiny().to_dict()))
    with open(directory / "pytorch_model.bin", "wb") as f:
        pickle.dump({"embeddings.word_embeddings.weight": _Payload(str(canary))}, f)


def test_pickle_checkpoint_refused_unless_allowed_and_then_weights_only(tmp_path) -> None:
    canary = tmp_path / "canary"
    malicious_checkpoint(tmp_path / "model", canary)
    # Negative control: plain unpickling really would run the payload.
    with open(tmp_path / "model" / "pytorch_model.bin", "rb") as f:
        pickle.load(f)
    assert canary.exists()
    canary.unlink()
    with pytest.raises(CheckpointError, match=r"pickle file.*allow_pickle=True"):
        load_pretrained(tmp_path / "model")
    assert not canary.exists()
    with pytest.raises(CheckpointError, match="weights_only"):
        load_pretrained(tmp_path / "model", allow_pickle=True)
    assert not canary.exists()


def test_allowed_pickle_with_plain_tensors_loads(tmp_path) -> None:
    torch.manual_seed(0)
    model = BertModel(tiny())
    (tmp_path / "config.json").write_text(json.dumps(tiny().to_dict()))
    torch.save(ours_to_hf(model), tmp_path / "pytorch_model.bin")
    loaded = load_pretrained(tmp_path, allow_pickle=True)
    torch.testing.assert_close(loaded.embeddings.word.weight, model.embeddings.word.weight)


def test_saved_files_are_complete(tmp_path) -> None:
    model = HEAD_CLASSES["BertForMaskedLM"](tiny())
    save_pretrained(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"] and config["model_type"] == "bert"
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "cls.predictions.bias" in keys and "bert.embeddings.word_embeddings.weight" in keys
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_write_that_fails_names_the_final_file_not_the_work_folder(tmp_path, monkeypatch) -> None:
    """The hidden work folder is gone when the error is read; the user knows the output folder.
    A third-party writer's own OSError (the tokenizer's) names its final place too."""
    import errno

    import bertkit.io

    out = tmp_path / "m"

    def full(fd) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(bertkit.io.os, "fsync", full)
        with pytest.raises(BertkitError) as caught:
            save_pretrained(BertModel(tiny()), out)
    message = str(caught.value)
    assert message == f"{out / 'model.safetensors'}: write failed (No space left on device)"
    assert isinstance(caught.value.__cause__, BertkitError)  # atomic_write's, chained

    class FullDisk:
        def save_pretrained(self, directory) -> None:
            raise OSError(errno.ENOSPC, "No space left on device", str(directory / "vocab.txt"))

    with pytest.raises(BertkitError) as caught:
        save_pretrained(BertModel(tiny()), out, FullDisk())
    assert str(caught.value) == f"{out / 'vocab.txt'}: write failed (No space left on device)"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_a_save_that_fails_half_way_keeps_the_previous_folder(tmp_path) -> None:
    """The tokenizer's files fail after the weights are written: the folder is as it was, never
    new weights beside the old config.json, and no work folder is left."""
    torch.manual_seed(0)
    save_pretrained(BertModel(tiny()), tmp_path / "m")
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}

    class FullDisk:
        def save_pretrained(self, directory) -> None:
            (directory / "vocab.txt").write_text("[PAD]\n")
            raise OSError(28, "No space left on device")

    torch.manual_seed(1)
    with pytest.raises(OSError, match="No space left"):
        save_pretrained(BertModel(tiny()), tmp_path / "m", FullDisk())
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before
