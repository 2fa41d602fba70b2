"""bertkit serve --backend onnx: an exported file behind the same routes, answering what the file
computes (ONNX Runtime called directly here) and what the PyTorch backend answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from bertkit.cli.main import main
from bertkit.tokenizer import BertTokenizer

from .conftest import serve

TEXTS = ["the cat sat on the mat", "a good movie", "the dog was very bad , very bad"]


@pytest.fixture(scope="module")
def exported_encoder(tiny_mlm: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("onnx_encoder") / "model.onnx"
    argv = [
        "export",
        "onnx",
        "--model",
        str(tiny_mlm),
        "--head",
        "encoder",
        "--output",
        str(out),
        "--optimize",
    ]
    assert main(argv) == 0
    return out


def test_embed_equals_the_files_output(exported_encoder: Path):
    import onnxruntime as ort

    session = ort.InferenceSession(str(exported_encoder), providers=["CPUExecutionProvider"])
    tok = BertTokenizer.from_pretrained(exported_encoder.parent)
    want = []
    for text in TEXTS:  # one at a time: no padding, no batching on this side
        ids = np.array([tok.encode(text).input_ids], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }
        hidden = session.run(["last_hidden_state"], feeds)[0][0]
        v = hidden.mean(0)
        want.append(v / np.linalg.norm(v))
    with serve(models=[f"enc={exported_encoder.parent}"], backend="onnx") as client:
        info = client.get("/info").json()["models"][0]
        assert info["backend"] == "onnx" and "fill-mask" not in info["capabilities"]
        r = client.post("/embed", json={"inputs": TEXTS})
        assert r.status_code == 200
        assert np.abs(np.asarray(r.json()) - np.stack(want)).max() <= 1e-5


def test_classifier_answers_as_the_torch_backend(tiny_classifier: Path, tmp_path: Path):
    out = tmp_path / "cls" / "model.onnx"
    assert main(["export", "onnx", "--model", str(tiny_classifier), "--output", str(out)]) == 0
    body = {"inputs": ["the movie was good", "the movie was awful"]}
    with serve(models=[str(tiny_classifier)]) as client:
        want = client.post("/predict", json=body).json()
    with serve(models=[str(out.parent)], backend="onnx") as client:
        got = client.post("/predict", json=body).json()
    assert [[x["label"] for x in row] for row in got] == [[x["label"] for x in row] for row in want]
    diff = max(abs(a["score"] - b["score"]) for ra, rb in zip(got, want) for a, b in zip(ra, rb))
    assert diff <= 1e-5


def _load_error(folder: Path) -> str:
    import time

    from fastapi.testclient import TestClient

    from bertkit.serve.app import create_app
    from bertkit.serve.settings import ServeSettings

    settings = ServeSettings(models=[str(folder)], backend="onnx", device="cpu")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for _ in range(200):
            info = client.get("/info").json()["models"][0]
            if "error" in info:
                break
            time.sleep(0.05)
        assert client.get("/health").status_code == 503
    return info["error"]


def test_onnx_backend_needs_an_exported_file_of_the_folders_head(
    tiny_classifier: Path, tmp_path: Path
):
    assert "no .onnx file" in _load_error(tiny_classifier)
    out = tmp_path / "enc" / "model.onnx"  # the fine-tuned folder's encoder only
    assert (
        main(
            [
                "export",
                "onnx",
                "--model",
                str(tiny_classifier),
                "--head",
                "encoder",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert "served as BertForSequenceClassification" in _load_error(out.parent)
