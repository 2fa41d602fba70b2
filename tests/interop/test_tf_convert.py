"""``bertkit convert``: Google's TensorFlow BERT checkpoint -> a model folder that bertkit and
transformers load with the same outputs, checked against transformers loading the TensorFlow
variables through an independent name table written out in this file.

The fixture (tests/fixtures/tf_bert) was written by real TensorFlow with Google's variable names,
AdamWeightDecayOptimizer's slots and global_step (scripts/make_tf_checkpoint_fixture.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.errors import BertkitError, CheckpointError
from bertkit.interop import load_pretrained
from bertkit.interop import tf_convert as tfc
from bertkit.interop.tf_checkpoint import read_tf_checkpoint
from bertkit.interop.tf_convert import TfConvertSettings, convert_tf_checkpoint, tf_to_hf_name
from bertkit.tokenizer import BertTokenizer

from .tf_bundle import write_bundle

transformers = pytest.importorskip("transformers")

BERT = Path(__file__).resolve().parents[1] / "fixtures" / "tf_bert"
N_MODEL = 46  # 5 embedding + 2 x 16 layer + 2 pooler + 7 head variables


def convert(*args: str | Path) -> int:
    return main(["convert", *map(str, args)])


def test_names_and_kinds() -> None:
    hf, transposed = tf_to_hf_name("bert/encoder/layer_11/output/LayerNorm/gamma")
    assert (hf, transposed) == ("bert.encoder.layer.11.output.LayerNorm.weight", False)
    hf, transposed = tf_to_hf_name("cls/seq_relationship/output_weights")  # stored (2, H)
    assert (hf, transposed) == ("cls.seq_relationship.weight", False)
    assert tf_to_hf_name("bert/pooler/dense/kernel") == ("bert.pooler.dense.weight", True)
    names = [
        "bert/pooler/dense/kernel/adam_v",
        "bert/embeddings/word_embeddings/Adam_1",
        "a/LAMB",
        "a/Momentum",
        "beta1_power",
        "global_step",
        "output_weights",
        "cls/predictions/output_bias",
    ]
    kinds = [tfc.variable_kind(n) for n in names]
    assert kinds == ["optimizer"] * 5 + ["global_step", "other", "model"]


def google_to_transformers(layers: int) -> dict[str, tuple[str, bool]]:
    """Google's names -> (transformers' names, transposed?), written out here, not via bertkit."""
    out = {
        f"bert/embeddings/{t}": (f"bert.embeddings.{t}.weight", False)
        for t in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    }
    dense = {
        "bert/pooler/dense": "bert.pooler.dense",
        "cls/predictions/transform/dense": "cls.predictions.transform.dense",
    }
    norms = {
        "bert/embeddings/LayerNorm": "bert.embeddings.LayerNorm",
        "cls/predictions/transform/LayerNorm": "cls.predictions.transform.LayerNorm",
    }
    for i in range(layers):
        tf, hf = f"bert/encoder/layer_{i}", f"bert.encoder.layer.{i}"
        for part in (
            "attention/self/query",
            "attention/self/key",
            "attention/self/value",
            "attention/output/dense",
            "intermediate/dense",
            "output/dense",
        ):
            dense[f"{tf}/{part}"] = f"{hf}.{part.replace('/', '.')}"
        for part in ("attention/output/LayerNorm", "output/LayerNorm"):
            norms[f"{tf}/{part}"] = f"{hf}.{part.replace('/', '.')}"
    for tf, hf in dense.items():
        out |= {f"{tf}/kernel": (f"{hf}.weight", True), f"{tf}/bias": (f"{hf}.bias", False)}
    for tf, hf in norms.items():
        out |= {f"{tf}/gamma": (f"{hf}.weight", False), f"{tf}/beta": (f"{hf}.bias", False)}
    return out | {
        "cls/predictions/output_bias": ("cls.predictions.bias", False),
        "cls/seq_relationship/output_weights": ("cls.seq_relationship.weight", False),
        "cls/seq_relationship/output_bias": ("cls.seq_relationship.bias", False),
    }


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, tuple[Path, tfc.TfConversion]]:
    base = tmp_path_factory.mktemp("tf")
    acts = {"default": None, "gelu_new": "gelu_new"}
    return {
        k: (base / k, convert_tf_checkpoint(BERT, base / k, TfConvertSettings(hidden_act=act)))
        for k, act in acts.items()
    }


def outputs(model, enc, transformers_model: bool) -> tuple[torch.Tensor, ...]:
    """(hidden states, MLM logits at real tokens, NSP logits)."""
    with torch.no_grad():
        if transformers_model:
            out = model(**enc, output_hidden_states=True)
            hidden = out.hidden_states[-1]
        else:
            out = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
            hidden = model.bert(
                enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]
            ).last_hidden_state
    real = enc["attention_mask"].bool()
    return hidden[real], out.prediction_logits[real], out.seq_relationship_logits


def batch(folder: Path) -> dict[str, torch.Tensor]:
    tok = BertTokenizer.from_pretrained(folder)
    return dict(
        tok(
            ["the cat sat on the mat .", "he was born in paris , france"],
            ["a dog ran in the park", "she wrote a book"],
            padding=True,
            return_tensors="pt",
        )
    )


def max_diffs(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> list[float]:
    return [(x - y).abs().max().item() for x, y in zip(a, b, strict=True)]


def test_conversion_counts(converted) -> None:
    folder, result = converted["default"]
    assert (result.tensors_read, result.skipped_optimizer) == (N_MODEL, 2 * N_MODEL)
    assert result.skipped_global_step and result.skipped_other == []
    assert result.model_class == "BertForPreTraining" and result.do_lower_case
    assert result.summary()[1] == "skipped 92 optimizer variables and global_step"
    leftovers = sorted(p.name for p in folder.parent.iterdir())
    assert leftovers == ["default", "gelu_new"]  # no staging folders


@pytest.mark.parametrize("act", ["default", "gelu_new"])
def test_bertkit_matches_transformers_from_the_folder_and_from_the_tf_variables(
    converted, act
) -> None:
    folder, _ = converted[act]
    enc = batch(folder)
    ours = outputs(load_pretrained(folder), enc, False)
    ref, info = transformers.BertForPreTraining.from_pretrained(folder, output_loading_info=True)
    assert not any(info.values()), info
    assert ref.config.hidden_act == {"default": "gelu"}.get(act, act)
    assert max(max_diffs(ours, outputs(ref.eval(), enc, True))) < 1e-5
    # transformers loaded from the TF variables by the independent name table above
    table = google_to_transformers(2)
    variables = read_tf_checkpoint(BERT)
    assert {n for n in variables if tfc.variable_kind(n) == "model"} == set(table)
    state = {
        hf: torch.from_numpy(variables[tf].T.copy() if t else variables[tf])
        for tf, (hf, t) in table.items()
    }
    indep = transformers.BertForPreTraining(transformers.BertConfig.from_pretrained(folder)).eval()
    missing, unexpected = indep.load_state_dict(state, strict=False)
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert not unexpected and set(missing) <= tied
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in state.items())
    assert max(max_diffs(ours, outputs(indep, enc, True))) < 1e-5
    # negative control: one square kernel left untransposed is caught
    query = "bert.encoder.layer.0.attention.self.query.weight"
    indep.load_state_dict({query: state[query].T.contiguous()}, strict=False)
    assert max(max_diffs(ours, outputs(indep, enc, True))) > 1e-3


def test_gelu_and_gelu_new_differ_measurably(converted) -> None:
    erf, tanh = (converted[a][0] for a in ("default", "gelu_new"))
    assert json.loads((tanh / "config.json").read_text())["hidden_act"] == "gelu_new"
    enc = batch(erf)
    hidden, mlm, _ = max_diffs(
        outputs(load_pretrained(erf), enc, False), outputs(load_pretrained(tanh), enc, False)
    )
    assert 1e-4 < hidden < 1e-2 and 1e-4 < mlm < 1e-2  # measured: 6.0e-4 and 3.8e-3


def test_unknown_model_variable_and_shape_mismatch_are_errors(tmp_path) -> None:
    arrays = read_tf_checkpoint(BERT)
    extra = {
        "bert/encoder/layer_0/attention/self/extra/kernel": np.ones((32, 32), np.float32),
        "bert/encoder/layer_2/output/dense/bias": np.ones(32, np.float32),
    }
    write_bundle(tmp_path / "bert_model.ckpt", arrays | extra)
    for name in ("bert_config.json", "vocab.txt"):
        shutil.copy(BERT / name, tmp_path / name)
    message = (
        r"2 variables have no place in a BertForPreTraining of .*bert_config\.json: "
        + ", ".join(extra)
    )
    with pytest.raises(CheckpointError, match=message):
        convert_tf_checkpoint(tmp_path, tmp_path / "out")
    config = json.loads((BERT / "bert_config.json").read_text()) | {"intermediate_size": 48}
    (tmp_path / "small.json").write_text(json.dumps(config))
    settings = TfConvertSettings(config=tmp_path / "small.json")
    with pytest.raises(CheckpointError, match=r"small\.json: shape mismatch .*intermediate"):
        convert_tf_checkpoint(BERT, tmp_path / "out", settings)
    assert not (tmp_path / "out").exists()


def test_a_fine_tuned_checkpoint_without_heads_becomes_a_bert_model(tmp_path) -> None:
    """run_classifier.py's checkpoints: bert/ (with Adam slots) plus output_weights/output_bias."""
    arrays = {k: v for k, v in read_tf_checkpoint(BERT).items() if k.startswith("bert/")}
    arrays |= {
        "output_weights": np.ones((3, 32), np.float32),
        "output_bias": np.zeros(3, np.float32),
    }
    write_bundle(tmp_path / "model.ckpt", arrays)
    settings = TfConvertSettings(config=BERT / "bert_config.json", vocab=BERT / "vocab.txt")
    result = convert_tf_checkpoint(tmp_path / "model.ckpt", tmp_path / "out", settings)
    assert (result.model_class, result.tensors_read) == ("BertModel", N_MODEL - 7)
    assert (
        result.summary()[1]
        == "skipped 78 optimizer variables; 2 other variables: output_bias, output_weights"
    )
    assert type(load_pretrained(tmp_path / "out")).__name__ == "BertModel"


