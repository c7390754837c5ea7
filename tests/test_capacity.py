"""Capacity: the configured value wins, then NVML, then the GPU table; on cpu, the host."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from launcher.memory import capacity
from launcher.memory.capacity import gpu_memory_from_name, host_memory_gib, resolve_capacity
from launcher.spec.errors import ConfigError

GIB = 1 << 30


def fake_nvml(totals_gib, reserved_gib=0.5, fail_init=False):
    """A stand-in for nvidia-ml-py with GPUs of these sizes."""
    mod = types.ModuleType("pynvml")
    mod.nvmlMemory_v2 = object()

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def info(handle, version=None):
        return types.SimpleNamespace(
            total=int(totals_gib[handle] * GIB), reserved=int(reserved_gib * GIB) if version else 0
        )

    mod.nvmlInit, mod.nvmlShutdown = init, lambda: None
    mod.nvmlDeviceGetCount = lambda: len(totals_gib)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetMemoryInfo = info
    return mod


def test_the_configured_gpu_memory_wins_over_detection(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([80.0]))
    assert resolve_capacity("cuda", configured=139.8) == capacity.Capacity(
        139.8, "cluster.gpu_memory_gib"
    )


def test_nvml_reports_the_smallest_gpu_less_what_the_driver_reserves(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([79.65, 79.65, 44.99]))
    assert resolve_capacity("cuda") == capacity.Capacity(44.49, "nvml")


def test_without_nvidia_ml_py_the_gpu_memory_is_unknown(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert resolve_capacity("cuda").gib is None
    assert resolve_capacity("cuda", gpu_name="h100") == capacity.Capacity(79.11, "table: h100")


def test_a_failing_nvml_is_unknown_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([80.0], fail_init=True))
    assert capacity.detect_gpu_memory_gib() is None


@pytest.mark.parametrize(
    "name,gib",
    [
        ("NVIDIA H100 80GB HBM3", 79.11),
        ("h100", 79.11),
        ("H800", 79.11),
        ("h200", 139.81),
        ("NVIDIA A100-SXM4-80GB", 79.15),
        ("a100_80g", 79.15),
        ("A100-SXM4-40GB", 39.39),
        ("NVIDIA L40S", 44.4),
        ("NVIDIA L4", 22.05),
        ("Tesla V100-SXM2-32GB", 31.74),
        ("NVIDIA H100 NVL", 93.1),
        ("b200", 178.4),
        ("NVIDIA GeForce RTX 4090", 23.55),
    ],
)
def test_gpu_type_names_map_to_the_memory_they_report(name, gib):
    assert gpu_memory_from_name(name) == gib


@pytest.mark.parametrize("name", ["a100", "v100", "gpu", "tesla"])
def test_a_name_that_does_not_say_the_memory_size_is_unknown(name):
    assert gpu_memory_from_name(name) is None


def test_cpu_capacity_is_the_hosts_available_memory():
    text = "MemTotal:       24683584 kB\nMemFree:  1 kB\nMemAvailable:   23836412 kB\n"
    assert host_memory_gib(text) == round(23836412 * 1024 / GIB, 2)
    assert host_memory_gib("MemTotal:       1048576 kB\n") == 1.0
    assert resolve_capacity("cpu") == capacity.Capacity(host_memory_gib(), "host MemAvailable")


@pytest.mark.parametrize("value", [-1, 0, 1e9, "80GB", True, float("nan")])
def test_a_configured_size_that_is_no_gpu_memory_is_a_clear_error(value):
    with pytest.raises(ConfigError, match=r"cluster\.gpu_memory_gib="):
        resolve_capacity("cuda", configured=value)


def test_resolving_capacity_never_imports_torch():
    code = (
        "import sys, launcher.memory.capacity as c; c.resolve_capacity('cuda'); "
        "c.resolve_capacity('cpu'); assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
