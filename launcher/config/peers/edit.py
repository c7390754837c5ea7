"""Reading a peer's keys out of a composed config and writing ours in their place."""

from __future__ import annotations

from typing import Any

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


def resolve_in_place(node: Any) -> None:
    """Every interpolation in `node` that resolves replaced by its value, so that taking a
    peer's key out never breaks another that points at it (AReaL's `ref.scheduling_spec:
    ${actor.scheduling_spec}`); one that does not resolve here (a key only the peer's trainer
    has) stays as written, for the entry."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    keys = list(node) if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        if isinstance(node, DictConfig) and OmegaConf.is_missing(node, key):
            continue
        if OmegaConf.is_interpolation(node, key):
            try:
                value = node[key]
            except OmegaConfBaseException:
                continue
            node[key] = _literal(
                OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            )
            continue
        child = node[key]
        if isinstance(child, (DictConfig, ListConfig)):
            resolve_in_place(child)


def _literal(value: Any) -> Any:
    """A resolved value as it must be stored to stay that value: a `${` it holds (an escaped
    one resolves to it: a shell's `\\${VAR:-x}` in AReaL's post_exit_hook) escaped again, or
    OmegaConf would read it as an interpolation."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value
