"""bertkit export onnx: parity in ONNX Runtime against bertkit fp32 (<= 1e-4 at real tokens), dynamic
axes, transformers' output names, the files beside the graph, int8 size, clear errors."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from bertkit.cli.main import main
from bertkit.export import OnnxExportConfig, OnnxModel, export_onnx
from bertkit.interop import load_pretrained

from .conftest import FAMILY_HEADS

# (batch, sequence) of two calls through one file; every batch has a padded row
SHAPES = ((2, 7), (5, 19))


def batch(shape: tuple[int, ...], vocab: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    mask[-1, ..., shape[-1] // 2 :] = 0
    types = torch.zeros(shape, dtype=torch.long)
    types[..., 1:3] = 1
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types}


def max_diff(ref, got, mask: torch.Tensor) -> dict[str, float]:
    """Per output field: max |ref - got|, over real tokens where the output is per token."""
    out = {}
    for name, value in vars(got).items():
        if value is None:
            continue
        want = getattr(ref, name)
        d = (value - want).abs()
        if d.shape[: mask.dim()] == mask.shape:
            d = d[mask.bool()]
        out[name] = float(d.max())
    return out


def check_parity(folder: Path, path: Path, head: str, tol: float = 1e-4) -> None:
    ours = load_pretrained(folder, head).eval()
    onnx = OnnxModel(path)
    vocab = ours.config.vocab_size
    for seed, shape in enumerate(SHAPES):
        shape = (shape[0], 2, shape[1]) if head == "BertForMultipleChoice" else shape
        inputs = batch(shape, vocab, seed)
        with torch.no_grad():
            want = ours(**inputs)
        got = onnx(**inputs)
        assert set(onnx.output_names) <= set(vars(got))
        diffs = max_diff(want, got, inputs["attention_mask"])
        assert diffs and max(diffs.values()) <= tol, (head, shape, diffs)


@pytest.mark.parametrize("head", FAMILY_HEADS)
def test_every_head_matches_bertkit_in_onnxruntime(tiny_heads, head: str, tmp_path: Path):
    result = export_onnx(tiny_heads[head], tmp_path / "m.onnx", OnnxExportConfig())
    assert result.head == head  # auto: config.json's architectures
    check_parity(tiny_heads[head], result.path, head)


def test_regressor_and_fused_graph(tiny_heads, tmp_path: Path):
    result = export_onnx(
        tiny_heads["regressor"], tmp_path / "r.onnx", OnnxExportConfig(optimize=True)
    )
    assert result.fused.get("Attention", 0) >= 1  # ORT recognised bertkit's attention
    check_parity(tiny_heads["regressor"], result.path, "BertForSequenceClassification")


def test_output_names_follow_transformers(tiny_heads, tmp_path: Path):
    import onnxruntime as ort

    want = {
        "BertModel": ["last_hidden_state", "pooler_output"],
        "BertForSequenceClassification": ["logits"],
        "BertForTokenClassification": ["logits"],
        "BertForQuestionAnswering": ["start_logits", "end_logits"],
        "BertForMultipleChoice": ["logits"],
        "BertForMaskedLM": ["logits"],
    }
    for head, names in want.items():
        path = export_onnx(tiny_heads[head], tmp_path / head / "m.onnx", OnnxExportConfig()).path
        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert [i.name for i in s.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
        assert [o.name for o in s.get_outputs()] == names
        dims = s.get_inputs()[0].shape
        assert all(isinstance(d, str) for d in dims), dims  # every input axis is dynamic


@pytest.fixture(scope="module")
def minilm_exports(minilm: Path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("minilm_onnx")
    argv = [
        "export",
        "onnx",
        "--model",
        str(minilm),
        "--output",
        str(root / "plain" / "model.onnx"),
    ]
    assert main(argv) == 0
    return {"plain": root / "plain" / "model.onnx"}


def test_minilm_export_parity_and_tokenizer_files(minilm_exports, minilm: Path):
    path = minilm_exports["plain"]
    check_parity(minilm, path, "BertModel")
    for name in ("vocab.txt", "tokenizer_config.json", "config.json", "modules.json"):
        assert (path.parent / name).is_file(), name
    assert (path.parent / "vocab.txt").read_bytes() == (minilm / "vocab.txt").read_bytes()


def test_minilm_embeddings_through_the_exported_folder(minilm_exports, minilm: Path):
    from bertkit.inference import Embedder

    texts = ["A man is playing a guitar.", "hello", "The new movie is awesome, said the critic."]
    want = Embedder.load(minilm, device="cpu", precision="fp32")(texts)
    folder = minilm_exports["plain"].parent
    got = Embedder.load(folder, device="cpu", precision="fp32", model=OnnxModel(folder))(texts)
    assert np.abs(got - want).max() <= 1e-5  # sentence-transformers pooling came along


def test_int8_file_is_smaller_and_close(tiny_heads, tmp_path: Path):
    folder = tiny_heads["BertForSequenceClassification"]
    fp32 = export_onnx(folder, tmp_path / "a" / "m.onnx", OnnxExportConfig(optimize=True))
    int8 = export_onnx(
        folder, tmp_path / "b" / "m.onnx", OnnxExportConfig(optimize=True, quantize="int8")
    )
    assert (
        int8.bytes < 0.7 * fp32.bytes
    )  # a 32-wide model: graph structure is a third of it (MiniLM: 0.25)
    check_parity(folder, int8.path, "BertForSequenceClassification", tol=0.1)
    assert OnnxModel(int8.path).quantized == "int8"


def test_cli_shows_the_steps_and_ends_with_size_and_time(tiny_heads, tmp_path, capsys, monkeypatch):
    out = tmp_path / "m.onnx"
    folder = str(tiny_heads["BertForSequenceClassification"])
    monkeypatch.setenv("BERTKIT_PROGRESS", "1")  # the bar, off when stderr is not a terminal
    argv = ["export", "onnx", "--model", folder, "--output", str(out), "--optimize"]
    assert main([*argv, "--quantize", "int8"]) == 0
    err = capsys.readouterr().err
    for step in ("tracing", "fusing", "quantizing"):
        assert step in err  # the bar names the step under way
    assert "3/3" in err and "step/s" in err
    assert re.fullmatch(
        rf"wrote {re.escape(str(out))} \(BertForSequenceClassification: logits; \d+\.\d MiB, "
        r"int8 weights; fused .*\) in \d+\.\ds",
        err.strip().splitlines()[-1],
    )
    assert main(argv) == 0  # fp32 weights: no int8 named
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert " MiB; fused " in last and "int8" not in last


def test_missing_onnxruntime_is_one_line_naming_the_extra(
    tiny_heads, tmp_path: Path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    argv = [
        "export",
        "onnx",
        "--model",
        str(tiny_heads["BertModel"]),
        "--output",
        str(tmp_path / "m.onnx"),
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install 'bertkit[onnx]'" in err and "onnxruntime" in err
    assert not (tmp_path / "m.onnx").exists()


def test_bad_requests_are_one_line_errors(tiny_heads, tmp_path: Path, capsys):
    from bertkit.errors import ConfigError

    folder = str(tiny_heads["BertModel"])
    for extra, words in (
        (["--output", str(tmp_path / "m.txt")], "must end in .onnx"),
        (["--output", str(tmp_path / "m.onnx"), "--opset", "11"], "opset must be >= 14"),
        (
            ["--output", str(tmp_path / "m.onnx"), "--head", "masked-lm"],
            "no masked-LM head weights",
        ),
        (  # past the exporter's newest: torch printed its whole graph and a traceback
            ["--output", str(tmp_path / "m.onnx"), "--opset", "99"],
            f"--opset 99: torch {torch.__version__}'s exporter writes opsets 14 to ",
        ),
    ):
        assert main(["export", "onnx", "--model", folder, *extra]) == 1
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and words in err, err
    with pytest.raises(ConfigError, match="quantize must be one of none, int8"):
        OnnxExportConfig(quantize="int4")


def test_a_failed_export_keeps_the_previous_one(tiny_heads, tmp_path: Path, monkeypatch):
    """The files beside the graph fail (a bad tokenizer_config.json, a full disk): the folder
    keeps the previous export whole, never the new graph beside the old configs."""
    from bertkit.errors import ConfigError
    from bertkit.export import onnx as export

    out = tmp_path / "m.onnx"
    export_onnx(tiny_heads["BertModel"], out, OnnxExportConfig())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def bad_tokenizer(*args, **kwargs):
        raise ConfigError("tokenizer_config.json: do_lower_case must be true or false")

    monkeypatch.setattr(export.BertTokenizer, "from_pretrained", bad_tokenizer)
    with pytest.raises(ConfigError, match="do_lower_case"):
        export_onnx(tiny_heads["BertForSequenceClassification"], out, OnnxExportConfig())
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_another_models_folder_is_refused_and_kept(tiny_heads, tmp_path: Path, capsys):
    """`export onnx --model qa --output ner/model.onnx` rewrote ner's config.json and task file
    beside ner's weights: that model was lost. It is refused, the folder untouched; the model's
    own folder stays a valid target (its files are the ones written)."""
    import shutil

    other = tmp_path / "other"
    shutil.copytree(tiny_heads["BertForTokenClassification"], other)
    before = {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()}
    source = str(tiny_heads["BertForSequenceClassification"])
    argv = ["export", "onnx", "--model", source, "--output", str(other / "model.onnx")]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"bertkit export: error: {other} holds another model's weights (model.safetensors): the "
        "export's config.json and tokenizer files would replace that model's; write the .onnx "
        f"into a folder of its own, or into {source} itself"
    )
    assert {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()} == before
    own = tmp_path / "own"
    shutil.copytree(tiny_heads["BertForSequenceClassification"], own)
    assert main(["export", "onnx", "--model", str(own), "--output", str(own / "m.onnx")]) == 0
