"""What the user set for the engines, read alike from an OmegaConf DictConfig or the dataclasses.

Also the two rules every engine shares: flags in `extra_args` that would undo the plan (its
GPU count or the addresses the launcher chose) are refused, and a process's environment is
layered so the launcher's contract (AREAL_*, CUDA_VISIBLE_DEVICES) always wins.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Optional

from launcher.config import (INHERITING, ArchonOptions, FSDPOptions, LaunchConfig,  # noqa: F401
                             MegatronOptions, SGLangOptions, VLLMOptions, model_path, plain,
                             rollout_offload)
from launcher.errors import ConfigError, LaunchError

DEFAULT_SERVED_MODEL_NAME = "policy"  # stable, so trainers can name the model in requests

# engine group -> {backend: the options sub-key's dataclass}
ENGINE_OPTIONS: dict[str, dict[str, type]] = {
    "rollout": {"vllm": VLLMOptions, "sglang": SGLangOptions},
    **{name: {"fsdp": FSDPOptions, "megatron": MegatronOptions, "archon": ArchonOptions}
       for name in ("actor", "critic", "ref", "teacher")},
}
# engine defaults a user may set in their own shell instead (the launcher's contract may not be)
ENV_DEFAULT_KEYS = ("OMP_NUM_THREADS", "HF_HUB_OFFLINE", "VLLM_CPU_KVCACHE_SPACE",
                    "VLLM_CPU_OMP_THREADS_BIND", "CUDA_DEVICE_MAX_CONNECTIONS")
EXAMPLE_DIMS = {"vllm": "d1", "sglang": "d1", "fsdp": "d2", "megatron": "d2", "archon": "d2"}


# ----------------------------------------------------------------------------- reading
def served_model_name(cfg: Any, backend: str) -> str:
    """The name servers answer to; the same string goes to trainers (AREAL_SERVED_MODEL_NAME)."""
    return str(getattr(cfg.rollout, backend).served_model_name or DEFAULT_SERVED_MODEL_NAME)


def as_strings(values: Optional[Iterable[Any]]) -> list[str]:
    """A list option (ListConfig or list) as plain strings."""
    return [str(v) for v in (values or [])]


def backend_of(spec: Optional[str]) -> Optional[str]:
    """'sglang:d4t2' -> 'sglang'; None (engine off) stays None."""
    if spec is None:
        return None
    return str(spec).partition(":")[0].strip().lower() or None


# ----------------------------------------------------------------------------- unused options
def check_unused_options(cfg: Any, backends: Optional[Mapping[str, Optional[str]]] = None,
                         defaults: Any = None) -> None:
    """ConfigError when an option under an engine sub-key the backend does not select is set.

    backends: engine -> backend string as resolved (legacy allocation_mode and actor fallback
    applied); None reads `<engine>.backend` from cfg. defaults: a config of the same shape
    whose values count as not set (e.g. composed without the user's overrides, when group
    YAMLs set engine options); None: the dataclass defaults.
    """
    defaults = defaults if defaults is not None else LaunchConfig()
    specs = dict(backends) if backends is not None else _specs(cfg)
    for engine, choices in ENGINE_OPTIONS.items():
        spec = specs.get(engine)
        chosen = backend_of(spec)
        for backend, options_type in choices.items():
            if backend == chosen:
                continue
            for f in dataclasses.fields(options_type):
                value = plain(getattr(getattr(getattr(cfg, engine), backend), f.name))
                default = plain(getattr(getattr(getattr(defaults, engine), backend), f.name))
                if value != default:
                    key = f"{engine}.{backend}.{f.name}"
                    raise ConfigError(_unused_message(key, engine, spec, specs, backend))


def _specs(cfg: Any) -> dict[str, Optional[str]]:
    specs = {engine: getattr(cfg, engine).backend for engine in ENGINE_OPTIONS}
    for engine in INHERITING:
        if specs[engine] is not None and not str(specs[engine]).strip():
            specs[engine] = specs["actor"]
    return specs


def _unused_message(key: str, engine: str, spec: Optional[str], specs: Mapping, backend: str) -> str:
    fix = f"remove it or use {engine}.backend={backend}:{EXAMPLE_DIMS[backend]}"
    if spec is None:
        return f"{key} is set but {engine} is off ({engine}.backend is null); {fix}"
    inherited = " (the actor's)" if engine in INHERITING and spec == specs.get("actor") else ""
    return f"{key} is set but {engine}.backend is {spec}{inherited}; {fix}"


# ----------------------------------------------------------------------------- extra_args
def refuse_flags(args: list[str], refused: Mapping[str, str], where: str) -> None:
    """LaunchError naming the first flag in `args` found in `refused` (flag -> how to fix).

    Matches `--flag`, `--flag=value` and the underscore spelling `--flag_name`.
    """
    for arg in args:
        if not arg.startswith("-"):
            continue
        name = arg.partition("=")[0]
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name in refused:
            raise LaunchError(f"{where}: {arg!r} {refused[name]}")


def launcher_owned(flags: Iterable[str]) -> dict[str, str]:
    """refuse_flags entries for flags the launcher sets itself."""
    return {flag: "is set by the launcher from the plan; remove it" for flag in flags}


# ----------------------------------------------------------------------------- environment
def layered_env(defaults: Mapping[str, str], ctx_env: Mapping[str, str],
                contract: Mapping[str, str]) -> dict[str, str]:
    """defaults < the user's extra env < the launcher's contract (AREAL_*, CUDA_VISIBLE_DEVICES).

    A default the user sets (OMP_NUM_THREADS, VLLM_CPU_KVCACHE_SPACE...) is theirs; what the
    plan promises a process (its GPUs, the plan path, the servers) is not overridable.
    """
    return {**defaults, **ctx_env, **contract}