def test_a_failed_write_leaves_nothing_and_keeps_the_old_folder(tmp_path, monkeypatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")

    def failing(model, directory, tokenizer):
        (Path(directory) / "model.safetensors").write_bytes(b"partial")
        raise BertkitError("disk full")

    monkeypatch.setattr(tfc, "write_model_files", failing)
    with pytest.raises(BertkitError, match="disk full"):
        convert_tf_checkpoint(BERT, out, TfConvertSettings(overwrite=True))
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (out / "keep.txt").read_text() == "old"


def test_cli(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert convert("--tf-checkpoint", BERT / "bert_model.ckpt", "--output", out, "--cased") == 0
    err = capsys.readouterr().err
    assert "read 46 model tensors into BertForPreTraining" in err
    assert "do_lower_case False, as given" in err
    assert load_pretrained(out).config.hidden_act == "gelu"
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is False
    assert convert("--tf-checkpoint", BERT, "--output", out) == 1
    refused = (
        f"bertkit convert: error: {out}: exists and is not empty (pass --overwrite to replace)"
    )
    assert capsys.readouterr().err == refused + "\n"
    assert convert("--tf-checkpoint", BERT, "--output", out, "--overwrite") == 0
    assert "do_lower_case True, guessed from vocab.txt" in capsys.readouterr().err


def test_cli_shows_progress_in_bytes_and_ends_with_time_and_rate(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("BERTKIT_PROGRESS", "1")  # the bar, off when stderr is not a terminal
    assert convert("--tf-checkpoint", BERT / "bert_model.ckpt", "--output", out) == 0
    err = capsys.readouterr().err
    assert "convert: 100%" in err and "99.2k/99.2k" in err and "B/s" in err  # bytes: an ETA
    assert re.fullmatch(
        rf"bertkit convert: wrote {re.escape(str(out))} in \d+\.\ds \(0\.1 MB of tensors, "
        r"\d+\.\d MB/s\)",
        err.strip().splitlines()[-1],
    )


def test_cli_errors_are_one_line_naming_the_file(tmp_path, capsys) -> None:
    bare = tmp_path / "bare"  # the checkpoint and vocab.txt, no bert_config.json
    bare.mkdir()
    for f in [*BERT.glob("bert_model.ckpt.*"), BERT / "vocab.txt"]:
        shutil.copy(f, bare / f.name)
    (tmp_path / "big.txt").write_text((BERT / "vocab.txt").read_text() + "extra\n")
    config = ["--config", BERT / "bert_config.json"]
    for extra, message in [
        ([], f"{bare / 'bert_config.json'}: config file not found"),
        ([*config, "--vocab", tmp_path / "v.txt"], "v.txt: vocabulary not found (pass --vocab)"),
        (
            [*config, "--vocab", tmp_path / "big.txt"],
            "big.txt: 101 tokens, but the config's vocab_size is 100",
        ),
        ([*config, "--hidden-act", "swish"], "--hidden-act: hidden_act must be one of"),
        (["--tf-checkpoint", tmp_path / "none"], "none.index: no such file"),
    ]:
        assert convert("--tf-checkpoint", bare, "--output", tmp_path / "o", *extra) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "o").exists()
