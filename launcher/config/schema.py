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
import functools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from omegaconf import MISSING

from launcher.spec import registry
from launcher.spec.builtins import ENGINES
from launcher.spec.entry import check_module, check_python, server_flags
from launcher.spec.errors import ConfigError
from launcher.spec.limits import seconds_problem
from launcher.spec.offload import Offload
from launcher.spec.request import HEALTH_TIMEOUT_S

DEFAULT_MODEL_PATH = "~/.cache/areal-launch/tiny-llama"


# ----------------------------------------------------------------------------- engines
@dataclass
class Parallel:
    """The model-parallel sizes of an engine whose backend is written without dims and that
    is placed (`actor.backend=megatron` on `cluster.component_placement.actor=0-7`): its world
    size comes from the placement, its tp, pp and cp from here, its data parallel size is the
    rest. None: 1."""

    tp: Optional[int] = None
    pp: Optional[int] = None
    cp: Optional[int] = None


@dataclass
class Resources:
    """What each GPU of an engine's processes asks of the scheduler, beside the GPU itself
    (a process on no GPU asks it once). Each runner honours what it can and says the rest in a
    note (docs/architecture.md §8): Slurm asks the most of every engine for the whole job and
    one image, nodelist and exclude for all; Ray adds each engine's to its plan node's bundle."""

    cpus_per_gpu: Optional[int] = None
    mem_gib_per_gpu: Optional[int] = None
    image: Optional[str] = None  # a container image
    nodelist: Optional[str] = None  # Slurm: the nodes the job must run on
    exclude: Optional[str] = None  # Slurm: nodes it must not run on
    reservation: Optional[str] = None  # Slurm: the reservation the job runs in
    exclusive: Optional[bool] = None  # Slurm: nodes shared with no other job (true) or not


@dataclass
class RolloutBase:
    """rollout: the inference servers. backend None = off; a bare name (`vllm`) = that backend
    sized for the machine (launcher.defaults)."""

    backend: Optional[str] = "vllm"
    model_path: Optional[str] = None  # None: the top-level model_path
    offload: bool = False  # release weights/KV between phases (memory saver / sleep mode)
    parallel: Parallel = field(default_factory=Parallel)  # for a placed backend without dims
    # env and rollout take turns in this many stages of a batch each (a pipelined rollout);
    # the recipe reads it from the plan's engine options
    pipeline_stage_num: int = 1
    health_timeout_s: float = HEALTH_TIMEOUT_S
    extra_args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)  # this engine's processes only
    # the servers' interpreter (None: the node group's, else the runner's), the module they
    # run (None: the backend's own, e.g. a wrapper of the engine's server) and more flags for
    # it as a mapping ({max_num_seqs: 64}: --max-num-seqs 64)
    python: Optional[str] = None
    server_module: Optional[str] = None
    server_args: Dict[str, Any] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)

    def __post_init__(self) -> None:
        check_serving_keys("rollout", self)


TRAIN_DTYPES = ("float32", "bfloat16", "float16")
MAX_TOKENS_PER_MB = 1 << 24


@dataclass
class MicroBatchSpec:
    """How a training step splits its batch: each forward/backward holds at most this many
    tokens, which is what sizes a trainer's activation memory."""

    max_tokens_per_mb: int = 10240

    def __post_init__(self) -> None:
        n = self.max_tokens_per_mb
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MAX_TOKENS_PER_MB:
            raise ConfigError(
                f"mb_spec.max_tokens_per_mb={n}: a number of tokens from 1 to {MAX_TOKENS_PER_MB}"
            )


