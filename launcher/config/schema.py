"""Typed configuration: the dataclasses Hydra composes `conf/` into (docs/architecture.md §2).

Every key a user may set on the command line is declared here or in the module that reads it,
so no `+` is ever needed and a mistyped key or a wrong type is a clear error from Hydra. Engine
options live under a sub-key named after the backend (`rollout.vllm.*`, `actor.fsdp.*`),
declared by each backend module (launcher/backends/), so the backend prefix alone picks the
engine and a new backend brings its options with it. The `launcher` group's schema is the
chosen runner's own (launcher/runners/), the `recipe` group's the chosen recipe's.

`launcher.spec.run_spec` turns the composed config into these dataclasses once; nothing after
that reads the Hydra config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from omegaconf import MISSING

from launcher.spec import registry
from launcher.spec.builtins import ENGINES
from launcher.spec.entry import check_module, check_python, server_flags
from launcher.spec.errors import ConfigError
from launcher.spec.limits import seconds_problem
from launcher.spec.request import HEALTH_TIMEOUT_S

DEFAULT_MODEL_PATH = "~/.cache/areal-launch/tiny-llama"


# ----------------------------------------------------------------------------- engines
STRATEGIES = ("colocation", "separation")


@dataclass
class SchedulingStrategy:
    """AReaL's `<engine>.scheduling_strategy`: `colocation` with `target` puts the engine on
    its target's GPUs, `separation` on GPUs of its own; None: our default placement (ref,
    critic, teacher share the actor's GPUs when their world size matches)."""

    type: Optional[str] = None
    target: Optional[str] = None
    fork: bool = True  # AReaL's: the target spawns a process of its own (ours always do)

    def __post_init__(self) -> None:
        if self.type is not None and self.type not in STRATEGIES:
            raise ConfigError(
                f"scheduling_strategy.type={self.type!r}: choose {' or '.join(STRATEGIES)}"
            )
        if self.type == "colocation" and not self.target:
            raise ConfigError(
                "scheduling_strategy.type=colocation needs a target: the "
                "component to share GPUs with, e.g. target: actor"
            )


@dataclass
class SchedulingSpec:
    """One of AReaL's `<engine>.scheduling_spec` items, as AReaL names its keys; None: not
    given. What a runner honours is launcher.config.areal's business (local: env_vars; Slurm:
    cpu, mem, nodelist, exclude, image too; Ray: cpu, mem, image per engine); the rest is
    said in one line, never dropped."""

    cpu: Optional[int] = None  # CPU cores per GPU
    gpu: Optional[int] = None  # GPUs per process
    mem: Optional[int] = None  # GB per GPU
    port_count: Optional[int] = None
    image: Optional[str] = None
    task_type: Optional[str] = None
    env_vars: Dict[str, str] = field(default_factory=dict)
    cmd: Optional[str] = None
    srun_additional_args: Optional[str] = None
    additional_bash_cmds: Optional[List[str]] = None
    container_type: Optional[str] = None
    mount: Optional[str] = None
    nodelist: Optional[str] = None
    exclude: Optional[str] = None
    ray_placement_strategy: Optional[str] = None


@dataclass
class OffloadOptions:
    """What a training engine moves to host memory between phases (collocated runs)."""

    optimizer: bool = False
    weight: bool = False
    grad: bool = False

    @property
    def any(self) -> bool:
        return self.optimizer or self.weight or self.grad


