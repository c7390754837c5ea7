"""The registries: backends, runners and recipe schemas, found by name (docs/architecture.md,
"Registries").

All are filled the same way, as TorchX fills its scheduler table: the built-in entries below
(module paths, imported on first use, so `plan` never loads Ray and a Slurm node never loads a
backend it does not run), then the Python entry points of the groups `areal_launch.backends`,
`areal_launch.runners` and `areal_launch.recipes`, so a package outside this repository adds a
backend, a runner or a recipe's schema with one line in its own pyproject.toml:

    [project.entry-points."areal_launch.backends"]
    mylm = "mylm_backend"             # a module that satisfies launcher.backends.protocol

This module sits at the bottom layer and names the upper ones only as strings: the grammar
(launcher.spec.alloc) and the config schema read each backend's facts through it without
importing launcher.backends, and the schema finds the recipes' options without importing
recipes.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from launcher.spec.errors import ConfigError

# kinds of component (and of the backends that run them)
SERVE = "serve"  # server instances (vllm, sglang): HTTP, health-probed
TRAIN = "train"  # torchrun ranks (fsdp, megatron, archon)
WORKER = "worker"  # plain processes (env simulators, reward functions, agents): GPUs or CPU
KINDS = (SERVE, TRAIN, WORKER)
KIND_WORDS = {SERVE: "inference", TRAIN: "training", WORKER: "worker"}  # in messages

BACKEND_GROUP = "areal_launch.backends"
RUNNER_GROUP = "areal_launch.runners"
RECIPE_GROUP = "areal_launch.recipes"
BUILTIN_BACKENDS = {
    "vllm": "launcher.backends.vllm",
    "sglang": "launcher.backends.sglang",
    "fsdp": "launcher.backends.fsdp",
    "megatron": "launcher.backends.megatron",
    "archon": "launcher.backends.archon",
    "process": "launcher.backends.process",
}
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
    _loaded: dict[str, Any] = field(default_factory=dict, repr=False)

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

    def load(self, name: str) -> Any:
        """The module (or object) registered as `name`; KeyError for an unknown name."""
        if name not in self._loaded:
            path = self.paths()[name]
            module, _, attr = path.partition(":")
            try:
                obj: Any = importlib.import_module(module)
                for part in filter(None, attr.split(".")):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as exc:
                raise ConfigError(
                    f"{self.group} entry {name!r} = {path!r} cannot be loaded "
                    f"({exc}); reinstall the package that registers it"
                ) from None
            self._loaded[name] = obj
        return self._loaded[name]


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


BACKENDS = Registry(BACKEND_GROUP, BUILTIN_BACKENDS)
RUNNERS = Registry(RUNNER_GROUP, BUILTIN_RUNNERS)
RECIPES = Registry(RECIPE_GROUP, BUILTIN_RECIPES)
_ordered: Optional[dict[str, Any]] = None


def backend_table() -> dict[str, Any]:
    """NAME -> backend, in kind order (serve, train, worker), each kind by its ORDER."""
    global _ordered
    if _ordered is None:
        found = [BACKENDS.load(n) for n in BACKENDS.names()]
        found.sort(key=lambda b: (KINDS.index(b.KIND), b.ORDER, b.NAME))
        _ordered = {b.NAME: b for b in found}
    return _ordered


def backend(name: str) -> Any:
    """The backend `name` (KeyError if there is none)."""
    return backend_table()[name]


def backend_names(kind: Optional[str] = None) -> tuple[str, ...]:
    """Backend names, of one kind or all."""
    return tuple(n for n, b in backend_table().items() if kind is None or b.KIND == kind)


def backend_dims(name: str) -> Optional[str]:
    """The dims backend `name` takes, None for an unknown name."""
    found = backend_table().get(name)
    return None if found is None else str(found.DIMS)


def runner_names() -> tuple[str, ...]:
    return RUNNERS.names()


def runner_module(name: str) -> Any:
    """The runner module `name` (its `Config` and `Runner`); a clear error for an unknown one."""
    if name not in RUNNERS.paths():
        raise ConfigError(f"no runner {name!r}: choose one of {', '.join(RUNNERS.names())}")
    return RUNNERS.load(name)


def recipe_schemas() -> dict[str, Any]:
    """Recipe name -> the dataclass its options are typed by (imported here, on first use)."""
    return {name: RECIPES.load(name) for name in RECIPES.names()}
