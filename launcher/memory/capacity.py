"""How much memory each GPU (or, on cpu, the host) has: the one edge of the memory check.

Order: `cluster.gpu_memory_gib` when the user set it; else, where this machine's GPUs are the
run's, what NVML reports here (nvidia-ml-py's `pynvml`, imported lazily, never torch) or,
without NVML, the table below for their names (`nvidia-smi -L`: "NVIDIA H100 80GB HBM3"); else
the table for the GPU type the config names (`cluster.gpu_type`, which under launcher=slurm
the partition's gres type fills in, such as `h100`); on cpu, the host's MemAvailable from
/proc/meminfo. The per-process host costs the
cpu check adds (vLLM CPU server, torchrun ranks) are measured constants in
launcher/memory/parts.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from launcher.spec.cluster import gpu_name_key
from launcher.spec.errors import ConfigError

MAX_GPU_GIB = 4096.0  # no card comes near; a larger cluster.gpu_memory_gib is a typo
# What the driver reports as usable (torch's "total capacity" in OOM messages), GiB. Cards
# sold as "80 GB" report 79.1-79.6. Sources: torch OOM messages quoted in public issues
# (H100: NVIDIA-NeMo/Automodel#2673 "79.11 GiB"; H200: THUDM/slime#1951 "139.81 GiB";
# V100 32GB: hiyouga/LlamaFactory#6800 "31.74 GiB"; L4: instructlab/instructlab#2666
# "22.05 GiB"); the others are nvidia-smi's MiB / 1024 less the ~0.5 GiB the driver keeps.
GPU_MEMORY_GIB = {
    "b200": 178.4,
    "h200": 139.81,
    "h100 nvl": 93.1,
    "h100": 79.11,
    "h800": 79.11,
    "h20": 94.5,
    "gh200": 94.5,
    "a100 80gb": 79.15,
    "a800 80gb": 79.15,
    "a100 40gb": 39.39,
    "a800 40gb": 39.39,
    "l40s": 44.4,
    "l40": 44.4,
    "a40": 44.4,
    "a6000": 47.4,
    "a10g": 22.06,
    "a10": 22.06,
    "l4": 22.05,
    "v100 32gb": 31.74,
    "v100 16gb": 15.77,
    "t4": 14.58,
    "rtx 4090": 23.55,
    "rtx 3090": 23.69,
    "mi300x": 191.5,
}
# name patterns (on the normalized name: lowercase, words, "80g" -> "80gb") -> table key,
# most specific first; a family name without its size (`a100`) matches none: unknown
NAME_PATTERNS = (
    (r"\bb200\b", "b200"),
    (r"\bgh200\b", "gh200"),
    (r"\bh200\b", "h200"),
    (r"\bh100\b.*\bnvl\b", "h100 nvl"),
    (r"\bh100\b", "h100"),
    (r"\bh800\b", "h800"),
    (r"\bh20\b", "h20"),
    (r"\ba100\b.*\b80gb\b", "a100 80gb"),
    (r"\ba100\b.*\b40gb\b", "a100 40gb"),
    (r"\ba800\b.*\b80gb\b", "a800 80gb"),
    (r"\ba800\b.*\b40gb\b", "a800 40gb"),
    (r"\bl40s\b", "l40s"),
    (r"\bl40\b", "l40"),
    (r"\ba40\b", "a40"),
    (r"\ba6000\b", "a6000"),
    (r"\ba10g\b", "a10g"),
    (r"\ba10\b", "a10"),
    (r"\bl4\b", "l4"),
    (r"\bv100\b.*\b32gb\b", "v100 32gb"),
    (r"\bv100\b.*\b16gb\b", "v100 16gb"),
    (r"\bt4\b", "t4"),
    (r"\b4090\b", "rtx 4090"),
    (r"\b3090\b", "rtx 3090"),
    (r"\bmi300x\b", "mi300x"),
)


@dataclass(frozen=True)
class Capacity:
    """Memory per GPU (cuda) or of the host (cpu), in GiB, and where the number came from."""

    gib: Optional[float]
    # "cluster.gpu_memory_gib", "nvml", "nvidia-smi: NVIDIA H100 80GB HBM3", "table: h100",
    # "host MemAvailable", "unknown"
    source: str

    @property
    def known(self) -> bool:
        return self.gib is not None


def gpu_memory_from_name(name: str) -> Optional[float]:
    """Reported GiB for a GPU type name (`NVIDIA H100 80GB HBM3`, `a100_80g`, `h200`); None
    when the name is unknown or does not say which memory size it is (`a100`)."""
    text = gpu_name_key(name)
    for pattern, key in NAME_PATTERNS:
        if re.search(pattern, text):
            return GPU_MEMORY_GIB[key]
    return None


def smallest_named(names: Sequence[str]) -> Optional[Capacity]:
    """The smallest of these GPUs by the table, None when any name is unknown to it (a
    smaller card could hide behind it) or there is none."""
    sized = [(gpu_memory_from_name(n), n) for n in names]
    if not sized or any(gib is None for gib, _ in sized):
        return None
    gib, name = min((g, n) for g, n in sized if g is not None)
    return Capacity(gib, f"nvidia-smi: {name}")


def detect_gpu_memory_gib() -> Optional[float]:
    """The smallest GPU here as NVML reports it (usable: total less what the driver reserves);
    None without nvidia-ml-py, a driver, or a GPU."""
    try:
        import pynvml  # nvidia-ml-py, optional
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver here
        return None
    try:
        sizes = [
            _usable_bytes(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return round(min(sizes) / (1 << 30), 2) if sizes else None


def _usable_bytes(pynvml: Any, handle: Any) -> float:
    """total - reserved with NVML's v2 memory info (driver >= 510), else total."""
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return float(info.total - getattr(info, "reserved", 0))
        except Exception:
            pass
    return float(pynvml.nvmlDeviceGetMemoryInfo(handle).total)


