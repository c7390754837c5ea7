"""The registries: backends, runners and recipe schemas, found by name (docs/architecture.md
§13).

All are filled the same way, as TorchX fills its scheduler table: the built-in entries (a
backend's record in launcher.spec.backend_facts, a runner's or a recipe schema's module path
below, imported on first use, so `plan` never loads Ray and a Slurm node never loads a backend
it does not run), then the Python entry points of the groups `areal_launch.backends`,
`areal_launch.runners` and `areal_launch.recipes`, so a package outside this repository adds a
backend, a runner or a recipe's schema with one line in its own pyproject.toml:

    [project.entry-points."areal_launch.backends"]
    mylm = "mylm_backend:FACTS"       # a BackendFacts naming the class that runs it

A backend's record is all that parsing, the config schema and the plan read: a built-in's is
data here, another package's is loaded when its name is first looked up (or a listing needs
its kind), and one that cannot be loaded is an error for that name alone, left out of the
listings. Its behaviour (its class, and the Options dataclass of its config sub-key) is
imported only when something asks for it. This module sits at the bottom layer and names the
upper ones only as strings.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, field, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

from launcher.spec.backend_facts import (
    BUILTIN_BACKENDS,
    KIND_WORDS,
    KINDS,
    SERVE,
    TRAIN,
    WORKER,
    BackendFacts,
)
from launcher.spec.errors import ConfigError

__all__ = ["KIND_WORDS", "KINDS", "SERVE", "TRAIN", "WORKER"]  # the kinds, read through here too

BACKEND_GROUP = "areal_launch.backends"
RUNNER_GROUP = "areal_launch.runners"
RECIPE_GROUP = "areal_launch.recipes"
BUILTIN_RUNNERS = {
    "local": "launcher.runners.local",
    "slurm": "launcher.runners.slurm",
    "ray": "launcher.runners.ray",
}
# recipe name -> its options' schema (the `recipe` group's `<name>_schema`)
BUILTIN_RECIPES = {
    "grpo": "recipes.grpo.options:GRPOOptions",
}


@dataclass
class Registry:
    """name -> module, built-ins first, then the entry points of `group` (loaded once)."""

    group: str
    builtin: dict[str, str]
    _found: Optional[dict[str, str]] = field(default=None, repr=False)
    _loaded: dict[str, object] = field(default_factory=dict, repr=False)

    def paths(self) -> dict[str, str]:
        """name -> what loads it ("pkg.module" or "pkg.module:attr"); built-ins win a clash."""
        if self._found is None:
            found = dict(self.builtin)
            for name, value in _entry_points().get(self.group, ()):
                found.setdefault(name, value)
            self._found = found
        return self._found

    def names(self) -> tuple[str, ...]:
        return tuple(self.paths())

    def load(self, name: str) -> object:
        """The module (or object) registered as `name`; KeyError for an unknown name."""
        if name not in self._loaded:
            path = self.paths()[name]
            self._loaded[name] = load_path(
                path,
                f"{self.group} entry {name!r} = {path!r}",
                "reinstall the package that registers it",
            )
        return self._loaded[name]


def load_path(path: str, what: str, fix: str) -> object:
    """The object `path` names ("package.module" or "package.module:attr"), imported now;
    ConfigError saying `what` could not be loaded and `fix` otherwise. Anything the module
    raises on import counts: one broken package must not take the others down."""
    module, _, attr = path.partition(":")
    try:
        obj: object = importlib.import_module(module)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
    except Exception as exc:  # a third party's module may raise anything while importing
        raise ConfigError(f"{what} cannot be loaded ({type(exc).__name__}: {exc}); {fix}") from None
    return obj


@lru_cache(maxsize=None)
def _entry_points() -> dict[str, tuple[tuple[str, str], ...]]:
    """Our groups' (name, value) pairs, from one scan of the installed distributions, shared by
    the registries. Read straight from each distribution's `entry_points.txt` (PyPA's entry
    points file format) on sys.path, first distribution of a name wins as in
    importlib.metadata: importing and running importlib.metadata costs ~30 ms of every
    command's start-up (it parses every distribution's METADATA with the email package); this
    costs ~2 ms."""
    groups = (BACKEND_GROUP, RUNNER_GROUP, RECIPE_GROUP)
    found: dict[str, list[tuple[str, str]]] = {g: [] for g in groups}
    seen: set[str] = set()
    for folder in sys.path:
        try:
            entries = sorted(
                e.name
                for e in os.scandir(folder or ".")
                if e.name.endswith((".dist-info", ".egg-info"))
            )
        except OSError:  # a zip, or a folder that is not there
            continue
        for entry in entries:
            dist = re.sub(r"[-_.]+", "_", entry.rpartition(".")[0].split("-")[0]).lower()
            if dist in seen:
                continue
            seen.add(dist)
            try:
                text = Path(folder or ".", entry, "entry_points.txt").read_text()
            except OSError:
                continue
            for group, name, value in _entry_lines(text):
                if group in found:
                    found[group].append((name, value))
    return {g: tuple(pairs) for g, pairs in found.items()}


def _entry_lines(text: str) -> list[tuple[str, str, str]]:
    """(group, name, value) of an entry_points.txt: `[group]` sections of `name = value`."""
    out, group = [], ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif "=" in line and not line.startswith(("#", ";")):
            name, _, value = line.partition("=")
            out.append((group, name.strip(), value.strip()))
    return out


BACKENDS = Registry(BACKEND_GROUP, {})  # other packages' records; the built-ins are data
RUNNERS = Registry(RUNNER_GROUP, BUILTIN_RUNNERS)
RECIPES = Registry(RECIPE_GROUP, BUILTIN_RECIPES)
_behaviour: dict[str, object] = {}


def find_backend(name: str) -> Optional[BackendFacts]:
    """The record of backend `name`, None when no backend has that name; ConfigError when
    another package's entry for it cannot be loaded or is no valid record."""
    found = BUILTIN_BACKENDS.get(name)
    if found is not None or name not in BACKENDS.paths():
        return found
    where = f"{BACKEND_GROUP} entry {name!r} = {BACKENDS.paths()[name]!r}"
    facts = BACKENDS.load(name)
    if not isinstance(facts, BackendFacts):
        raise ConfigError(
            f"{where} is a {type(facts).__name__}, not a BackendFacts "
            "(launcher.spec.backend_facts); point the entry point at the backend's record"
        )
    problem = facts.problem() or (
        f"its record is named {facts.name!r}" if facts.name != name else None
    )
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return facts