@dataclass
class RolloutBase:
    """rollout: the inference servers. backend None = off; a bare name (`vllm`) = that backend
    sized for the machine (launcher.defaults)."""

    backend: Optional[str] = "vllm"
    model_path: Optional[str] = None  # None: the top-level model_path
    offload: bool = False  # release weights/KV between phases (memory saver / sleep mode)
    enable_offload: Optional[bool] = None  # RLinf's spelling of `offload`
    # RLinf's keys for a backend written without dims and placed: the world size comes from
    # the placement, tp and pp from these (launcher.planning.sizing)
    tensor_parallel_size: Optional[int] = None
    pipeline_parallel_size: Optional[int] = None
    # env and rollout take turns in this many stages of a batch each (RLinf's pipelined
    # rollout); the recipe reads it from the plan's engine options
    pipeline_stage_num: int = 1
    health_timeout_s: float = HEALTH_TIMEOUT_S
    extra_args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)  # this engine's processes only
    # the servers' interpreter (None: the node group's, else the runner's), the module they
    # run (None: the backend's own, e.g. AReaL's areal.engine.vllm_ext.areal_vllm_server)
    # and more flags for it as a mapping, AReaL's way ({max_num_seqs: 64}: --max-num-seqs 64)
    python: Optional[str] = None
    server_module: Optional[str] = None
    server_args: Dict[str, Any] = field(default_factory=dict)
    # AReaL's placement and per-process resources (launcher.config.areal)
    scheduling_strategy: SchedulingStrategy = field(default_factory=SchedulingStrategy)
    scheduling_spec: Any = field(default_factory=list)  # SchedulingSpec items (or one)

    def __post_init__(self) -> None:
        problem = seconds_problem(self.health_timeout_s, allow_zero=False)
        if problem:
            raise ConfigError(f"rollout.health_timeout_s={self.health_timeout_s}: {problem}")
        check_python("rollout.python", self.python)
        check_module("rollout.server_module", self.server_module)
        server_flags("rollout.server_args", self.server_args)


TRAIN_DTYPES = ("float32", "bfloat16", "float16")
MAX_TOKENS_PER_MB = 1 << 24


@dataclass
class MicroBatchSpec:
    """How a training step splits its batch (AReaL's `mb_spec`): each forward/backward holds
    at most this many tokens, which is what sizes a trainer's activation memory."""

    max_tokens_per_mb: int = 10240

    def __post_init__(self) -> None:
        n = self.max_tokens_per_mb
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MAX_TOKENS_PER_MB:
            raise ConfigError(
                f"mb_spec.max_tokens_per_mb={n}: a number of tokens from 1 to {MAX_TOKENS_PER_MB}"
            )


@dataclass
class ModelParallel:
    """RLinf's `actor.model.*` parallel sizes, read for a backend written without dims and
    placed (the world size from the placement). The node is open: RLinf's other model keys
    are kept and handed to the entry point with the engine's options."""

    tensor_model_parallel_size: Optional[int] = None
    pipeline_model_parallel_size: Optional[int] = None
    context_parallel_size: Optional[int] = None
    options: Dict[str, Any] = field(default_factory=dict)  # RLinf's other model keys


@dataclass
class TrainEngineBase:
    """actor, critic, ref, teacher. backend None = off; "" = the actor's backend and options;
    a bare name (`fsdp`) = that backend sized for the machine. dtype, gradient_checkpointing
    and mb_spec are AReaL's names: the entry point trains with them, the memory check sizes
    the engine by them."""

    backend: Optional[str] = None
    dtype: Optional[str] = None  # weights, grads, optimizer states; None: float32 on cpu, else bf16
    gradient_checkpointing: bool = False  # recompute each layer in backward (less memory)
    mb_spec: MicroBatchSpec = field(default_factory=MicroBatchSpec)
    offload: OffloadOptions = field(default_factory=OffloadOptions)
    enable_offload: Optional[bool] = None  # RLinf's: offload weights and optimizer states
    # RLinf's spellings of offload.weight / .optimizer / .grad
    offload_weight: Optional[bool] = None
    offload_optimizer: Optional[bool] = None
    offload_grad: Optional[bool] = None
    model: ModelParallel = field(default_factory=ModelParallel)
    extra_args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)  # this engine's processes only
    # AReaL's placement and per-process resources (launcher.config.areal)
    scheduling_strategy: SchedulingStrategy = field(default_factory=SchedulingStrategy)
    scheduling_spec: Any = field(default_factory=list)  # SchedulingSpec items (or one)

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in TRAIN_DTYPES:
            raise ConfigError(f"dtype={self.dtype!r}: choose {', '.join(TRAIN_DTYPES)}")