def host_memory_gib(meminfo: Optional[str] = None) -> Optional[float]:
    """MemAvailable (else MemTotal) of /proc/meminfo in GiB; None where there is none."""
    if meminfo is None:
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            return None
    fields = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        value = rest.split()
        if value and value[0].isdigit():
            fields[key.strip()] = int(value[0]) * 1024  # kB
    found = fields.get("MemAvailable", fields.get("MemTotal"))
    return None if found is None else round(found / (1 << 30), 2)


def check_configured(value: Any, key: str = "cluster.gpu_memory_gib") -> Optional[float]:
    """A memory size the user typed, as GiB; a clear error for anything that is not one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"{key}={value!r}: give the GPU memory in GiB, e.g. {key}=79.1")
    if not 0 < value <= MAX_GPU_GIB:
        raise ConfigError(
            f"{key}={value}: must be between 0 and {MAX_GPU_GIB:.0f} GiB "
            f"(an 80 GB card reports about 79.1)"
        )
    return float(value)


def resolve_capacity(
    device: str,
    configured: Any = None,
    gpu_name: Optional[str] = None,
    detect: bool = True,
    local_names: Callable[[], Sequence[str]] = lambda: (),
) -> Capacity:
    """The capacity the memory check uses, and its source (see the module docstring).
    detect: this machine's GPUs are the run's; local_names: their names (nvidia-smi -L), asked
    only when NVML cannot say."""
    value = check_configured(configured)
    if value is not None:
        return Capacity(value, "cluster.gpu_memory_gib")
    if device == "cpu":
        host = host_memory_gib() if detect else None
        return Capacity(host, "host MemAvailable" if host is not None else "unknown")
    if detect:
        found = detect_gpu_memory_gib()
        if found is not None:
            return Capacity(found, "nvml")
        named = smallest_named(local_names())
        if named is not None:
            return named
    if gpu_name:
        from_table = gpu_memory_from_name(gpu_name)
        if from_table is not None:
            return Capacity(from_table, f"table: {gpu_name}")
    return Capacity(None, "unknown")
