"""The behaviour of a backend, one base class per kind, and the typed way to get one by name
(docs/architecture.md §13).

A backend's facts (dims, kind, memory model, ...) are a record in launcher.spec.backend_facts;
its behaviour is a subclass of ServeBackend, TrainBackend or WorkerBackend that the record
names, imported only when processes are built. The base classes hold the shared defaults
(flags the plan owns refused, a server's argv head, environment and health URL, the memory
model's inputs), so a backend writes only what differs. The accessors at the end load the
class through the registry, check its kind and hand out one typed instance, so mypy checks
every call into a backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, Mapping, Optional, Sequence, TypeVar

from launcher.backends.common import layered_env, refuse_flags
from launcher.backends.servers import ServerClient, ServerSet, local_gpus, process_name
from launcher.memory.infer import InferenceOptions
from launcher.memory.train import TrainOptions
from launcher.spec import registry
from launcher.spec.backend_facts import BackendFacts
from launcher.spec.errors import ConfigError
from launcher.spec.offload import Offload
from launcher.spec.process import (
    DEFAULT_SERVED_MODEL,
    ENV_COMPONENT,
    ENV_PLAN,
    ENV_RUN_DIR,
    ENV_SERVED_MODEL,
    ProcessSpec,
    host_placeholder,
)

if TYPE_CHECKING:
    from launcher.backends.context import LaunchContext
    from launcher.planning.components import Worker
    from launcher.planning.resolve import Engine
    from launcher.spec.plan import ComponentPlan, Instance, Plan

OptionsT = TypeVar("OptionsT", covariant=True)


@dataclass
class NoOptions:
    """The config sub-key of a backend without options of its own (an option nothing reads
    would be a lie)."""


class Backend(ABC, Generic[OptionsT]):
    """What every backend's behaviour has: its record, the dataclass of its config sub-key
    (`<engine>.<backend>.*`) and the extra_args flags it refuses (flag -> how to fix)."""

    facts: ClassVar[BackendFacts]
    Options: type[OptionsT]
    refused: ClassVar[Mapping[str, str]] = {}

    @property
    def name(self) -> str:
        return self.facts.name

    def options_of(self, engine: Engine) -> OptionsT:
        """The engine's options, typed by this backend's Options (resolve made them so)."""
        options = engine.options
        if not isinstance(options, self.Options):
            raise AssertionError(f"{engine.name}: options of {type(options).__name__}")
        return options

    def user_flags(self, engine: Engine) -> list[str]:
        """The user's own flags for the engine's processes, `<engine>.extra_args` then
        `server_args`; a flag the plan owns is refused in either."""
        refuse_flags(engine.extra_args, self.refused, f"{engine.name}.extra_args")
        refuse_flags(engine.server_args, self.refused, f"{engine.name}.server_args")
        return [*engine.extra_args, *engine.server_args]


class ServeBackend(Backend[OptionsT]):
    """Server instances: HTTP, health-probed, fed weights by the recipe.

    module: `python -m module` starts a server; client: its health probe, weight push,
    release and resume (what the recipe calls); checker: the module that checks its argv
    with the engine's own parser (None: none)."""

    module: ClassVar[str]
    client: ClassVar[ServerClient]
    checker: ClassVar[Optional[str]] = None

    @abstractmethod
    def servers(
        self, comp: ComponentPlan, plan: Plan, engine: Engine, ctx: LaunchContext
    ) -> ServerSet:
        """One ProcessSpec per instance and node of the serving component."""

    def inference_options(self, engine: Engine) -> InferenceOptions:
        """The engine as the inference estimator's inputs: its options named by its record's
        memory_keys (estimator knob -> option, the one home of that mapping), its `dtype`
        option if it has one, and `<engine>.offload` (released between phases)."""
        options = engine.options
        knobs = {knob: getattr(options, key) for knob, key in self.facts.memory_keys.items()}
        dtype = getattr(options, "dtype", None)
        return InferenceOptions(dtype=dtype, release=engine.offload, **knobs)

    def served_model(self, engine: Engine) -> str:
        """The name its servers answer to; the same string goes to trainers
        (AREAL_SERVED_MODEL_NAME)."""
        return str(getattr(engine.options, "served_model_name", None) or DEFAULT_SERVED_MODEL)

    def argv_head(self, engine: Engine, ctx: LaunchContext) -> list[str]:
        """`python -m MODULE`: the backend's module, or the one `<engine>.server_module` names
        (a wrapper of the engine's own server that takes its flags). The interpreter is
        chosen after (launcher.backends.plan_processes.interpreter)."""
        return [ctx.python, "-m", engine.server_module or self.module]

    def env(
        self, engine: Engine, ctx: LaunchContext, defaults: Mapping[str, str]
    ) -> dict[str, str]:
        """The environment one server process gets (docs/architecture.md §7)."""
        contract = {
            ENV_PLAN: ctx.plan_path,
            ENV_RUN_DIR: ctx.run_dir,
            ENV_COMPONENT: engine.name,
            ENV_SERVED_MODEL: self.served_model(engine),
        }
        return layered_env(defaults, ctx.env_for(engine.name), contract)

    def health_url(self, node: int, port: int) -> str:
        """Where the supervisor polls a server before counting it up."""
        return f"http://{host_placeholder(node)}:{port}{self.client.health}"

    def server(
        self,
        plan: Plan,
        comp: ComponentPlan,
        inst: Instance,
        node: int,
        argv: Sequence[str],
        env: Mapping[str, str],
        ports: tuple[int, ...] = (),
        health_port: Optional[int] = None,
    ) -> ProcessSpec:
        """The process of instance `inst` on `node`, its health polled on `health_port`."""
        return ProcessSpec(
            name=process_name(comp, inst, node),
            component=comp.name,
            role="server",
            node=node,
            argv=tuple(argv),
            env=dict(env),
            gpus=local_gpus(plan, inst, node),
            ports=ports,
            health_url=None if health_port is None else self.health_url(node, health_port),
        )


