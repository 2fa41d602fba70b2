"""scripts/wheel_check.sh's pip step (scripts/pip_quiet.sh): silent when pip succeeds; when it
fails, pip's own error lines and a non-zero exit (the script once piped pip through
``grep -v ... || true``, which hid both); a network failure is retried once, nothing else is.
Every pip run here is ``--dry-run``: nothing is installed."""

from __future__ import annotations

import socket
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "wheel_check.sh"


def _wheel(folder: Path, name: str, requires: list[str]) -> Path:
    """A metadata-only wheel: enough for pip to resolve its dependencies."""
    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", meta)
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


def _pip_install(*args: str) -> subprocess.CompletedProcess:
    """The script's step, ``pip_install PYTHON ARGS...``, with pip's options in ARGS."""
    line = 'source scripts/pip_quiet.sh && pip_install "$@"'
    argv = ["bash", "-c", line, "pip_install", sys.executable, "--dry-run", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_script_installs_through_the_checked_step() -> None:
    text = SCRIPT.read_text()
    assert "source scripts/pip_quiet.sh" in text
    installs = [ln for ln in text.splitlines() if "pip install" in ln or "pip_install" in ln]
    assert len(installs) == 3 and all(ln.startswith("pip_install ") for ln in installs), installs


def test_success_is_silent(tmp_path: Path) -> None:
    r = _pip_install("--no-index", str(_wheel(tmp_path, "plain", [])))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_an_unsatisfiable_dependency_shows_pips_error_and_fails(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, "needs_missing", ["bertkit-no-such-dependency>=1"])
    r = _pip_install("--no-index", str(wheel))
    assert r.returncode == 1
    assert f"pip install --dry-run --no-index {wheel} failed:" in r.stderr
    assert "ERROR: No matching distribution found for bertkit-no-such-dependency>=1" in r.stderr
    assert "retrying" not in r.stderr  # not a network error: one try


def test_a_network_error_is_retried_once_then_shown(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    index = ["--isolated", "--retries", "1", "--timeout", "5"]
    index += ["--index-url", f"http://127.0.0.1:{port}/simple"]
    r = _pip_install(*index, "bertkit-no-such-package")
    assert r.returncode == 1
    assert r.stderr.count("a network error; retrying once") == 1
    assert "Connection refused" in r.stderr and "ERROR: No matching distribution" in r.stderr
