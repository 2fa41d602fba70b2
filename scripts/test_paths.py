"""Run the test suite once under each forced kernel path, so that no test can pass only on the
path this machine's probe picks.

bertkit makes each hardware-dependent choice once per process (:mod:`bertkit.hardware`: fp32
products on oneDNN or BLAS, bf16 native / emulated / off, int8 weights of 8 or 7 bits, CPU bf16
attention in the fused kernel or two matmuls), and each
can be forced by an environment variable. ``scripts/test.sh`` runs the suite on the probe's
picks; this script re-runs it under ``RUNS``, which between them force every choice of every
decision (checked below against :data:`bertkit.hardware.CHOICES`, so a new decision or choice
without a run fails here). The third run also caps oneDNN, ATen and MKL at AVX2, the
instruction set of the AVX2-only CPUs bertkit runs on; the last two run only the files where
the choice they force matters (:data:`BF16_ATTENTION_TESTS`). A choice this CPU cannot run
(native bf16 or 8-bit int8 weights without the instructions) is left to the probe in that run
and named in the log.

    .venv/bin/python scripts/test_paths.py              # the default suite, every run
    .venv/bin/python scripts/test_paths.py --slow       # the slow suite on the fp32 paths
    .venv/bin/python scripts/test_paths.py --only 1 -- tests/model   # one run, some files

Tests of the probes themselves (marker ``probe``) clear every forced setting, so they run in
``scripts/test.sh`` and are left out here. One line per run: its settings, passed, failed,
skipped, seconds; the exit status is 1 when any run failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bertkit import hardware  # noqa: E402

AVX2_CAP = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}

BF16_ATTENTION_TESTS = [
    "tests/model/test_kernels.py",
    "tests/model/test_model.py",
    "tests/model/test_precision.py",
    "tests/model/test_packed_attention.py",
    "tests/training/test_loop.py",
    "tests/cli/test_finetune.py",
    "tests/cli/test_embed_fillmask.py",
    "tests/interop/test_interop_minilm.py",
]
"""The test files that run attention in bf16 on the CPU (training, inference, parity)."""

Run = tuple[dict[str, str], dict[str, str]] | tuple[dict[str, str], dict[str, str], list[str]]
"""(forced decisions, other environment[, test files: the whole suite when left out])."""

RUNS: list[Run] = [
    (
        {
            "fp32_matmul": "onednn",
            "bf16": "native",
            "int8_weights": "8bit",
            "bf16_attention": "fused",
        },
        {},
    ),
    (
        {
            "fp32_matmul": "blas",
            "bf16": "emulated",
            "int8_weights": "7bit",
            "bf16_attention": "matmul",
        },
        {},
    ),
    ({"bf16": "fp32"}, AVX2_CAP),
    # The mixed attention choices matter only where attention runs in bf16 on the CPU: emulated
    # bf16 (which every CPU runs) over the test files that do that.
    ({"bf16": "emulated", "bf16_attention": "fused_long"}, {}, BF16_ATTENTION_TESTS),
    ({"bf16": "emulated", "bf16_attention": "fused_inference"}, {}, BF16_ATTENTION_TESTS),
]
SLOW_RUNS: list[Run] = [
    ({"fp32_matmul": "onednn"}, {}),
    ({"fp32_matmul": "blas"}, {}),
]


def check_coverage() -> None:
    """Every choice of every decision is forced by some run."""
    forced = {(n, c) for settings in RUNS for n, c in settings[0].items()}
    missing = [
        f"{n}={c}"
        for n, choices in hardware.CHOICES.items()
        for c in choices
        if (n, c) not in forced
    ]
    if missing:
        sys.exit(f"test_paths.py: no run forces {', '.join(missing)}; add it to RUNS")


def environment(decisions: dict[str, str], extra: dict[str, str]) -> tuple[dict, list[str]]:
    """The run's environment, and a note for each forced choice this machine cannot run."""
    env = {k: v for k, v in os.environ.items() if k not in hardware.ENV.values()}
    env.pop("BERTKIT_ONEDNN", None)
    env.update(extra)
    notes = []
    for name, choice in decisions.items():
        ok, why = available_under(name, choice, extra)
        if ok:
            env[hardware.ENV[name]] = choice
        else:
            notes.append(f"{name}={choice} not run here ({why}): left to the probe")
    return env, notes


def available_under(name: str, choice: str, extra: dict[str, str]) -> tuple[bool, str]:
    """:func:`bertkit.hardware.available` in a process with ``extra`` in its environment."""
    if not extra:
        return hardware.available(name, choice)
    code = (
        f"from bertkit import hardware; ok, why = hardware.available({name!r}, {choice!r}); "
        "print(int(ok), why)"
    )
    env = {**os.environ, **extra, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    ok, _, why = out.stdout.strip().partition(" ")
    return ok == "1", why or " ".join(out.stderr.strip().splitlines()[-1:])


def run(index: int, total: int, settings: Run, marker: str, args: list[str]) -> bool:
    """One run of pytest under ``settings``; ``args`` (files, -k, ...) replace its test files."""
    decisions, extra, *files = settings
    args = args or (files[0] if files else [])
    env, notes = environment(decisions, extra)
    label = " ".join(
        f"{k}={v}"
        for k, v in {
            **extra,
            **{hardware.ENV[n]: c for n, c in decisions.items() if hardware.ENV[n] in env},
        }.items()
    )
    print(f"== kernel paths {index}/{total}: {label}", flush=True)
    for note in notes:
        print(f"   {note}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        start = time.monotonic()
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            marker,
            f"--junitxml={report}",
            *args,
        ]
        rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        seconds = time.monotonic() - start
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if report.exists():
            suite = ET.parse(report).getroot()
            suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
            counts = {k: int(suite.get(k, 0)) for k in counts}
    failed = counts["failures"] + counts["errors"]
    passed = counts["tests"] - failed - counts["skipped"]
    print(
        f"== kernel paths {index}/{total}: {label}: {passed} passed, {failed} failed, "
        f"{counts['skipped']} skipped, {seconds:.0f} s (pytest rc {rc})",
        flush=True,
    )
    return rc == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slow", action="store_true", help="the slow suite, on each fp32 path")
    ap.add_argument("--only", type=int, help="run only this run number (1-based)")
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (files, -k, ...)")
    a = ap.parse_args()
    check_coverage()
    runs = SLOW_RUNS if a.slow else RUNS
    marker = "slow and not gpu" if a.slow else "not slow and not gpu and not probe"
    chosen = [(i, r) for i, r in enumerate(runs, 1) if a.only in (None, i)]
    results = [run(i, len(runs), r, marker, a.pytest_args) for i, r in chosen]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
