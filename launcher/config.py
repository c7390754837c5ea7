"""Typed configuration: the dataclasses Hydra composes `conf/` into (DESIGN §2).

Every key a user may set on the command line is declared here, so no `+` is ever needed, and a
mistyped key or a wrong type is a clear error from Hydra/OmegaConf. Engine options live under a
sub-key named after the engine (`rollout.vllm.*`, `actor.fsdp.*`), so the backend prefix alone
picks the engine.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

ENGINE_NAMES = ("rollout", "actor", "critic", "ref", "teacher")
INHERITING = ("critic", "ref", "teacher")  # may take the actor's backend ("") and share its GPUs
DEFAULT_MODEL_PATH = "~/.cache/areal-launch/tiny-llama"


# ----------------------------------------------------------------------------- inference
@dataclass
class VLLMOptions:
    """Flags for `vllm serve`; None means vLLM's own default (flag not passed)."""

    gpu_memory_utilization: Optional[float] = None
    max_model_len: Optional[int] = None
    dtype: Optional[str] = None
    enforce_eager: bool = False
    served_model_name: Optional[str] = None
    seed: Optional[int] = None
    enable_sleep_mode: bool = False
    # vLLM's CPU build: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE)
    cpu_kvcache_space_gb: int = 1


@dataclass
class SGLangOptions:
    """Flags for `python -m sglang.launch_server`; None means SGLang's own default."""

    mem_fraction_static: Optional[float] = None
    dtype: Optional[str] = None
    context_length: Optional[int] = None
    served_model_name: Optional[str] = None
    # dp attention and expert parallel *inside* one instance: do not change the GPU count
    enable_dp_attention: bool = False
    attn_dp_size: Optional[int] = None
    ep_size: Optional[int] = None
    enable_memory_saver: bool = False
    skip_server_warmup: bool = False
    watchdog_timeout: Optional[float] = None
    log_level: Optional[str] = None


@dataclass
class RolloutConfig:
    backend: Optional[str] = "vllm:d1"  # None: no rollout servers (trainer-only run)
    model_path: Optional[str] = None  # None: the top-level model_path
    offload: bool = False  # release weights/KV between phases (memory saver / sleep mode)
    enable_offload: Optional[bool] = None  # RLinf's spelling of `offload`
    health_timeout_s: float = 600.0
    extra_args: List[str] = field(default_factory=list)
    vllm: VLLMOptions = field(default_factory=VLLMOptions)
    sglang: SGLangOptions = field(default_factory=SGLangOptions)


# ----------------------------------------------------------------------------- training
@dataclass
class OffloadOptions:
    optimizer: bool = False
    weight: bool = False
    grad: bool = False


@dataclass
class FSDPOptions:
    reshard_after_forward: bool = True
    mixed_precision: Optional[str] = None  # e.g. bf16


@dataclass
class MegatronOptions:
    sequence_parallel: bool = False
    use_distributed_optimizer: bool = True
    recompute_granularity: Optional[str] = None


@dataclass
class ArchonOptions:
    compile: bool = False


@dataclass
class TrainEngineConfig:
    """actor, critic, ref, teacher. backend None = off; "" = the actor's backend."""

    backend: Optional[str] = None
    offload: OffloadOptions = field(default_factory=OffloadOptions)
    extra_args: List[str] = field(default_factory=list)
    fsdp: FSDPOptions = field(default_factory=FSDPOptions)
    megatron: MegatronOptions = field(default_factory=MegatronOptions)
    archon: ArchonOptions = field(default_factory=ArchonOptions)


@dataclass
class TrainerConfig:
    """The entry point every torchrun worker runs, and its arguments."""

    entry: str = "recipes/grpo/train.py"
    args: List[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- cluster
def _engine_keys() -> Dict[str, Optional[str]]:
    return {name: None for name in ENGINE_NAMES}


@dataclass
class ClusterConfig:
    num_nodes: Optional[int] = None  # None: this machine (1), or what the plan needs on cpu
    gpus_per_node: Optional[int] = None
    device: str = "auto"  # auto | cuda | cpu
    # keys: engine names, or comma lists of them in YAML ("actor,rollout": all)
    component_placement: Dict[str, Optional[str]] = field(default_factory=_engine_keys)


@dataclass
class LauncherConfig:
    type: str = "local"  # local | slurm
    dry_run: bool = False
    grace_period_s: float = 10.0
    health_timeout_s: Optional[float] = None  # None: rollout.health_timeout_s
    base_port: Optional[int] = None  # None: ports chosen free and reserved
    # environment for every process: after engine defaults, before the launcher's contract
    env: Dict[str, str] = field(default_factory=dict)
    # slurm (used with launcher=slurm)
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time_limit: Optional[str] = None
    cpus_per_gpu: Optional[int] = None
    mem_per_gpu: Optional[str] = None
    container_image: Optional[str] = None
    container_mounts: Optional[str] = None
    sbatch_extra: List[str] = field(default_factory=list)
    srun_extra: List[str] = field(default_factory=list)
    setup: List[str] = field(default_factory=list)
    job_name: Optional[str] = None


@dataclass
class LaunchConfig:
    experiment_name: str = "areal"
    trial_name: str = "run"
    model_path: str = DEFAULT_MODEL_PATH
    allocation_mode: Optional[str] = None  # legacy: sglang:d4t2+fsdp:d8 (deprecated)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: TrainEngineConfig = field(default_factory=lambda: TrainEngineConfig(backend="fsdp:d2"))
    critic: TrainEngineConfig = field(default_factory=TrainEngineConfig)
    ref: TrainEngineConfig = field(default_factory=TrainEngineConfig)
    teacher: TrainEngineConfig = field(default_factory=TrainEngineConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # free-form options for the recipe's entry point (steps, lr, ...), handed over in the plan
    recipe: Dict[str, Any] = field(default_factory=dict)


def model_path(cfg: Any) -> str:
    """rollout.model_path, else model_path, with `~` expanded (no other environment read)."""
    import os

    return os.path.expanduser(str(cfg.rollout.model_path or cfg.model_path))


def rollout_offload(cfg: Any) -> bool:
    """rollout.offload, or RLinf's spelling rollout.enable_offload."""
    return bool(cfg.rollout.offload or cfg.rollout.enable_offload)


def plain(value: Any) -> Any:
    """An option as plain data (DictConfig/ListConfig/dataclass -> dict/list), for comparing
    with defaults and for the plan JSON."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "items") and not isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        return [plain(v) for v in value]
    return value


def register_configs() -> None:
    """Register the schema with Hydra's ConfigStore (conf/config.yaml starts from it)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=LaunchConfig)
