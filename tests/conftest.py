"""Suite-wide settings: torch on one thread, no hub access, and (under CI) no silent skips.

Tiny test models are faster on one intra-op thread, and on a shared 2-core machine oversubscribed
threads made them several times slower; no result depends on the thread count. Nothing may be
downloaded at test time (transformers and sentence-transformers load local folders only).

``BERTKIT_REQUIRE_REFERENCES=1`` (set by ``scripts/test.sh``, whose set-up installs every
reference): a test that would skip because a reference package is missing (``pytest.importorskip``)
or the browser is (a skip reason starting ``browser:``) fails instead, so a parity test cannot
vanish from CI unnoticed. Only those skips change: "no GPU", "needs AVX-512" and the like stay
skips. The browser stays optional where ``scripts/setup.sh`` could not install it and left its
reason in ``.venv/.bertkit-browser-missing`` (not root, no apt-get).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:  # property tests: the same examples on every run, no example database in the checkout
    import tempfile

    from hypothesis import settings as _hypothesis
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "bertkit-hypothesis"))
    _hypothesis.register_profile("bertkit", derandomize=True, database=None, deadline=None)
    _hypothesis.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "bertkit"))
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    pass


def pytest_configure(config):
    """Every process a test starts runs this run's kernel paths.

    Each hardware decision is made once here (forced by its environment variable, as CI's
    forced-path runs do, else probed) and exported, so subprocesses (torchrun ranks, a killed
    and resumed CLI run, a server) do not probe again: a probe on cores the test keeps busy can
    choose the other path, and runs compared bit for bit then differ in the last bits (the DDP
    RNG-restore test failed so in 6 of 8 loaded runs). Tests of the probe itself clear these
    variables (``tests/model/test_hardware.py``)."""
    from bertkit import hardware

    made = hardware.decisions()
    for name, d in made.items():
        os.environ[hardware.ENV[name]] = d.choice
    config.bertkit_paths = {name: (d.choice, d.source) for name, d in made.items()}


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip, saying why, where torch sees no CUDA device: CI deselects
    them, and the GPU check's CPU dry run (``benchmarks/gpu_check``) runs the same selection
    as the GPU machine, so one without a ``skipif`` of its own must not fail there."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu: torch sees no CUDA device")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture
def unforced(monkeypatch, tmp_path):
    """No decision forced (the environment's and this run's exports cleared, every decision
    forgotten and restored afterwards) and an empty probe cache, whose folder it returns: for
    tests of the probes themselves, marked ``probe``."""
    from bertkit import hardware

    monkeypatch.setenv("BERTKIT_CACHE_DIR", str(tmp_path / "cache"))
    for name in (*hardware.ENV.values(), "BERTKIT_ONEDNN"):
        monkeypatch.delenv(name, raising=False)
    saved = {name: hardware.force(name, None) for name in hardware.CHOICES}
    yield tmp_path / "cache"
    for name, previous in saved.items():
        hardware.restore(name, previous)


@pytest.fixture(autouse=True)
def _probe_tests_run_unforced(request):
    if request.node.get_closest_marker("probe"):
        request.getfixturevalue("unforced")


def pytest_report_header(config):
    paths = getattr(config, "bertkit_paths", {})
    return "bertkit kernel paths: " + ", ".join(f"{n}={c} ({s})" for n, (c, s) in paths.items())


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global RNG state (tests that need randomness seed their
    own generators too; this keeps an unseeded ``torch.randn`` from making a test flaky)."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _auto_precision_is_fp32(monkeypatch):
    """``--precision auto`` picks bf16 on a CPU where bf16 measures faster than fp32 (the AMD
    EPYC with AVX512-BF16: 1.95x), fp32 elsewhere. Tests that leave the precision at auto compare
    against fp32 references (transformers, a second run, a resumed run), so in-process they run
    auto as fp32 on every machine; tests of the choice itself set ``bf16_speedup`` themselves,
    and the bf16 paths have their own tests under each forced ``bf16`` choice."""
    from bertkit import hardware

    monkeypatch.setattr(hardware, "bf16_speedup", lambda: 0.0)


@pytest.fixture(autouse=True, scope="module")
def _process_wide_kernel_switches():
    """A server turns oneDNN's row bucketing on for its whole process (``kernels.bound_shapes``;
    ``avoid_onednn`` likewise): a module's in-process server must not leave it on for the
    modules after it (test_mfu then counted the padding rows as FLOPs, under oneDNN only).
    Module-scoped, so it wraps the module-scoped server fixtures too."""
    from bertkit.model import kernels

    saved = kernels._bounded, kernels._avoided
    yield
    kernels._bounded, kernels._avoided = saved


# --- hardware paths: every kernel/precision test runs under each forced choice ----------------


@pytest.fixture(params=["onednn", "blas"])
def fp32_path(request):
    """Runs the test with fp32 matmuls forced through oneDNN, then through ATen's BLAS."""
    from bertkit import hardware

    if request.param == "onednn" and not hardware.ONEDNN_AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear")
    with hardware.forced("fp32_matmul", request.param):
        yield request.param


@pytest.fixture(params=["native", "emulated"])
def bf16_path(request):
    """Runs the test with bf16 forced to native oneDNN kernels (where the CPU has them), then to
    autocast's own kernels (what a CPU without native bf16 runs when told to use bf16)."""
    from bertkit import hardware

    if request.param == "native":
        ok, why = hardware.bf16_native_support()
        if not ok:
            pytest.skip(f"no native bf16 path to test on this machine: {why}")
    with hardware.forced("bf16", request.param):
        yield request.param


# --- the tiny fine-tuning checkpoint (tests/support/tiny_glue.py) -------------------------------


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, hidden-32 BertModel (no heads) + vocab.txt, saved with save_pretrained: the
    checkpoint the fine-tuning tests (tests/training/finetune, tests/cli, tests/inference) start
    from. Built once per session, and only where a test asks for it."""
    from support.tiny_glue import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_bert"))


# --- BERTKIT_REQUIRE_REFERENCES: a missing reference package or browser fails -----------------

REQUIRE_ENV = "BERTKIT_REQUIRE_REFERENCES"
BROWSER_SKIP = "browser: "
"""The start of the reason of every skip for want of the browser (tests marked ``browser``)."""
BROWSER_NOTE = Path(__file__).resolve().parents[1] / ".venv" / ".bertkit-browser-missing"
# pytest.importorskip's reasons: the module is missing, or older than asked
_MISSING_MODULE = re.compile(r"could not import '[\w.]+'|module '[\w.]+' has __version__ ")


def required_missing(reason: str, browser_note: Path = BROWSER_NOTE) -> bool:
    """Whether a skip with this ``reason`` is for want of something CI must have: a module
    (``pytest.importorskip``), or the browser where the set-up left no note that it could not
    install it."""
    reason = reason.removeprefix("Skipped: ")
    if reason.startswith(BROWSER_SKIP):
        return not browser_note.is_file()
    return _MISSING_MODULE.match(reason) is not None


def _fail_if_required(report) -> None:
    if not (os.environ.get(REQUIRE_ENV) == "1" and report.skipped):
        return
    if hasattr(report, "wasxfail") or not isinstance(report.longrepr, tuple):
        return
    reason = report.longrepr[2]
    if required_missing(reason):
        report.outcome = "failed"
        report.longrepr = (
            f"{reason.removeprefix('Skipped: ')}\n{REQUIRE_ENV}=1: the set-up "
            "installs every reference, so this skip is a failure"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _fail_if_required(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A module-level ``importorskip`` (or browser skip) skips at collection."""
    report = yield
    _fail_if_required(report)
    return report
