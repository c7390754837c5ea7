"""Resolution: the engines' config -> typed `Engine`s (backend parsed, options, switches).

critic/ref/teacher with an empty backend take the actor's backend and options here, in code
(never by YAML interpolation), and the result records `inherited_from`. A bare backend name
(`rollout.backend=vllm`) is sized for the machine by launcher.planning.sizing before this parses it.
"""

from __future__ import annotations

import dataclasses
import os.path
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from launcher.config.schema import (
    LaunchConfig,
    backend_of,
    backend_options,
    declared_engines,
    declared_feeds,
    engine,
)
from launcher.spec import registry
from launcher.spec.alloc import AllocationError, ModelAllocation, parse_backend
from launcher.spec.builtins import (
    BUILTINS,
    ENGINES,
    INHERITING,
    ON_WHEN_PLACED,
    POLICY,
    PRIMARY,
    builtin_kind,
    builtin_kinds,
)
from launcher.spec.entry import check_module, check_python, server_flags
from launcher.spec.errors import ConfigError
from launcher.spec.offload import Offload

EXAMPLE_DIMS = {registry.SERVE: "d1", registry.TRAIN: "d2"}


@dataclass(frozen=True)
class Engine:
    """One active engine, typed: what every later step needs to know about it."""

    name: str
    alloc: ModelAllocation
    options: Any  # the backend's Options dataclass (launcher.backends.<backend>.Options)
    offload: bool  # releases its memory between phases
    offload_parts: Optional[Offload] = None  # training engines: what it offloads
    extra_args: tuple[str, ...] = ()
    inherited_from: Optional[str] = None
    model_path: str = ""  # the model it loads
    training: Optional["Training"] = None  # training engines: how they train
    # serving engines: their own interpreter, the module their servers run (None: the
    # backend's) and its extra flags as argv (launcher.spec.entry)
    python: Optional[str] = None
    server_module: Optional[str] = None
    server_args: tuple[str, ...] = ()

    @property
    def backend(self) -> str:
        return self.alloc.backend

    @property
    def is_inference(self) -> bool:
        return self.alloc.is_inference


@dataclass(frozen=True)
class Training:
    """How a training engine trains (its entry point reads these from the plan)."""

    dtype: str  # float32 | bfloat16 | float16
    gradient_checkpointing: bool
    max_tokens_per_mb: int
    trainable: bool = True  # gradients and optimizer state (else forwards only: ref, teacher)
    value_head: bool = False  # a critic's


def is_bare(text: Optional[str]) -> bool:
    """A backend name without dims (`vllm`): sized for the machine."""
    return text is not None and ":" not in text and str(text).strip() in registry.backend_names()


@dataclass(frozen=True)
class Chosen:
    """What the config asks to run, before sizing: each engine's backend text as written
    (None: off, "": the actor's), the placement as written, every engine's kind, and which
    serving engine each training engine feeds (weight sync)."""

    texts: dict[str, Optional[str]]
    placement: dict[str, Any]
    kinds: dict[str, str]
    feeds: dict[str, str]


def chosen_backends(config: LaunchConfig) -> Chosen:
    """The built-in and declared engines' backend texts, cluster.component_placement as
    written, every engine's kind and which serving engine each training engine feeds. An
    engine that is on when placed (a forward-only copy of the policy) is on where placed."""
    kinds = {name: b.kind for name, b in BUILTINS.items()}
    kinds.update(declared_engines(config))
    feeds = {n: b.feeds for n, b in BUILTINS.items() if b.feeds} | declared_feeds(config)
    texts = {name: engine(config, name, kind).backend for name, kind in kinds.items()}
    for name in BUILTINS:  # a built-in that may serve (the teacher) is what its backend is
        kinds[name] = builtin_kind(name, backend_kind(texts[name])) or kinds[name]
    for name, text in texts.items():  # `megatron[actor]:(attn:...|ffn:...)`: the name dropped
        if text is not None and "[" in str(text):
            texts[name] = str(parse_for(name, str(text), kinds[name]))
    placement = {str(k): v for k, v in dict(config.cluster.component_placement or {}).items()}
    placed = {p.strip() for k, v in placement.items() if v is not None for p in str(k).split(",")}
    for name in ON_WHEN_PLACED:
        if texts[name] is None and name in placed:
            texts[name] = ""  # a copy of the policy, on its backend
    for src, dst in feeds.items():
        if texts.get(src) is None or src not in kinds:
            continue
        if kinds.get(dst) != registry.SERVE:
            serving = ", ".join(n for n, k in kinds.items() if k == registry.SERVE)
            raise ConfigError(
                f"components.{src}.feeds={dst!r}: not a serving component (serving: {serving})"
            )
    live = {s: d for s, d in feeds.items() if texts.get(s) is not None and texts.get(d) is not None}
    return Chosen(texts, placement, kinds, live)


