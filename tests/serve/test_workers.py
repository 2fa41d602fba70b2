"""``bertkit serve --workers N``: N processes behind one port, one /metrics over them all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from training.helpers import free_port

from .conftest import wait_http_ready

pytest.importorskip("fastapi")


def test_metrics_sum_every_worker_process(tiny_mlm: Path, tmp_path: Path) -> None:
    """Requests spread over two worker processes; every scrape of /metrics, whichever process
    answers it, counts all of them (each process counted only its own: a scrape saw about
    half), and the processes' shared folder is gone after a SIGTERM."""
    import httpx

    port, sent = free_port(), 32
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    metrics_dirs = tmp_path / "tmp"
    metrics_dirs.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(metrics_dirs)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    argv = ["serve", "--model", str(tiny_mlm), "--port", str(port), "--workers", "2"]
    argv += ["--precision", "fp32", "--device", "cpu", "--threads", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertkit", *argv], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http_ready(base, 90, tmp_path / "serve.log")
        deadline = time.monotonic() + 90

        def post(i: int) -> int:  # a connection each: the processes accept them in turn
            while True:  # /health answered from one process; the other may still be loading
                r = httpx.post(f"{base}/embed", json={"inputs": f"the cat sat {i}"})
                if r.status_code != 503 or time.monotonic() > deadline:
                    return r.status_code
                time.sleep(0.1)

        with ThreadPoolExecutor(16) as pool:
            assert list(pool.map(post, range(sent))) == [200] * sent
        pattern = re.compile(r'^bertkit_request_success_total\{route="/embed"\} (\S+)$', re.M)
        for _ in range(6):
            text = httpx.get(f"{base}/metrics", timeout=5).text
            assert [float(x) for x in pattern.findall(text)] == [sent], text[:2000]
        proc.terminate()
        proc.wait(timeout=30)
        assert list(metrics_dirs.glob("bertkit-metrics-*")) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
