"""Stage 1: every ``gpu``-marked test, run by pytest on CUDA, its junit XML read into the JSON.

The tests are the files under ``tests/`` that mark anything ``gpu`` (found by reading them, so
a new one is picked up, and the rest of the suite is not even collected: a module importing a
package the GPU machine lacks cannot break this stage). Among them: bf16 against fp32, exact
resume, the one-process NCCL group (``tests/training/test_cuda_path.py``), the packed-attention
kernels against the padded path (``tests/model/test_packed_attention.py``) and foreach LAMB
against its loop. ``CUBLAS_WORKSPACE_CONFIG`` (set by the driver for this stage) lets cuBLAS
be deterministic, which the resume test needs to expect equality. On a machine without CUDA
(the dry run) the same selection runs and every test skips (``tests/conftest.py``).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.gpu_check.common import context, finish

ROOT = Path(__file__).resolve().parents[2]


def gpu_test_files(root: Path = ROOT) -> list[str]:
    """Test files (relative to ``root``) that mark something ``gpu``."""
    found = [p for p in sorted((root / "tests").rglob("test_*.py")) if "mark.gpu" in p.read_text()]
    return [str(p.relative_to(root)) for p in found]


def read_junit(path: Path) -> list[dict[str, Any]]:
    """One dict per test case: ``id``, ``outcome`` (passed, failed, error, skipped), ``seconds``,
    ``message`` (the first line of a failure, error or skip reason) and the ``properties`` the
    test recorded (``record_property``)."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = "failed" if kind == "failure" else kind
                message = (node.get("message") or node.text or "").strip().splitlines()[:1]
                message = message[0][:300] if message else ""
                break
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cases.append(
            {
                "id": f"{case.get('classname')}::{case.get('name')}",
                "outcome": outcome,
                "seconds": float(case.get("time") or 0),
                "message": message,
                "properties": props,
            }
        )
    return cases


def main(argv: list[str] | None = None) -> int:
    ctx = context(1, argv)
    files = gpu_test_files()
    junit = ctx.work / "stage1_junit.xml"
    junit.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        *files,
    ]
    ctx.write(command=" ".join(cmd[1:]), files=files)
    print("stage 1:", " ".join(cmd), flush=True)
    try:  # stop pytest a little before the driver would stop this stage, to say so here
        rc = subprocess.run(cmd, cwd=ROOT, timeout=max(ctx.seconds_left() - 5, 5)).returncode
    except subprocess.TimeoutExpired:
        ctx.write(status="timed out", reason="pytest ran past the stage's cap")
        return 1
    if not junit.exists():
        return finish(ctx, False, f"pytest exited {rc} without a junit XML")
    cases = read_junit(junit)
    counts = {
        k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")
    }
    recorded = {c["id"]: c["properties"] for c in cases if c["properties"]}
    ctx.write(pytest_exit_code=rc, counts=counts, tests=cases, recorded=recorded)
    if counts["failed"] or counts["error"] or rc not in (0, 5):
        bad = [c["id"] for c in cases if c["outcome"] in ("failed", "error")]
        return finish(ctx, False, f"pytest exit {rc}; failed: {', '.join(bad) or 'none listed'}")
    if not counts["passed"]:
        ctx.write(status="skipped", reason=f"all {counts['skipped']} gpu tests skipped (no CUDA)")
        return 0
    return finish(ctx, True)


if __name__ == "__main__":
    sys.exit(main())
