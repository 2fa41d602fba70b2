"""The torch APIs bertkit calls beyond the long-stable core exist, with the arguments it passes,
in the installed torch: the lowest supported version (2.11, the GPU machine's) runs this file
too (README, "Supported torch versions"). The CUDA-only ones are checked by name and signature
here, so a CPU machine catches a missing API before a GPU run does."""

from __future__ import annotations

import inspect
from importlib.metadata import requires

import pytest
import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version


def _params(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def test_the_installed_torch_is_in_the_declared_range():
    spec = next(r for r in requires("bertkit") if r.replace(" ", "").startswith("torch"))
    declared = SpecifierSet(spec.replace(" ", "")[len("torch") :].split(";")[0])
    assert Version(torch.__version__.split("+")[0]) in declared, (torch.__version__, declared)


def test_attention_kernels_of_the_cuda_path():
    from torch.nn.attention.varlen import varlen_attn  # model/attention.py, packed tokens

    assert {"window_size"} <= _params(varlen_attn)
    assert {"min_seqlen", "max_seqlen"} <= _params(torch.nested.nested_tensor_from_jagged)


def test_optimizers_and_precision_apis():
    assert {"fused", "foreach"} <= _params(torch.optim.AdamW)
    for name in (
        "_foreach_norm",
        "_foreach_mul_",
        "_foreach_add_",
        "_foreach_div",
        "_foreach_sqrt",
        "_foreach_addcmul_",
    ):  # training/optim.py (LAMB)
        assert callable(getattr(torch, name)), name
    assert torch.get_autocast_dtype("cpu") in (torch.bfloat16, torch.float16)
    assert torch.is_autocast_enabled("cpu") is False
    assert torch.amp.GradScaler("cpu") is not None
    assert callable(torch.compiler.is_compiling)
    assert isinstance(torch.backends.cpu.get_cpu_capability(), str)


def test_cuda_apis_exist_by_name():
    for name in (
        "Event",
        "get_device_properties",
        "get_device_name",
        "is_bf16_supported",
        "get_rng_state_all",
        "set_rng_state_all",
        "set_device",
        "is_initialized",
        "device_count",
        "synchronize",
        "max_memory_allocated",
    ):
        assert callable(getattr(torch.cuda, name)), name
    assert hasattr(torch.backends.cuda.matmul, "allow_tf32")


def test_cpu_kernels_bertkit_calls_directly():
    from bertkit import hardware

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN (bertkit then uses ATen only)")
    assert hardware.ONEDNN_LINEAR is not None  # model/kernels.py
    assert callable(torch.ops.mkldnn._is_mkldnn_bf16_supported)
    assert hasattr(torch.ops.onednn, "qlinear_prepack")  # model/quantize.py
    assert hasattr(torch.ops.onednn, "qlinear_pointwise")


def test_apis_of_the_gpu_check_and_its_cuda_tests():
    """``benchmarks/gpu_check`` and the ``gpu`` tests it runs (stage 1) on the GPU machine."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile

    for name in (
        "reset_peak_memory_stats",
        "memory_allocated",
        "max_memory_allocated",
        "empty_cache",
        "get_device_capability",
        "manual_seed_all",
    ):
        assert callable(getattr(torch.cuda, name)), name
    assert {"enable_timing"} <= _params(torch.cuda.Event)
    for name in ("record", "elapsed_time", "synchronize"):
        assert callable(getattr(torch.cuda.Event, name)), name
    assert callable(torch.cuda.nccl.version)
    assert hasattr(ProfilerActivity, "CUDA") and {"activities"} <= _params(profile)
    for name in ("is_nccl_available", "init_process_group", "destroy_process_group", "all_reduce"):
        assert callable(getattr(dist, name)), name
    assert {"store", "rank", "world_size"} <= _params(dist.init_process_group)
    assert dist.FileStore is not None and {"device_ids"} <= _params(DistributedDataParallel)
    assert {"dynamic"} <= _params(torch.compile)
    with torch.device("cpu"):  # models are built on the GPU directly this way
        assert torch.empty(1).device.type == "cpu"


def test_the_onnx_exporters_newest_opset_is_named():
    """export/onnx.py checks --opset against it (past it, torch printed its graph and raised)."""
    from bertkit.export.onnx import _newest_opset

    assert isinstance(_newest_opset(), int) and _newest_opset() >= 17  # 17: the default opset