def _with_backend_options(base: type, kind: str, name: str) -> type:
    """`base` plus one sub-key per backend of `kind`: what is set under it, a free dict that
    `backend_options` types by the backend's Options for the engines that use it. Typing every
    backend's options on every engine here made composing the slowest part of a command."""
    extra: list[tuple[str, Any, Any]] = [
        (b, Any, field(default_factory=dict)) for b in registry.backend_names(kind)
    ]
    made = dataclasses.make_dataclass(name, extra, bases=(base,))
    made.__module__ = __name__  # found by pickle where it lives (launcher.config.compose_cache)
    return made


RolloutConfig = _with_backend_options(RolloutBase, registry.SERVE, "RolloutConfig")
TrainEngineConfig = _with_backend_options(TrainEngineBase, registry.TRAIN, "TrainEngineConfig")


@dataclass
class TrainerConfig:
    """The entry point every torchrun worker runs, its arguments, and the interpreter of
    every training engine's processes (torchrun runs in it, so its ranks do; None: the node
    group's, else the runner's): another project's venv, e.g. AReaL's."""

    entry: str = "recipes/grpo/train.py"
    args: List[str] = field(default_factory=list)
    python: Optional[str] = None

    def __post_init__(self) -> None:
        check_python("trainer.python", self.python)


@dataclass
class ComponentConfig:
    """A component the user declares by name (`components.<name>`, docs/architecture.md §12):
    today a `worker`, plain processes the launcher starts, supervises, restarts and stops with
    the run (env simulators, reward functions, agents). Placed on GPUs by
    `cluster.component_placement.<name>` (`processes_per_gpu` each), else CPU-only
    (`processes` of them, on the first node). Checked by launcher.planning.components, which
    builds it from what the user wrote."""

    kind: str = "worker"
    backend: str = "process"
    entry: Optional[str] = None  # a script path, or "-m module"
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    python: Optional[str] = None  # its interpreter; None: the node group's, else the runner's
    processes: int = 1  # CPU-only: how many
    processes_per_gpu: int = 1  # placed on GPUs: how many on each
    # an HTTP path to poll (`/health`): each process gets a port (AREAL_WORKER_PORT) and the
    # run waits for it like a server's; None: running is healthy
    health_path: Optional[str] = None
    # memory per process in GiB, counted on its GPU (or the host, CPU-only) by the memory check
    mem_gib: Optional[float] = None
    offload: bool = False  # releases its GPU memory between phases (where it shares GPUs)
    enable_offload: Optional[bool] = None  # RLinf's spelling of `offload`
    # handed to the entry point in the plan (`components.<name>.options` in its JSON); under
    # env/reward/agent also every key the schema does not declare (RLinf's own)
    options: Dict[str, Any] = field(default_factory=dict)


@dataclass
class WorkerConfig(ComponentConfig):
    """env, reward, agent: the worker components RLinf's configs name at the top level. Each
    runs when it is placed (`cluster.component_placement.env=0-3`) or when anything under it
    is set (CPU-only then); env and reward start the examples the project ships unless `entry`
    says otherwise. The node is open: RLinf's own keys (`env.train.*`, ...) are handed to the
    entry point with the component's options in the plan."""


# ----------------------------------------------------------------------------- cluster
@dataclass
class NameResolveConfig:
    """AReaL's `cluster.name_resolve`: where its processes find each other. The folder of
    `nfs` (nfs_record_root) is made for the run; None: `<run folder>/name_resolve`."""

    type: str = "nfs"  # nfs | etcd3 | ray
    nfs_record_root: Optional[str] = None
    etcd3_addr: Optional[str] = None
    ray_actor_name: Optional[str] = None

    def __post_init__(self) -> None:
        if self.type not in NAME_RESOLVE_TYPES:
            raise ConfigError(
                f"cluster.name_resolve.type={self.type!r}: choose {', '.join(NAME_RESOLVE_TYPES)}"
            )


