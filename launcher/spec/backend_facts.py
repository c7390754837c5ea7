"""What each backend is, as data: one frozen record per backend (docs/architecture.md §13).

Parsing a backend string, the config schema, the plan and the memory model read these records
and never import a backend's module: the record names the class that runs the backend
(`behaviour`), which launcher.backends imports only to build processes. The built-ins are the
table below; another package adds one with a record of its own behind the entry point
`areal_launch.backends` (launcher.spec.registry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

# kinds of component (and of the backends that run them)
SERVE = "serve"  # server instances (vllm, sglang): HTTP, health-probed
TRAIN = "train"  # torchrun ranks (fsdp, megatron, archon)
WORKER = "worker"  # plain processes (env simulators, reward functions, agents): GPUs or CPU
KINDS = (SERVE, TRAIN, WORKER)
KIND_WORDS = {SERVE: "inference", TRAIN: "training", WORKER: "worker"}  # in messages
DIM_LETTERS = "dtpce"

# how the memory model sizes a backend's processes (launcher.memory.infer, memory.train)
CARD_BUDGET = "card"  # a fraction of the whole card for everything but activations (vLLM)
STATIC_BUDGET = "static"  # a fraction of the memory free at start for weights + KV (SGLang)
FSDP2 = "fsdp2"  # FSDP2 full shard over the whole mesh, gathered units (fsdp, archon)
MEGATRON = "megatron"  # Megatron-LM: t/p-split layers, distributed optimizer over d*c
MEMORY_MODELS: dict[str, tuple[Optional[str], ...]] = {
    SERVE: (CARD_BUDGET, STATIC_BUDGET),
    TRAIN: (FSDP2, MEGATRON),
    WORKER: (None,),  # a worker holds no model (its component may say its GiB: mem_gib)
}


@dataclass(frozen=True)
class Install:
    """The top-level Python package a backend's processes import first, and how to get it
    (the node's preflight says it when an interpreter cannot find the package)."""

    package: str
    hint: str


@dataclass(frozen=True)
class BackendFacts:
    """One backend: what parsing, planning and the memory model need to know of it.

    dims: the letters its backend string takes; hybrid: it takes the MoE (attn:...|ffn:...)
    form; example: a backend string for hints; order: its place among its kind (hints and
    --suggest name the first that fits). memory_model: how memory/ sizes it (None: it holds
    no model); memory_keys: the estimator's knob -> the option under its config sub-key that
    sets it (the memory check's fixes name them). suggest_dims: the dims `plan --suggest`
    varies for it (None: every dim it takes).
    """

    name: str
    kind: str
    behaviour: str  # "package.module:Class": the class that builds its processes
    dims: str
    example: str
    order: int = 0
    hybrid: bool = False
    install: Optional[Install] = None  # None: nothing of its own (a worker's entry is the user's)
    memory_model: Optional[str] = None
    memory_keys: Mapping[str, str] = field(default_factory=dict)
    suggest_dims: Optional[str] = None

    def problem(self) -> Optional[str]:
        """What makes this record unusable (another package's), or None."""
        if self.kind not in KINDS:
            return f"kind {self.kind!r} is none of {', '.join(KINDS)}"
        if not self.dims or set(self.dims) - set(DIM_LETTERS) or "d" not in self.dims:
            return f"dims {self.dims!r} must hold d and only letters of {DIM_LETTERS}"
        if self.memory_model not in MEMORY_MODELS[self.kind]:
            allowed = ", ".join(map(str, MEMORY_MODELS[self.kind]))
            return f"memory_model {self.memory_model!r}: a {self.kind} backend takes {allowed}"
        if ":" not in self.behaviour:
            return f"behaviour {self.behaviour!r} must be 'package.module:Class'"
        return None

    @property
    def searched_dims(self) -> str:
        """The dims --suggest varies."""
        return self.dims if self.suggest_dims is None else self.suggest_dims


TORCH = Install("torch", "pip install 'areal-launch[torch]'")

BUILTIN_BACKENDS: dict[str, BackendFacts] = {
    f.name: f
    for f in (
        BackendFacts(
            "sglang",
            SERVE,
            "launcher.backends.sglang:SGLangBackend",
            dims="dtp",
            example="sglang:d4t2",
            order=0,
            install=Install("sglang", "pip install 'areal-launch[sglang]'"),
            memory_model=STATIC_BUDGET,
            memory_keys={"mem_fraction": "mem_fraction_static", "context_length": "context_length"},
        ),
        BackendFacts(
            "vllm",
            SERVE,
            "launcher.backends.vllm:VllmBackend",
            dims="dtp",
            example="vllm:d2t2",
            order=1,
            install=Install(
                "vllm",
                "pip install 'areal-launch[cpu]' (vLLM's CPU build) or 'areal-launch[vllm]' (GPUs)",
            ),
            memory_model=CARD_BUDGET,
            memory_keys={
                "mem_fraction": "gpu_memory_utilization",
                "context_length": "max_model_len",
                "cpu_kvcache_space_gib": "cpu_kvcache_space_gb",
            },
        ),
        BackendFacts(
            "fsdp",
            TRAIN,
            "launcher.backends.fsdp:FsdpBackend",
            dims="dtc",
            example="fsdp:d8",
            order=0,
            install=TORCH,
            memory_model=FSDP2,
            memory_keys={"params_cpu_offload": "offload_params"},
        ),
        BackendFacts(
            "megatron",
            TRAIN,
            "launcher.backends.megatron:MegatronBackend",
            dims="dtpce",
            example="megatron:d2p2t2",
            order=1,
            hybrid=True,
            install=TORCH,
            memory_model=MEGATRON,
            memory_keys={"optimizer_cpu_offload": "optimizer_cpu_offload"},
            suggest_dims="dtpe",  # a pipelined trainer splits its layers rather than its context
        ),
        BackendFacts(
            "archon",
            TRAIN,
            "launcher.backends.archon:ArchonBackend",
            dims="dtpce",
            example="archon:d4t2",
            order=2,
            hybrid=True,
            install=TORCH,
            memory_model=FSDP2,  # FSDP2 like fsdp, with tensor, pipeline and expert parallel
            suggest_dims="dtpe",
        ),
        BackendFacts(
            "process",
            WORKER,
            "launcher.backends.process:ProcessBackend",
            dims="d",  # how many processes (the launcher writes it from the placement)
            example="process",
        ),
    )
}
