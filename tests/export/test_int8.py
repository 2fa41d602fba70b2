"""Native int8 (``--precision int8``): each int8 product within its quantization error bound, the
encoder close to fp32 on the real MiniLM, the unpadded and length-sorted paths intact, the CLI
flag, and one-line errors off the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit import precision as P
from bertkit.cli.main import main
from bertkit.errors import ConfigError
from bertkit.interop import load_pretrained
from bertkit.model.quantize import (
    ACTIVATION_LEVELS,
    Int8Linear,
    quantize_activations,
    quantize_int8,
)

from .conftest import FIXTURES

TEXTS = [
    "A man is playing a guitar.",
    "hello",
    "The new movie is awesome, said the critic.",
    "Paris is the capital and most populous city of France, with an estimated population.",
]


def error_bound(x: torch.Tensor, w: torch.Tensor, weight_levels: int) -> torch.Tensor:
    """Worst case |x W^T - x~ W~^T| per output: rounding moves each x by at most half its step
    (range / ACTIVATION_LEVELS) and each w by half its row's step (max|w| / weight_levels)."""
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    dx = (hi - lo) / ACTIVATION_LEVELS / 2
    dw = w.abs().amax(1) / weight_levels / 2  # (N,)
    return dx * w.abs().sum(1) + x.abs() @ dw[None, :].expand(x.shape[1], -1) + dx * dw * x.shape[1]


@pytest.mark.parametrize("weight_levels", [None, 63])  # this CPU's choice, and the 7-bit one
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_int8_linear_is_within_its_quantization_bound(activation: str, weight_levels):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 48, generator=g) * 2 + 0.3
    w, b = torch.randn(24, 48, generator=g) * 0.1, torch.randn(24, generator=g)
    layer = Int8Linear(w, b, activation, weight_levels)
    got = layer(x)
    exact = F.linear(x, w, b)
    want = F.gelu(exact) if activation == "gelu" else exact
    bound = error_bound(x, w, layer.weight_levels) * (
        1.13 if activation == "gelu" else 1.0
    )  # GELU's slope <= 1.13
    err = (got - want).abs()
    assert bool((err <= bound + 1e-5).all())
    assert float(err.max()) > 0  # really quantized, not an fp32 pass-through
    # the bound is not vacuous: it is far below the outputs themselves
    assert float(bound.max()) < 0.2 * float(want.abs().max())


def test_the_cpus_weight_codes_never_saturate_the_products():
    """The extreme codes (activations all 255, weights all at their limit, either sign) give the
    exact integer dot products: on a CPU without VNNI the int16 pair sums of 8-bit weights would
    saturate (measured: 1,048,544 for 2,072,640), so weights use 7 bits there."""
    from bertkit.model.quantize import cpu_weight_levels

    k, wl = 256, cpu_weight_levels()
    layer = Int8Linear(torch.tensor([[1.0], [-1.0]]).expand(2, k), None)  # codes +wl and -wl
    got = layer._product(torch.full((3, k), float(ACTIVATION_LEVELS)))  # codes 255, scale 1
    want = torch.tensor([[ACTIVATION_LEVELS * k, -ACTIVATION_LEVELS * k]] * 3).float()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)  # scales 1 and 1/wl: float rounding
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, ACTIVATION_LEVELS + 1, (16, 1024), generator=g).float()
    x[0] = ACTIVATION_LEVELS
    w = torch.randint(-wl, wl + 1, (32, 1024), generator=g).float()
    w[:, 0] = wl  # every row's scale is exactly 1
    exact = (x.double() @ w.double().T).float()
    assert torch.equal(Int8Linear(w, None)._product(x), exact)


@pytest.mark.parametrize("choice", ["8bit", "7bit"])
def test_weight_width_follows_the_int8_decision(choice):
    from bertkit import hardware
    from bertkit.model import quantize

    ok, why = hardware.available("int8_weights", choice)
    if not ok:
        pytest.skip(f"int8_weights={choice} cannot run here: {why}")
    want = 127 if choice == "8bit" else 63
    with hardware.forced("int8_weights", choice):
        assert quantize.cpu_weight_levels() == want
        assert Int8Linear(torch.ones(2, 4), None).weight_levels == want
        assert ("7-bit weights" in quantize.describe()) == (want == 63)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("levels", [255, 127])
def test_quantized_codes_cover_the_range(fused: bool, levels: int, monkeypatch):
    from bertkit.model import quantize

    monkeypatch.setattr(quantize, "_FUSED_QUANTIZE", fused)  # torch's fused pass, and the fallback
    x = torch.tensor([[-1.0, 0.0, 0.5, 3.0], [2.0, -0.25, 1.0, 0.125]])
    codes, scale, zero = quantize_activations(x, levels)
    assert codes.dtype == torch.uint8 and codes.shape == x.shape
    assert int(codes.min()) == 0 and int(codes.max()) == levels
    assert abs(scale - 4.0 / levels) < 1e-6 and (codes[0, 1] == zero)  # 0.0 is exact
    assert torch.allclose((codes.float() - zero) * scale, x, atol=scale / 2 + 1e-6)


