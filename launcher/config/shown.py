"""The config as `--cfg` prints it: under each engine the options of the backend it runs."""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, OmegaConf

from launcher.config.handoff import ours_entry
from launcher.config.schema import backend_of, backend_options
from launcher.spec import registry
from launcher.spec.builtins import ENGINES


def shown_config(cfg: DictConfig) -> DictConfig:
    """`cfg` with, under each engine, the options of the backend it runs with their defaults
    (the schema types them only for the run), and another backend's only where something is
    set there."""
    out = OmegaConf.create(OmegaConf.to_container(cfg))
    assert isinstance(out, DictConfig)
    backends = registry.backend_names()
    for name in ENGINES:
        node = out.get(name)
        if not isinstance(node, DictConfig):
            continue
        used = backend_of(node.get("backend"))
        for key in [k for k in node if k in backends]:
            if key == used:
                node[key] = _typed_options(out, name, key, node[key])
            elif not node[key]:
                del node[key]
    return out


def _typed_options(cfg: DictConfig, name: str, backend: str, values: DictConfig) -> DictConfig:
    """`<name>.<backend>` with the backend's defaults; keys its Options lacks stay beside them
    for an entry not ours (a Megatron option only another trainer has), an error for ours."""
    known = {f.name for f in dataclasses.fields(registry.backend_options(backend))}
    extra = {k: v for k, v in values.items() if k not in known}
    if extra and ours_entry(str(OmegaConf.select(cfg, "trainer.entry", default=""))):
        extra = {}  # backend_options names the first
    typed = OmegaConf.structured(
        backend_options(name, backend, {k: v for k, v in values.items() if k not in extra})
    )
    if extra:
        typed = OmegaConf.merge(OmegaConf.to_container(typed), extra)
    return typed
