"""What a backend module is, per kind, as typed protocols (docs/architecture.md §13).

A backend is a module (built-in, or another package's through the `areal_launch.backends`
entry point) holding every fact about its engine; callers reach it only through the accessors
below, which look it up in launcher.spec.registry by name, check its kind and give it its
protocol's type, so mypy checks every call into a backend. The built-in modules are checked
against these protocols at the end of this file. A new kind (a plain-process `worker`) is one
more `Backend` subclass and accessor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence, cast

from launcher.spec import registry
from launcher.spec.errors import ConfigError

if TYPE_CHECKING:
    from launcher.backends.context import LaunchContext
    from launcher.backends.servers import ServerClient, ServerSet
    from launcher.memory.infer import InferenceOptions
    from launcher.memory.train import TrainOptions
    from launcher.planning.components import Worker
    from launcher.planning.resolve import Engine
    from launcher.spec.plan import ComponentPlan, Plan, ProcessSpec


@dataclass(frozen=True)
class Install:
    """The top-level Python package a backend's processes import first, and how to get it
    (the node's preflight says it when an interpreter cannot find the package)."""

    package: str
    hint: str


class Backend(Protocol):
    """Facts every backend has, whatever it runs."""

    @property
    def NAME(self) -> str: ...  # its name in backend strings and config sub-keys
    @property
    def KIND(self) -> str: ...  # registry.SERVE, TRAIN (or WORKER)
    @property
    def DIMS(self) -> str: ...  # the dims its backend string takes ("dtp")
    @property
    def HYBRID(self) -> bool: ...  # takes the MoE (attn:...|ffn:...) form
    @property
    def EXAMPLE(self) -> str: ...  # a backend string for hints
    @property
    def ORDER(self) -> int: ...  # its place among its kind (errors suggest the first)
    @property
    def Options(self) -> type: ...  # the dataclass of its config sub-key
    @property
    def REFUSED(self) -> Mapping[str, str]: ...  # extra_args flag -> how to fix
    @property
    def INSTALL(self) -> Optional[Install]: ...  # None: nothing of its own (a worker's entry)


class ModelBackend(Backend, Protocol):
    """A backend that holds the model on its GPUs: the memory check sizes it."""

    # the estimator's names (memory.infer / memory.train) -> the option under its sub-key
    # that sets it, for the fixes the memory check suggests (absent: no such knob)
    @property
    def MEMORY_KEYS(self) -> Mapping[str, str]: ...
    @property
    def MEMORY_MODEL(self) -> str: ...  # how memory/ sizes it (memory.infer / memory.train)


class ServeBackend(ModelBackend, Protocol):
    """Server instances: HTTP, health-probed, fed weights by the recipe."""

    @property
    def MODULE(self) -> str: ...  # `python -m MODULE` starts a server
    @property
    def CLIENT(self) -> ServerClient: ...  # health probe, weight push, release and resume
    @property
    def CHECKER(self) -> Optional[str]: ...  # module checking argvs with the engine's parser

    def servers(
        self, comp: ComponentPlan, plan: Plan, engine: Engine, ctx: LaunchContext
    ) -> ServerSet: ...

    def inference_options(self, options: Any, release: bool) -> InferenceOptions:
        """Its Options as the inference estimator's inputs (release: rollout.offload)."""


class TrainBackend(ModelBackend, Protocol):
    """torchrun ranks running the recipe's entry point."""

    def engine_args(self, comp: ComponentPlan, options: Any) -> list[str]: ...

    def engine_env(self, device: str) -> dict[str, str]: ...

    def train_options(self, options: Any, base: TrainOptions) -> TrainOptions:
        """`base` (the engine's generic knobs) with its Options' memory effects applied."""


def backend(name: str) -> Backend:
    """The backend `name`, any kind; ConfigError naming the known ones otherwise."""
    found = registry.backend_table().get(name)
    if found is None:
        raise ConfigError(
            f"no backend {name!r}: choose one of {', '.join(registry.backend_names())}"
        )
    return cast(Backend, found)


def _of_kind(name: str, kind: str) -> Any:
    found = backend(name)
    if found.KIND != kind:
        raise ConfigError(
            f"backend {name!r} is a {registry.KIND_WORDS.get(found.KIND, found.KIND)}"
            f" backend, not a {registry.KIND_WORDS[kind]} one (choose one of "
            f"{', '.join(registry.backend_names(kind))})"
        )
    return found


def serve_backend(name: str) -> ServeBackend:
    return cast(ServeBackend, _of_kind(name, registry.SERVE))


def train_backend(name: str) -> TrainBackend:
    return cast(TrainBackend, _of_kind(name, registry.TRAIN))


class WorkerBackend(Backend, Protocol):
    """Plain processes of a declared component (env simulators, reward functions, agents)."""

    def workers(
        self,
        comp: ComponentPlan,
        plan: Plan,
        worker: Worker,
        ctx: LaunchContext,
        server_addrs: Sequence[str],
    ) -> list[ProcessSpec]: ...


def worker_backend(name: str) -> WorkerBackend:
    return cast(WorkerBackend, _of_kind(name, registry.WORKER))


if TYPE_CHECKING:  # mypy checks the built-in modules against their protocols
    from launcher.backends import archon, fsdp, megatron, process, sglang, vllm

    _vllm: ServeBackend = vllm
    _sglang: ServeBackend = sglang
    _fsdp: TrainBackend = fsdp
    _megatron: TrainBackend = megatron
    _archon: TrainBackend = archon
    _process: WorkerBackend = process