def backend_kind(text: Optional[str]) -> Optional[str]:
    """The kind of the backend `text` names (`vllm:d1t2` -> serve); None when it names none
    (off, the policy's, a typo: parse_for says what is wrong with it)."""
    found = registry.find_backend(str(backend_of(text) or ""))
    return found.kind if found is not None else None


def parse_for(name: str, text: str, kind: Optional[str] = None) -> ModelAllocation:
    """engine `name`'s backend string, parsed and checked against the engine's kind."""
    field = f"{name}.backend" if name in ENGINES else f"components.{name}.backend"
    try:
        alloc = parse_backend(text, engine=name)
    except AllocationError as exc:
        raise ConfigError(f"{field}: {exc}") from None
    kind = kind or builtin_kind(name) or registry.TRAIN
    if registry.backend_facts(alloc.backend).kind != kind:
        kinds = builtin_kinds(name) or (kind,)
        wanted = ", ".join(n for k in kinds for n in registry.backend_names(k))
        example = "vllm:d1 or sglang:d4t2" if kind == registry.SERVE else "fsdp:d2 or megatron:d2p2"
        word = " or ".join(registry.KIND_WORDS[k] for k in kinds)
        article = "an" if word[0] in "aeiou" else "a"
        raise ConfigError(
            f"{field}={text!r}: {name} needs {article} {word} backend ({wanted}), "
            f"e.g. {field}={example}"
        )
    return alloc


def engines(
    config: LaunchConfig,
    allocs: Mapping[str, ModelAllocation],
    inherited: Mapping[str, str],
    model_path: str,
    device: str = "cuda",
) -> dict[str, Engine]:
    """Typed engines, in ENGINES order, for the parsed allocations. An inheriting engine
    takes the actor's options and training settings (it shares the actor's job when it can)."""
    out: dict[str, Engine] = {}
    for name, alloc in allocs.items():
        source = engine(config, inherited.get(name, name), alloc.kind)  # inheriting: the actor's
        node = engine(config, name, alloc.kind)
        owner = inherited.get(name, name)
        options = backend_options(owner, alloc.backend, getattr(source, alloc.backend))
        problem = getattr(options, "problem", lambda: None)()
        if problem:
            raise ConfigError(f"{owner}.{alloc.backend}.{problem}")
        if alloc.is_inference:
            key = name if name in ENGINES else f"components.{name}"
            check_python(f"{key}.python", node.python)
            check_module(f"{key}.server_module", node.server_module)
            released = node.offload  # a served teacher's: its training keys' offload.weight
            out[name] = Engine(
                name,
                alloc,
                options,
                released.weight if isinstance(released, Offload) else bool(released),
                extra_args=tuple(str(a) for a in node.extra_args),
                model_path=own_model(node, model_path) if name != PRIMARY else model_path,
                python=node.python,
                server_module=node.server_module,
                server_args=server_flags(f"{key}.server_args", dict(node.server_args)),
            )
        else:
            parts: Offload = node.offload
            extra = source.extra_args if name in inherited else node.extra_args
            role = BUILTINS.get(name)
            training = Training(
                source.dtype or ("float32" if device == "cpu" else "bfloat16"),
                bool(source.gradient_checkpointing),
                int(source.mb_spec.max_tokens_per_mb),
                trainable=role.trainable if role else True,
                value_head=role.value_head if role else False,
            )
            out[name] = Engine(
                name,
                alloc,
                options,
                parts.any,
                offload_parts=parts,
                extra_args=tuple(str(a) for a in extra),
                inherited_from=inherited.get(name),
                model_path=own_model(node, model_path),
                training=training,
            )
    return out