NAME_RESOLVE_TYPES = ("nfs", "etcd3", "ray")


@dataclass
class NodeGroupConfig:
    """One of `cluster.node_groups` (RLinf's form): a label for some node ranks, with what the
    processes there get (env_configs: node_ranks, python_interpreter_path, env_vars) and what
    the nodes are (hardware.type; `gpus_per_node: 0` or a non-GPU hardware type: CPU-only)."""

    label: str = MISSING
    node_ranks: Any = MISSING  # 0-1, 3, or a list
    env_configs: List[Any] = field(default_factory=list)
    hardware: Any = None  # {type: Franka, configs: [...]}, or a type name
    gpus_per_node: Optional[int] = None  # None: the cluster's; 0: CPU-only
    env: Dict[str, str] = field(default_factory=dict)  # ours: for every node of the group
    python: Optional[str] = None  # ours: the interpreter for every node of the group


@dataclass
class ClusterConfig:
    num_nodes: Optional[int] = None  # None: this machine (1), or what the plan needs on cpu
    gpus_per_node: Optional[int] = None  # None: the GPUs this machine shows
    device: str = "auto"  # auto | cuda | cpu
    # keys: component names, or comma lists of them in YAML ("actor,rollout": all); values:
    # GPU sets, process maps, {node_group, placement} or lists of those (planning.forms)
    component_placement: Dict[str, Any] = field(default_factory=dict)
    node_groups: List[Any] = field(default_factory=list)  # NodeGroupConfig each
    # memory per GPU for the memory check; None: what NVML reports here (this machine's
    # GPUs), else `gpu_type`'s from launcher/memory/capacity.py's table (e.g. h100), else unknown
    gpu_memory_gib: Optional[float] = None
    gpu_type: Optional[str] = None
    # RLinf's run-time placement from profiled times: not supported (placement is decided
    # before anything starts); true is an error that says what to write instead
    auto_scheduler: Optional[bool] = None
    # AReaL's spellings of num_nodes and gpus_per_node (one value: both given and different is
    # an error; n_gpus_per_node: 0 is AReaL's CPU cluster)
    n_nodes: Optional[int] = None
    n_gpus_per_node: Optional[int] = None
    # AReaL's root for logs and checkpoints (made for the run); None: the run folder
    fileroot: Optional[str] = None
    name_resolve: NameResolveConfig = field(default_factory=NameResolveConfig)

    def __post_init__(self) -> None:
        """One home for AReaL's spellings: they become num_nodes and gpus_per_node here."""
        for ours, theirs in (("num_nodes", "n_nodes"), ("gpus_per_node", "n_gpus_per_node")):
            given, alias = getattr(self, ours), getattr(self, theirs)
            if alias is None:
                continue
            if alias == 0 and theirs == "n_gpus_per_node":  # AReaL's CPU template
                if self.device not in ("auto", "cpu") or given:
                    raise ConfigError(
                        "cluster.n_gpus_per_node=0 is a CPU cluster, but "
                        f"cluster.device={self.device} cluster.gpus_per_node="
                        f"{given}: write one of them"
                    )
                self.device = "cpu"
                continue
            if given is not None and given != alias:
                raise ConfigError(
                    f"cluster.{theirs}={alias} and cluster.{ours}={given} say "
                    f"the same thing differently: write one of them"
                )
            setattr(self, ours, alias)


@dataclass
class SchedulerConfig:
    """AReaL's `scheduler.type`: the runner (local, slurm, ray), as `launcher=` chooses it;
    None: `launcher=`'s choice. Both given and different is an error."""

    type: Optional[str] = None