class TrainBackend(Backend[OptionsT]):
    """torchrun ranks running the recipe's entry point (launcher.backends.torchrun groups
    them into jobs)."""

    def engine_args(self, comp: ComponentPlan, engine: Engine) -> list[str]:
        """Flags after the entry point (none: the entry reads its options from the plan)."""
        return []

    def engine_env(self, device: str) -> dict[str, str]:
        """Environment defaults of its ranks."""
        return {}

    def train_options(self, engine: Engine) -> TrainOptions:
        """The engine as the training estimator's inputs: its generic knobs (dtype, micro-batch,
        checkpointing, what it trains, offload between phases), then `memory_effects`."""
        assert engine.training is not None and engine.offload_parts is not None
        parts = engine.offload_parts
        base = TrainOptions(
            dtype=engine.training.dtype,
            max_tokens_per_mb=engine.training.max_tokens_per_mb,
            gradient_checkpointing=engine.training.gradient_checkpointing,
            trainable=engine.training.trainable,
            value_head=engine.training.value_head,
            offload=Offload(parts.weight, parts.optimizer, parts.grad),
        )
        return self.memory_effects(engine, base)

    def memory_effects(self, engine: Engine, base: TrainOptions) -> TrainOptions:
        """`base` with the memory effects of the engine's own options (none here)."""
        return base


class WorkerBackend(Backend[OptionsT]):
    """Plain processes of a declared component (env simulators, reward functions, agents)."""

    @abstractmethod
    def workers(
        self,
        comp: ComponentPlan,
        plan: Plan,
        worker: Worker,
        ctx: LaunchContext,
        server_addrs: Sequence[str],
    ) -> list[ProcessSpec]:
        """One ProcessSpec per instance of the worker component."""


KIND_CLASSES: dict[str, type[Backend[object]]] = {
    registry.SERVE: ServeBackend,
    registry.TRAIN: TrainBackend,
    registry.WORKER: WorkerBackend,
}
_made: dict[str, Backend[object]] = {}


def backend(name: str) -> Backend[object]:
    """The behaviour of backend `name`, any kind: the class its record names, made once;
    ConfigError when no backend has that name or the class is none of its kind's."""
    if name not in _made:
        found = registry.backend_behaviour(name)
        base = KIND_CLASSES[registry.backend_facts(name).kind]
        if not (isinstance(found, type) and issubclass(found, base)):
            raise ConfigError(
                f"backend {name!r}: {found!r} is no {base.__name__} (launcher.backends.kinds)"
            )
        try:
            _made[name] = found()
        except TypeError as exc:  # an abstract method left out
            raise ConfigError(f"backend {name!r}: {exc}") from None
    return _made[name]


def _not_of_kind(found: Backend[object], kind: str) -> ConfigError:
    return ConfigError(
        f"backend {found.name!r} is a {registry.KIND_WORDS[found.facts.kind]} backend, not a "
        f"{registry.KIND_WORDS[kind]} one (choose one of {', '.join(registry.backend_names(kind))})"
    )


def serve_backend(name: str) -> ServeBackend[object]:
    found = backend(name)
    if not isinstance(found, ServeBackend):
        raise _not_of_kind(found, registry.SERVE)
    return found


def train_backend(name: str) -> TrainBackend[object]:
    found = backend(name)
    if not isinstance(found, TrainBackend):
        raise _not_of_kind(found, registry.TRAIN)
    return found


def worker_backend(name: str) -> WorkerBackend[object]:
    found = backend(name)
    if not isinstance(found, WorkerBackend):
        raise _not_of_kind(found, registry.WORKER)
    return found