def own_model(node: Any, model_path: str) -> str:
    """An engine's own model where it names one (`teacher.model_path`), else the run's."""
    own = getattr(node, "model_path", None)
    return os.path.expanduser(str(own)) if own else model_path


def with_offload(config: LaunchConfig, names: tuple[str, ...]) -> LaunchConfig:
    """`config` with releasing between phases turned on for `names` (collocated defaults)."""
    changes: dict[str, Any] = {}
    for name in names:
        node = engine(config, name)
        if builtin_kind(name) == registry.SERVE:
            changes[name] = dataclasses.replace(node, offload=True)
        else:
            changes[name] = dataclasses.replace(
                node, offload=Offload(optimizer=True, weight=True, grad=node.offload.grad)
            )
    return dataclasses.replace(config, **changes)


# ----------------------------------------------------------------------------- unused options
def check_unused_options(
    config: LaunchConfig,
    chosen: Optional[Mapping[str, Optional[str]]] = None,
    defaults: Optional[LaunchConfig] = None,
) -> None:
    """ConfigError when an option under a backend sub-key the engine does not use is set.

    chosen: engine -> the backend string it runs (absent or None: off), as resolved (legacy
    allocation_mode and the actor fallback applied); None reads `<engine>.backend` from config.
    defaults: a config whose values count as not set (composed without the user's values,
    when group or preset files set engine options); None: the dataclass defaults.
    """
    defaults = defaults if defaults is not None else LaunchConfig()
    texts = dict(chosen) if chosen is not None else _written(config)
    for name in ENGINES:
        text = texts.get(name)
        used = backend_of(text)
        kinds = builtin_kinds(name)
        if text is None:
            _check_off_engine(name, engine(config, name), engine(defaults, name))
        for backend in (b for k in kinds for b in registry.backend_names(k)):
            if backend == used:
                continue
            value = backend_options(name, backend, getattr(engine(config, name), backend))
            default = backend_options(name, backend, getattr(engine(defaults, name), backend))
            for f in dataclasses.fields(value):
                if getattr(value, f.name) != getattr(default, f.name):
                    inherited = name in INHERITING and engine(config, name).backend == ""
                    raise ConfigError(
                        _unused_message(
                            f"{name}.{backend}.{f.name}", name, text, inherited, backend
                        )
                    )


def _check_off_engine(name: str, value: Any, default: Any) -> None:
    """An option of an engine that is off does nothing: ConfigError naming it."""
    backends = set(registry.backend_names())
    for f in dataclasses.fields(value):
        if f.name == "backend" or f.name in backends:
            continue  # the backend's own options: checked with the backends below
        if getattr(value, f.name) != getattr(default, f.name):
            kind = builtin_kind(name) or registry.TRAIN
            example = "vllm" if kind == registry.SERVE else "fsdp"
            raise ConfigError(
                f"{name}.{f.name} is set but {name} is off ({name}.backend is "
                f"null), so it does nothing; remove it or turn {name} on "
                f"({name}={example}, or {name}.backend={example}:"
                f"{EXAMPLE_DIMS[kind]})"
            )


def _written(config: LaunchConfig) -> dict[str, Optional[str]]:
    texts = {name: engine(config, name).backend for name in ENGINES}
    for name in INHERITING:
        if texts[name] is not None and not str(texts[name]).strip():
            texts[name] = texts[POLICY]
    return texts


def _unused_message(key: str, name: str, text: Optional[str], inherited: bool, backend: str) -> str:
    kind = registry.backend_facts(backend).kind
    fix = f"remove it or use {name}.backend={backend}:{EXAMPLE_DIMS[kind]}"
    if text is None:
        return f"{key} is set but {name} is off ({name}.backend is null); {fix}"
    shown = f"{text} (the {POLICY}'s)" if inherited else text
    return f"{key} is set but {name}.backend is {shown}; {fix}"
