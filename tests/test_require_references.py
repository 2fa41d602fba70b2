"""``BERTKIT_REQUIRE_REFERENCES=1`` (tests/conftest.py): a skip for a missing reference package
or browser fails, every other skip stays a skip. Proved on a generated test file run by pytest
in a subprocess with this suite's conftest as its plugin, once with the switch and once without."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _suite_conftest():
    """tests/conftest.py by its path: ``import conftest`` names whichever conftest pytest
    imported last."""
    spec = importlib.util.spec_from_file_location("_suite_conftest", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_conftest = _suite_conftest()
BROWSER_NOTE, REQUIRE_ENV, required_missing = (
    _conftest.BROWSER_NOTE,
    _conftest.REQUIRE_ENV,
    _conftest.required_missing,
)

CASES = """
import pytest


def test_missing_module():
    pytest.importorskip("bertkit_no_such_module")


def test_missing_submodule():
    pytest.importorskip("bertkit_no_such_module.sub")


def test_browser():
    pytest.skip("browser: chromium not found")


def test_no_gpu():
    pytest.skip("gpu: torch sees no CUDA device")


@pytest.mark.skipif(True, reason="needs AVX-512")
def test_no_avx512():
    pass


def test_reason_naming_a_module_later():
    pytest.skip("this torch build has no oneDNN: could not import 'x'")


@pytest.mark.xfail(reason="known")
def test_xfail():
    raise AssertionError


def test_passes():
    pass
"""
MODULE_SKIP = (
    'import pytest\n\npytest.importorskip("bertkit_no_such_module")\n\n\ndef test_x():\n    pass\n'
)


def outcomes(tmp_path: Path, require: bool) -> dict[str, str]:
    """{test name: passed/failure/skipped/error} (junit's words) of the generated files under ``require``."""
    tmp_path.mkdir()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])
    if require:
        env[REQUIRE_ENV] = "1"
    report = tmp_path / "junit.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "conftest",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        f"--junitxml={report}",
        str(tmp_path),
    ]
    subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    found = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        found[case.get("name")] = kinds[0] if kinds else "passed"
    return found


def test_the_switch_fails_missing_references_only(tmp_path: Path) -> None:
    browser = "skipped" if BROWSER_NOTE.is_file() else "failure"
    common = {
        "test_no_gpu": "skipped",
        "test_no_avx512": "skipped",
        "test_reason_naming_a_module_later": "skipped",
        "test_xfail": "skipped",
        "test_passes": "passed",
    }
    off = outcomes(tmp_path / "off", require=False)
    on = outcomes(tmp_path / "on", require=True)
    assert off == {
        **common,
        "test_missing_module": "skipped",
        "test_missing_submodule": "skipped",
        "test_browser": "skipped",
        "test_module_skip": "skipped",
    }
    assert on == {
        **common,
        "test_missing_module": "failure",
        "test_missing_submodule": "failure",
        "test_browser": browser,
        "test_module_skip": "error",  # a collection error
    }


@pytest.mark.parametrize(
    ("reason", "note", "required"),
    [
        ("Skipped: could not import 'transformers': No module named 'transformers'", False, True),
        ("could not import 'sentence_transformers.util': No module named 'x'", False, True),
        ("module 'onnx' has __version__ '1.0', required is: '1.16'", False, True),
        ("browser: chromium not found", False, True),
        ("browser: chromium not found", True, False),  # the set-up could not install it
        ("gpu: torch sees no CUDA device", False, False),
        ("needs AVX-512", False, False),
        ("no native bf16 path to test on this machine: could not import 'x'", False, False),
    ],
)
def test_which_reasons_are_required(
    tmp_path: Path, reason: str, note: bool, required: bool
) -> None:
    if note:
        (tmp_path / "note").write_text("not running as root\n")
    assert required_missing(reason, tmp_path / "note") is required
