"""Reading a peer's keys out of a composed config and writing ours in their place."""

from __future__ import annotations

from typing import Any, Iterable

from launcher.spec.errors import ConfigError


def has(node: Any, key: str) -> bool:
    """Whether the dotted `key` is in `node` (a DictConfig), set to anything but null."""
    from omegaconf import OmegaConf

    return OmegaConf.select(node, key, default=None, throw_on_missing=False) is not None


def take(node: Any, key: str, default: Any = None) -> Any:
    """The value at dotted `key`, resolved and as plain Python, removed from `node`."""
    from omegaconf import DictConfig, OmegaConf, open_dict

    parent, _, leaf = key.rpartition(".")
    holder = OmegaConf.select(node, parent) if parent else node
    if not isinstance(holder, DictConfig) or leaf not in holder:
        return default
    value = holder[leaf]
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    with open_dict(holder):
        del holder[leaf]
    return default if value is None else value


def get(node: Any, key: str, default: Any = None) -> Any:
    """The value at dotted `key`, resolved and as plain Python (left in place)."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(node, key, default=default)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def put(node: Any, key: str, value: Any, written: str) -> None:
    """Our `key` set to `value`, which the config wrote as `written` (named if it is refused)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        OmegaConf.update(node, key, value, merge=False, force_add=True)
    except OmegaConfBaseException as exc:
        message = str(exc).splitlines()[0].strip()
        raise ConfigError(f"invalid value in '{written}={value}': {message}") from None


def drop_empty(node: Any, key: str) -> None:
    """Remove the section at `key` when nothing is left in it."""
    from omegaconf import DictConfig, OmegaConf, open_dict

    parent, _, leaf = key.rpartition(".")
    holder = OmegaConf.select(node, parent) if parent else node
    if isinstance(holder, DictConfig) and leaf in holder:
        child = holder[leaf]
        if child is None or (isinstance(child, DictConfig) and len(child) == 0):
            with open_dict(holder):
                del holder[leaf]


def pin(node: Any, keys: Iterable[str]) -> None:
    """Each of `keys` present in `node` replaced by its resolved value, before any of them is
    taken: `ref.scheduling_spec: ${actor.scheduling_spec}` keeps its value once the actor's is
    taken. A value that does not resolve here (a key only the entry's schema has) stays as
    written."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    found = {}
    for key in keys:
        try:
            if has(node, key):
                found[key] = get(node, key)
        except OmegaConfBaseException:
            continue
    for key, value in found.items():
        OmegaConf.update(node, key, value, merge=False, force_add=True)
