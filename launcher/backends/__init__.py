"""Backends: one module per backend, found by name (DESIGN §1).

Each backend module says what it accepts and how its processes start:

    NAME      "vllm", "sglang", "fsdp", "megatron", "archon"
    KIND      INFERENCE (servers) or TRAINING (torchrun workers)
    DIMS      the dims its backend string takes ("dtp"); HYBRID: takes the MoE attn/ffn form
    EXAMPLE   a backend string to show in hints
    ORDER     where it is listed among its kind (errors suggest the first that fits)
    Options   the dataclass of its config sub-key (`rollout.vllm.*`, `actor.fsdp.*`, ...);
              an optional `problem()` says what is wrong with a value (checked at plan time)
    REFUSED   flags its `extra_args` may not hold (flag -> how to fix)
    inference: servers(comp, plan, engine, ctx) -> ServerSet; CLIENT (its HTTP endpoints)
    training:  engine_args(comp, options) -> flags; engine_env(device) -> env defaults

Adding a backend is one module here plus its YAML under conf/<engine>/: modules are found by
listing this package (helper modules have no NAME) and imported on first use, like TorchX's
scheduler registry. The grammar (launcher.alloc) and the config schema (launcher.config) read
their tables from here.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Optional

INFERENCE, TRAINING = "inference", "training"

_table: Optional[dict[str, ModuleType]] = None


def table() -> dict[str, ModuleType]:
    """NAME -> backend module, inference backends first, each kind in ORDER."""
    global _table
    if _table is None:
        found = []
        for info in pkgutil.iter_modules(__path__):
            module = importlib.import_module(f"{__name__}.{info.name}")
            if isinstance(getattr(module, "NAME", None), str):
                found.append(module)
        found.sort(key=lambda m: (m.KIND != INFERENCE, m.ORDER, m.NAME))
        _table = {m.NAME: m for m in found}
    return _table


def get(name: str) -> ModuleType:
    """The backend module `name` (KeyError if there is none)."""
    return table()[name]


def names(kind: Optional[str] = None) -> tuple[str, ...]:
    """Backend names, of one kind or all."""
    return tuple(n for n, m in table().items() if kind is None or m.KIND == kind)


def dims(name: str) -> Optional[str]:
    """The dims backend `name` takes, None for an unknown name."""
    module = table().get(name)
    return None if module is None else str(module.DIMS)