# ----------------------------------------------------------------------------- the run
@dataclass
class LaunchConfig:
    experiment_name: str = "areal"
    trial_name: str = "run"
    model_path: str = DEFAULT_MODEL_PATH
    allocation_mode: Optional[str] = None  # legacy: sglang:d4t2+fsdp:d8 (deprecated)
    # AReaL's several policies: vllm[rollout1]:d2t2+fsdp[actor1]:d4+vllm[rollout2]:d4+...
    multi_agent_allocation: Optional[str] = None
    rollout: RolloutBase = field(default_factory=RolloutConfig)
    actor: TrainEngineBase = field(default_factory=lambda: TrainEngineConfig(backend="fsdp"))
    critic: TrainEngineBase = field(default_factory=TrainEngineConfig)
    ref: TrainEngineBase = field(default_factory=TrainEngineConfig)
    teacher: TrainEngineBase = field(default_factory=TrainEngineConfig)
    # RLinf's forward-only copy of the policy (log-probs): on when placed, or backend set
    inference: TrainEngineBase = field(default_factory=TrainEngineConfig)
    # RLinf's workers, each a WorkerConfig (typed by launcher.planning.components, RLinf's own
    # keys kept as options; an open dict here costs start-up nothing)
    env: Dict[str, Any] = field(default_factory=dict)  # simulators (RLinf's env)
    reward: Dict[str, Any] = field(default_factory=dict)  # reward workers or a server
    agent: Dict[str, Any] = field(default_factory=dict)  # agent/tool processes (CPU)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # components the user declares by name (+components.sim.entry=sim.py), beside the built-in
    # engines above: each a ComponentConfig, checked by launcher.planning.components (a typed
    # dict here would make Hydra refuse `+components.sim.entry=...`, a key below a new one)
    components: Dict[str, Any] = field(default_factory=dict)
    # the runner's own schema (launcher=local|slurm|ray): launcher.runners.<name>.Config
    launcher: Any = MISSING
    # the recipe's own schema (recipe=grpo), handed to its entry point in the plan
    recipe: Any = MISSING


def engine(spec: LaunchConfig, name: str, kind: Optional[str] = None) -> Any:
    """The config node of engine `name`: a built-in's (rollout, actor, ...), or a declared
    one's (`components.actor2: {kind: train, backend: fsdp:d4, feeds: rollout2}`) typed by its
    kind's engine schema once, or a kind's defaults for an engine only a legacy string names
    (`multi_agent_allocation`)."""
    if name in ENGINES:
        return getattr(spec, name)
    typed_nodes = spec.__dict__.setdefault("_declared_engines", {})
    if name not in typed_nodes:
        raw = dict(spec.components.get(name) or {})
        kind = str(raw.pop("kind", kind or registry.TRAIN))
        raw.pop("feeds", None)
        schema = RolloutConfig if kind == registry.SERVE else TrainEngineConfig
        typed_nodes[name] = (
            typed(f"components.{name}", schema, raw, "an engine's keys")
            if raw
            else schema(backend=None)
        )
    return typed_nodes[name]


ENGINE_KINDS = (registry.SERVE, registry.TRAIN)


def declared_kind(raw: Any) -> str:
    """The kind of a component declared under `components.<name>` (worker unless it says)."""
    kind = raw.get("kind", registry.WORKER) if isinstance(raw, Mapping) else registry.WORKER
    return str(kind)


def declared_engines(spec: LaunchConfig) -> dict[str, str]:
    """name -> kind of the serving and training components declared under `components`."""
    return {
        str(n): declared_kind(raw)
        for n, raw in spec.components.items()
        if declared_kind(raw) in ENGINE_KINDS
    }


def declared_feeds(spec: LaunchConfig) -> dict[str, str]:
    """training component -> the serving component it pushes weights to (`feeds`)."""
    return {
        str(n): str(raw["feeds"])
        for n, raw in spec.components.items()
        if isinstance(raw, Mapping) and raw.get("feeds") is not None
    }


def backend_of(spec: Optional[str]) -> Optional[str]:
    """'sglang:d4t2' -> 'sglang'; None (engine off) stays None."""
    if spec is None:
        return None
    return str(spec).partition(":")[0].strip().lower() or None


def backend_options(name: str, backend: str, values: Any) -> Any:
    """`<name>.<backend>.*` as the backend's typed Options: the values set there (a dict, or
    the Options already) over its defaults."""
    return typed(
        f"{name}.{backend}", registry.backend_options(backend), values, f"{backend}'s options"
    )