@dataclass
class TrainEngineBase:
    """actor, critic, ref, teacher, inference. backend None = off; "" = the actor's backend
    and options; a bare name (`fsdp`) = that backend sized for the machine. The entry point
    trains with dtype, gradient_checkpointing and mb_spec; the memory check sizes the engine
    by them."""

    backend: Optional[str] = None
    dtype: Optional[str] = None  # weights, grads, optimizer states; None: float32 on cpu, else bf16
    gradient_checkpointing: bool = False  # recompute each layer in backward (less memory)
    mb_spec: MicroBatchSpec = field(default_factory=MicroBatchSpec)
    offload: Offload = field(default_factory=Offload)
    parallel: Parallel = field(default_factory=Parallel)  # for a placed backend without dims
    # the model's settings for the entry point (precision, ...), handed to it in the plan
    model: Dict[str, Any] = field(default_factory=dict)
    extra_args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)  # this engine's processes only
    resources: Resources = field(default_factory=Resources)

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in TRAIN_DTYPES:
            raise ConfigError(f"dtype={self.dtype!r}: choose {', '.join(TRAIN_DTYPES)}")


def _with_backend_options(base: type, kinds: tuple[str, ...], name: str) -> type:
    """`base` plus one sub-key per backend of `kinds`: what is set under it, a free dict that
    `backend_options` types by the backend's Options for the engines that use it. Typing every
    backend's options on every engine here made composing the slowest part of a command."""
    extra: list[tuple[str, Any, Any]] = [
        (b, Any, field(default_factory=dict)) for k in kinds for b in registry.backend_names(k)
    ]
    made = dataclasses.make_dataclass(name, extra, bases=(base,))
    made.__module__ = __name__  # found where it lives (OmegaConf names it in messages)
    return made


RolloutConfig = _with_backend_options(RolloutBase, (registry.SERVE,), "RolloutConfig")
TrainEngineConfig = _with_backend_options(TrainEngineBase, (registry.TRAIN,), "TrainEngineConfig")


# ----------------------------------------------------------------------------- the teacher
@dataclass
class TeacherBase(TrainEngineBase):
    """teacher: a frozen model the policy learns from. On a training backend (`fsdp:d4`) it
    runs forwards beside the actor, as critic and ref do; on a serving backend (`vllm:d1t2`)
    it is a serving component: its servers score the samples' tokens (prompt log-probs) for
    the distillation term, frozen (no weight sync), and the trainers find them in
    AREAL_TEACHER_ADDRS. A served teacher takes the serving keys below and its backend's
    options (`teacher.vllm.*`); `offload.weight` releases its weights and KV cache between
    phases."""

    model_path: Optional[str] = None  # its own model (None: the top-level model_path)
    health_timeout_s: float = HEALTH_TIMEOUT_S  # a served teacher's, as rollout's
    python: Optional[str] = None
    server_module: Optional[str] = None
    server_args: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_serving_keys("teacher", self)


def check_serving_keys(name: str, node: Any) -> None:
    """The keys a serving engine's servers take (rollout's, a served teacher's), checked."""
    problem = seconds_problem(node.health_timeout_s, allow_zero=False)
    if problem:
        raise ConfigError(f"{name}.health_timeout_s={node.health_timeout_s}: {problem}")
    check_python(f"{name}.python", node.python)
    check_module(f"{name}.server_module", node.server_module)
    server_flags(f"{name}.server_args", node.server_args)


