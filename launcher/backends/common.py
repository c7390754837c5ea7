"""Rules every backend shares.

Flags in `extra_args` that would undo the plan (its GPU count or the addresses the launcher
chose) are refused; a process's environment is layered so the launcher's contract (AREAL_*)
always wins over the user's.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from launcher.spec.errors import UserError

# engine defaults a user may set in their own shell instead (the launcher's contract may not be)
ENV_DEFAULT_KEYS = (
    "OMP_NUM_THREADS",
    "HF_HUB_OFFLINE",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_CPU_OMP_THREADS_BIND",
    "CUDA_DEVICE_MAX_CONNECTIONS",
)


def refuse_flags(args: Iterable[str], refused: Mapping[str, str], where: str) -> None:
    """UserError naming the first flag in `args` found in `refused` (flag -> how to fix).

    Matches `--flag`, `--flag=value` and the underscore spelling `--flag_name`.
    """
    for arg in args:
        if not arg.startswith("-"):
            continue
        name = arg.partition("=")[0]
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name in refused:
            raise UserError(f"{where}: {arg!r} {refused[name]}")


def launcher_owned(flags: Iterable[str]) -> dict[str, str]:
    """refuse_flags entries for flags the launcher sets itself."""
    return {flag: "is set by the launcher from the plan; remove it" for flag in flags}


def layered_env(
    defaults: Mapping[str, str], ctx_env: Mapping[str, str], contract: Mapping[str, str]
) -> dict[str, str]:
    """defaults < the user's extra env < the launcher's contract (AREAL_*).

    A default the user sets (OMP_NUM_THREADS, VLLM_CPU_KVCACHE_SPACE...) is theirs; what the
    plan promises a process (the plan path, the servers) is not overridable. GPUs are not in
    here: the node's supervisor sets CUDA_VISIBLE_DEVICES from the process's GPUs.
    """
    return {**defaults, **ctx_env, **contract}