@pytest.fixture(scope="module")
def minilm_models(minilm: Path):
    return load_pretrained(minilm).eval(), quantize_int8(load_pretrained(minilm))


def test_minilm_int8_encoder_stays_close_to_fp32(minilm_models, minilm: Path):
    """Tolerance: mean-pooled sentence vectors keep cosine >= 0.98 with fp32 (measured 0.985-0.995
    on these texts; a broken scale or a transposed weight gives < 0.5), padded or unpadded."""
    from bertkit.inference import Embedder

    fp32 = Embedder.load(minilm, device="cpu", precision="fp32")
    int8 = Embedder.load(minilm, device="cpu", precision="int8")
    assert isinstance(int8.model.encoder.layers[0].feed_forward.up, Int8Linear)
    a, b = fp32(TEXTS), int8(TEXTS)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() >= 0.98, cos
    # each input alone (no padding, its own activation scales) against the length-sorted batch
    alone = np.concatenate([int8([t]) for t in TEXTS])
    cos = (alone * b).sum(1) / np.linalg.norm(alone, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() >= 0.98, cos


def test_int8_unpadded_and_padded_paths_agree(minilm_models):
    """Per token, each int8 path stays close to fp32 and to the other one. One activation scale
    per call over different rows (padding rows included or not): close, not equal. Measured per
    token on seeds 3-5: min 0.963-0.982 against fp32 and 0.963-0.972 between the paths with 7-bit
    weights (AVX2 EPYC); a padding row leaking into the real ones gives far less."""
    fp32, int8 = minilm_models
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1000, 5000, (4, 24), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 10:] = mask[3, 5:] = 0
    with torch.inference_mode():
        ref = fp32(ids * mask, mask).last_hidden_state
        packed = int8(ids * mask, mask).last_hidden_state
        padded = int8(ids * mask, mask, unpad=False).last_hidden_state
    real = mask.bool()
    for a, b in ((packed, ref), (padded, ref), (packed, padded)):
        cos = F.cosine_similarity(a[real], b[real], dim=-1)
        assert float(cos.min()) >= 0.95 and float(cos.mean()) >= 0.98, cos


def test_quantizing_twice_changes_nothing(minilm_models):
    _, int8 = minilm_models
    before = [type(m) for m in int8.modules()]
    quantize_int8(int8)
    assert [type(m) for m in int8.modules()] == before


def test_int8_is_a_cpu_only_inference_precision():
    assert P.choose("int8", "cpu") == P.resolve("int8", "cpu") == "int8"
    with pytest.raises(ConfigError, match="int8 runs on the CPU only") as e:
        P.choose("int8", "cuda")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="precision must be one of"):
        P.check("int8")  # training's choices: no int8


def test_cli_precision_int8_embed_predict_evaluate(
    minilm: Path, tiny_sst2: Path, tmp_path: Path, capsys
):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    for precision in ("fp32", "int8"):
        argv = [
            "embed",
            "--model",
            str(minilm),
            "--input",
            str(tmp_path / "in.txt"),
            "--device",
            "cpu",
            "--output",
            str(tmp_path / f"{precision}.npy"),
            "--precision",
            precision,
        ]
        assert main(argv) == 0
    assert "int8" in capsys.readouterr().err
    a, b = np.load(tmp_path / "fp32.npy"), np.load(tmp_path / "int8.npy")
    assert np.abs(a - b).max() > 0 and (a * b).sum(1).min() >= 0.98  # normalised vectors
    data = str(FIXTURES / "task_glue" / "SST-2" / "dev.tsv")
    for command in ("predict", "evaluate"):
        for precision in ("fp32", "int8"):
            out = tmp_path / f"{command}-{precision}.json"
            argv = [
                command,
                "--model",
                str(tiny_sst2),
                "--device",
                "cpu",
                "--precision",
                precision,
                "--input" if command == "predict" else "--data",
                data,
                "--output",
                str(out),
            ]
            assert main(argv) == 0
    rows = {
        p: [json.loads(x) for x in (tmp_path / f"predict-{p}.json").read_text().splitlines()]
        for p in ("fp32", "int8")
    }
    probs = {p: np.array([r["probabilities"] for r in rows[p]]) for p in rows}
    assert (
        probs["int8"].shape == probs["fp32"].shape
        and np.abs(probs["int8"] - probs["fp32"]).max() < 0.05
    )
    metrics = json.loads((tmp_path / "evaluate-int8.json").read_text())
    assert set(metrics) == set(json.loads((tmp_path / "evaluate-fp32.json").read_text()))


def test_training_refuses_int8(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--precision", "int8"])
    assert "invalid choice: 'int8'" in capsys.readouterr().err