TeacherConfig = _with_backend_options(
    TeacherBase, (registry.TRAIN, registry.SERVE), "TeacherConfig"
)


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
    by default a `worker`, plain processes the launcher starts, supervises, restarts and stops
    with the run (env simulators, reward functions, agents). Placed on GPUs by
    `cluster.component_placement.<name>` (`processes_per_gpu` each), else CPU-only
    (`processes` of them, on the first node). Checked by launcher.planning.components, which
    builds it from what the user wrote. (`kind: serve|train` declares an engine instead, with
    that kind's keys: `engine()`.)"""

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
    # handed to the entry point in the plan (`components.<name>.options` in its JSON)
    options: Dict[str, Any] = field(default_factory=dict)
    # a serving component: one process on the node of each of its instances, CPU-only (an
    # agent loop per rollout engine); None: placed as above
    beside: Optional[str] = None


# ----------------------------------------------------------------------------- cluster
@dataclass
class NodeGroupConfig:
    """One of `cluster.node_groups`: a label for some node ranks, with what the processes there
    get (env, python) and what the nodes are (`gpus_per_node: 0`: CPU-only; hardware: the kind
    of device they drive, a robot's type, shown in the plan)."""

    label: str = MISSING
    node_ranks: Any = MISSING  # 0-1, 3, or a list
    gpus_per_node: Optional[int] = None  # None: the cluster's; 0: CPU-only
    env: Dict[str, str] = field(default_factory=dict)  # for every node of the group
    python: Optional[str] = None  # the interpreter for every node of the group
    hardware: Optional[str] = None


@dataclass
class ProfilingConfig:
    """cluster.profiling: what the run profiles (launcher.planning.profiling checks it, the
    plan carries it to the processes, launcher.spec.profiling says how each backend records).
    On when `enabled` is true, or when it is unset and another key here is set (as RLinf reads
    its section)."""

    enabled: Optional[bool] = None
    backend: Optional[str] = None  # torch (None): torch.profiler traces in the default
    # recipe's trainer ranks; nsight: the processes run under `nsys profile`
    components: List[str] = field(default_factory=list)  # []: every trainer
    steps: Optional[List[int]] = None  # global step numbers (1 first); None / []: every step
    output_dir: Optional[str] = None  # None: <run folder>/profiles
    options: Dict[str, Any] = field(default_factory=dict)  # nsight: nsys profile's options
    flags: Any = field(default_factory=list)  # nsight: its bare flags, a list or one (as RLinf)


@dataclass
class ClusterConfig:
    num_nodes: Optional[int] = None  # None: this machine (1), or what the plan needs on cpu
    gpus_per_node: Optional[int] = None  # None: the GPUs this machine shows
    device: str = "auto"  # auto | cuda | cpu
    # keys: component names, or comma lists of them in YAML ("actor,rollout": all); values:
    # GPU sets, process maps, {node_group, placement} or lists of those (planning.forms)
    component_placement: Dict[str, Any] = field(default_factory=dict)
    # component -> the component whose GPUs it takes (their world sizes must match)
    colocate: Dict[str, str] = field(default_factory=dict)
    # components that never share GPUs by default (critic, ref, teacher on the actor's)
    separate: List[str] = field(default_factory=list)
    # engines asking more GPUs than the cluster has share them, handed out in turn (a warning
    # says so); false: too few GPUs is an error
    oversubscribe: bool = False
    node_groups: List[Any] = field(default_factory=list)  # NodeGroupConfig each
    # memory per GPU for the memory check; None: what NVML reports here (this machine's
    # GPUs), else `gpu_type`'s from launcher/memory/capacity.py's table (e.g. h100), else unknown
    gpu_memory_gib: Optional[float] = None
    gpu_type: Optional[str] = None
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)