def typed(where: str, schema: type, values: Any, what: str) -> Any:
    """`values` written at `where` (a dict, or the `schema` dataclass already) as `schema`,
    over its defaults. ConfigError for a key the schema does not declare (with the closest
    one) or a value of the wrong type, as Hydra says them for other keys. `what`: what the
    key holds, for the error when it is no mapping."""
    import difflib

    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(values, schema):
        return values
    if isinstance(values, Mapping) and not values:
        return schema()
    if not isinstance(values, Mapping):
        raise ConfigError(
            f"invalid value in '{where}={values}': {where} holds {what}, e.g. {where}.KEY=VALUE"
        )
    known = [f.name for f in dataclasses.fields(schema)]
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f": did you mean '{where}.{close[0]}'?" if close else ""
            raise ConfigError(
                f"unknown config key '{where}.{key}'{hint} "
                "(`areal-launch --cfg job` prints every key)"
            )
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))
    except OmegaConfBaseException as exc:
        key = str(getattr(exc, "full_key", "") or "")
        message = str(exc).splitlines()[0].strip()
        raise ConfigError(
            f"invalid value in '{where}.{key}={values.get(key)}': {message}"
        ) from None


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore: the run (conf/config.yaml starts from
    it), each runner's (`<name>_schema` in the launcher group, an external runner's under its
    own name) and each recipe's (`<name>_schema` in the recipe group, named in
    launcher.spec.registry: the config layer imports no recipe)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    register_base(False)
    for name in registry.runner_names():
        # a built-in's YAML (conf/launcher/<name>.yaml) starts from <name>_schema; another
        # package's runner has no YAML here, so its schema is the option `launcher=<name>`
        builtin = name in registry.BUILTIN_RUNNERS
        store.store(
            group="launcher",
            name=f"{name}_schema" if builtin else name,
            node=registry.runner_module(name).Config,
        )
    for name, schema in registry.recipe_schemas().items():
        store.store(group="recipe", name=f"{name}_schema", node=schema)


_bases: dict[bool, Any] = {}
_base_state = [False]  # whether the base_config registered now is the open one


def register_base(opened: bool) -> bool:
    """`base_config`, the run's schema conf/config.yaml starts from: as typed (a key it does
    not declare is Hydra's error), or `opened`, every node open, so that a peer's config (its
    trainer's keys beside ours) composes and run_spec sorts the keys out. Returns whether the
    one registered before was open."""
    from hydra.core.config_store import ConfigStore

    before = _base_state[0]
    if opened == before and opened in _bases:
        return before  # registered already: ConfigStore copies a node it stores
    if opened not in _bases:
        node = _open_backend_options()
        if opened:
            _open_all(node)
        _bases[opened] = node
    ConfigStore.instance().store(name="base_config", node=_bases[opened])
    _base_state[0] = opened
    return before


def _open_all(node: Any) -> None:
    from omegaconf import DictConfig, OmegaConf

    OmegaConf.set_struct(node, False)
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            _open_all(child)


def _open_backend_options() -> Any:
    """The run's schema for Hydra with every engine's backend sub-keys open: Hydra closes the
    composed config before it applies the overrides, and `rollout.vllm.KEY=VALUE` takes no `+`
    (backend_options checks the key)."""
    from omegaconf import OmegaConf

    node = OmegaConf.structured(LaunchConfig)
    backends = registry.backend_names()
    for name in ENGINES:
        for key in node[name]:
            if key in backends:
                OmegaConf.set_struct(node[name][key], False)
        if "model" in node[name]:
            OmegaConf.set_struct(node[name]["model"], False)
    for name in OPEN_NODES:
        OmegaConf.set_struct(OmegaConf.select(node, name), False)
    return node


# nodes whose keys the planner checks (RLinf's workers, placement names) rather than Hydra
OPEN_NODES = ("env", "reward", "agent", "cluster.component_placement", "rollout.server_args")
