"""``bertkit env``: versions, the CPU and its SIMD features, threads, CUDA devices, and every
hardware decision (:mod:`bertkit.hardware`) with its reason, as :mod:`bertkit.env_report`
gathers them."""

from __future__ import annotations

import argparse
import json

HELP = "show the machine, the versions and which kernels bertkit picks here (and why)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads to probe at (default: torch's)"
    )


def format_report(r: dict) -> str:
    """The report as aligned ``key: value`` lines (the benchmark harness prints this too)."""
    cpu = r["cpu"]
    features = ", ".join(k for k, v in cpu["features"].items() if v) or "none"
    cuda = "; ".join(
        f"{d['index']}: {d['name']} ({d['memory_gib']} GiB, sm {d['capability']})"
        for d in r["cuda"]
    )
    cuda = cuda or "none"
    lines = [
        f"bertkit         {r['bertkit']}",
        f"python          {r['python']} ({r['platform']})",
        f"torch           {r['torch']} (BLAS: {r['blas']}; oneDNN: {'yes' if r['onednn'] else 'no'}"
        f"{_supported(r['torch_supported'])})",
        f"transformers    {r['transformers'] or '-'}; tokenizers {r['tokenizers'] or '-'}",
        f"cpu             {cpu['model']} [{cpu['class']}], {cpu['logical_cores']} logical cores, "
        f"{cpu['arch']}",
        f"cpu features    {features}; ATen kernels: {cpu['torch_capability']}",
        f"threads         torch {r['threads']['torch']}, inter-op {r['threads']['interop']}",
        f"cuda            {cuda}",
    ]
    for name, d in r["decisions"].items():
        lines.append(f"{name:<15} {d['choice']} ({d['source']}: {d['reason']})")
    if r["bf16_speedup"]:
        lines.append(
            f"bf16 speed      {r['bf16_speedup']:.2f}x fp32 (a 256 x 256 -> 1024 linear, autocast)"
        )
    if r.get("int8"):
        lines.append(f"int8            {r['int8']}")
    lines.append(f"probe cache     {r['probe_cache'] or 'off'}")
    return "\n".join(lines)


def _supported(s: dict) -> str:
    if not s["range"]:
        return ""
    if s["ok"] is False:
        return f"; OUTSIDE bertkit's supported range {s['range']}"
    return f"; bertkit supports {s['range']}"


def run(args: argparse.Namespace) -> int:
    import logging

    import torch

    from bertkit import __version__, env_report

    logging.getLogger("bertkit.hardware").setLevel(logging.WARNING)  # the report says it all
    from bertkit.errors import ConfigError

    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    from bertkit.model.quantize import describe

    r = env_report.report(__version__)
    r["int8"] = describe()  # --precision int8's kernel
    print(json.dumps(r, indent=2) if args.json else format_report(r))
    return 0