# ----------------------------------------------------------------------------- the run
@dataclass
class LaunchConfig:
    experiment_name: str = "areal"
    trial_name: str = "run"
    model_path: str = DEFAULT_MODEL_PATH
    rollout: RolloutBase = field(default_factory=RolloutConfig)
    actor: TrainEngineBase = field(default_factory=lambda: TrainEngineConfig(backend="fsdp"))
    critic: TrainEngineBase = field(default_factory=TrainEngineConfig)
    ref: TrainEngineBase = field(default_factory=TrainEngineConfig)
    teacher: TeacherBase = field(default_factory=TeacherConfig)
    # a forward-only copy of the policy that computes log-probs: on when placed, or backend set
    inference: TrainEngineBase = field(default_factory=TrainEngineConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # components the user declares by name (+components.sim.entry=sim.py), beside the built-in
    # engines above: each a ComponentConfig, checked by launcher.planning.components (a typed
    # dict here would make Hydra refuse `+components.sim.entry=...`, a key below a new one)
    components: Dict[str, Any] = field(default_factory=dict)
    # the runner's own schema (launcher=local|slurm|ray): launcher.runners.<name>.Config
    launcher: Any = MISSING
    # the recipe's own schema (recipe=grpo), handed to its entry point in the plan
    recipe: Any = MISSING


def engine(config: LaunchConfig, name: str, kind: Optional[str] = None) -> Any:
    """The config node of engine `name`: a built-in's (rollout, actor, ...), or a declared
    one's (`components.actor2: {kind: train, backend: fsdp:d4, feeds: rollout2}`) typed by its
    kind's engine schema."""
    if name in ENGINES:
        return getattr(config, name)
    raw = dict(config.components.get(name) or {})
    kind = str(raw.pop("kind", kind or registry.TRAIN))
    raw.pop("feeds", None)
    schema = RolloutConfig if kind == registry.SERVE else TrainEngineConfig
    return (
        typed(f"components.{name}", schema, raw, "an engine's keys")
        if raw
        else schema(backend=None)
    )


ENGINE_KINDS = (registry.SERVE, registry.TRAIN)


def declared_kind(raw: Any) -> str:
    """The kind of a component declared under `components.<name>` (worker unless it says)."""
    kind = raw.get("kind", registry.WORKER) if isinstance(raw, Mapping) else registry.WORKER
    return str(kind)


def declared_engines(config: LaunchConfig) -> dict[str, str]:
    """name -> kind of the serving and training components declared under `components`."""
    return {
        str(n): declared_kind(raw)
        for n, raw in config.components.items()
        if declared_kind(raw) in ENGINE_KINDS
    }


def declared_feeds(config: LaunchConfig) -> dict[str, str]:
    """training component -> the serving component it pushes weights to (`feeds`)."""
    return {
        str(n): str(raw["feeds"])
        for n, raw in config.components.items()
        if isinstance(raw, Mapping) and raw.get("feeds") is not None
    }


def backend_of(text: Optional[str]) -> Optional[str]:
    """'sglang:d4t2' -> 'sglang'; None (engine off) stays None."""
    if text is None:
        return None
    return str(text).partition(":")[0].strip().lower() or None


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


@functools.cache
def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (once a process: it is Hydra's global
    registry), every node open (open_schema): the run (conf/config.yaml starts from it),
    each runner's (`<name>_schema` in the launcher group, an external runner's under its own
    name) and each recipe's (`<name>_schema` in the recipe group, named in
    launcher.spec.registry: the config layer imports no recipe)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="base_config", node=open_schema())
    for name in registry.runner_names():
        # a built-in's YAML (conf/launcher/<name>.yaml) starts from <name>_schema; another
        # package's runner has no YAML here, so its schema is the option `launcher=<name>`
        builtin = name in registry.BUILTIN_RUNNERS
        store.store(
            group="launcher",
            name=f"{name}_schema" if builtin else name,
            node=open_schema(registry.runner_module(name).Config),
        )
    for name, schema in registry.recipe_schemas().items():
        store.store(group="recipe", name=f"{name}_schema", node=open_schema(schema))


def open_schema(schema: type = LaunchConfig) -> Any:
    """`schema` (the run's, conf/config.yaml starts from it) as Hydra composes it, every node
    open: Hydra composes any key (a peer's, a typo), and config.run sorts them out (the peers'
    adapters translate theirs, an unknown one is an error naming the closest key, or the
    entry's when the entry is not ours); a typed key's value is still checked by Hydra."""
    from omegaconf import OmegaConf

    node = OmegaConf.structured(schema)
    _open_all(node)
    return node


def _open_all(node: Any) -> None:
    """Open `node` and every node below it. The user's own dicts (`launcher.env`, `components`)
    are open too: a config file adds a component or a variable as the command line does, and a
    `+` on the command line would guard against no typo that an open key lets through."""
    from omegaconf import DictConfig, OmegaConf

    OmegaConf.set_struct(node, False)
    for key in node:
        if OmegaConf.is_missing(node, key):
            continue
        child = node[key]
        if isinstance(child, DictConfig):
            _open_all(child)