def backend_facts(name: str) -> BackendFacts:
    """The record of backend `name`; ConfigError naming the known ones for an unknown name."""
    found = find_backend(name)
    if found is None:
        raise ConfigError(f"no backend {name!r}: choose one of {', '.join(backend_names())}")
    return found


@lru_cache(maxsize=None)
def _listed() -> tuple[BackendFacts, ...]:
    """Every backend that can be loaded, in kind order (serve, train, worker), each kind by
    its order: the built-ins, then other packages' (built-ins win a name); one that cannot be
    loaded is left out here and named in its error when it is looked up."""
    found = list(BUILTIN_BACKENDS.values())
    for name in BACKENDS.paths():
        if name in BUILTIN_BACKENDS:
            continue
        try:
            facts = find_backend(name)
        except ConfigError:
            continue
        if facts is not None:
            found.append(facts)
    return tuple(sorted(found, key=lambda f: (KINDS.index(f.kind), f.order, f.name)))


def backend_names(kind: Optional[str] = None) -> tuple[str, ...]:
    """Backend names, of one kind or all, in kind order."""
    return tuple(f.name for f in _listed() if kind is None or f.kind == kind)


def backend_dims(name: str) -> Optional[str]:
    """The dims backend `name` takes, None for an unknown name."""
    found = find_backend(name)
    return None if found is None else found.dims


def backend_behaviour(name: str) -> object:
    """The class that runs backend `name` (its record's `behaviour`), imported on first use;
    launcher.backends.kinds checks and types it."""
    if name not in _behaviour:
        facts = backend_facts(name)
        _behaviour[name] = load_path(
            facts.behaviour,
            f"backend {name!r} ({facts.behaviour})",
            "reinstall the package that provides it"
            + (f" ({facts.install.hint})" if facts.install else ""),
        )
    return _behaviour[name]


def backend_options(name: str) -> type:
    """The dataclass of backend `name`'s config sub-key (`rollout.vllm.*`): its class's
    `Options`, the one thing of its behaviour the config layer reads."""
    found = getattr(backend_behaviour(name), "Options", None)
    if not (isinstance(found, type) and is_dataclass(found)):
        raise ConfigError(f"backend {name!r}: its class has no Options dataclass")
    return found


def refused_flags(name: str) -> Mapping[str, str]:
    """The flags backend `name`'s processes may not be given in extra_args (flag -> how to
    fix it): its class's `refused`."""
    found = getattr(backend_behaviour(name), "refused", {})
    if not isinstance(found, Mapping):
        raise ConfigError(f"backend {name!r}: its class's refused is no mapping")
    return found


def runner_names() -> tuple[str, ...]:
    return RUNNERS.names()


def runner_module(name: str) -> Any:
    """The runner module `name` (its `Config` and `Runner`, typed by launcher.runners'
    RunnerModule); a clear error for an unknown one."""
    if name not in RUNNERS.paths():
        raise ConfigError(f"no runner {name!r}: choose one of {', '.join(RUNNERS.names())}")
    return RUNNERS.load(name)


def recipe_schemas() -> dict[str, type]:
    """Recipe name -> the dataclass its options are typed by (imported here, on first use)."""
    out: dict[str, type] = {}
    for name in RECIPES.names():
        schema = RECIPES.load(name)
        if not isinstance(schema, type):
            raise ConfigError(f"{RECIPE_GROUP} entry {name!r} is no class")
        out[name] = schema
    return out
