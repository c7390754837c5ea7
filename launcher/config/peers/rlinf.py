"""RLinf's configs as RLinf means them: its keys in ours (reference: RLinf's
rlinf/scheduler/placement/*, rlinf/scheduler/cluster/*, examples/**/config/*.yaml).

    <engine>.enable_offload                 <engine>.offload (a trainer: weights and
                                            optimizer states)
    <engine>.offload_weight, _optimizer,    <engine>.offload.weight, .optimizer, .grad
      _grad
    rollout.tensor_parallel_size,           rollout.parallel.tp, .pp (a placed backend
      pipeline_parallel_size                without dims)
    <engine>.model.tensor_model_parallel_   <engine>.parallel.tp, .pp, .cp (its other model
      size, pipeline_..., context_...       keys stay the entry's: <engine>.model)
    env:, reward:, agent:                   components.env, .reward, .agent: worker
                                            components, on when placed or when anything is
                                            set under them; RLinf's own keys their options;
                                            env and reward start the workers this project
                                            ships unless `entry` says otherwise
    cluster.node_groups[*].env_configs      the group's env and python (whole groups only)
    cluster.node_groups[*].hardware         hardware (its type); CPU-only unless the group
                                            gives gpus_per_node
    cluster.auto_scheduler: true            refused: placement is decided before anything
                                            starts

Placement forms (GPU sets, process maps, `{node_group, placement}`, node groups) are ours too
and need no translation (launcher.planning.forms, launcher.planning.nodes).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from launcher.config.peers import Context, Translation
from launcher.config.peers.edit import get, has, put, take
from launcher.config.schema import ComponentConfig
from launcher.spec.builtins import ENGINES
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import ConfigError, PlacementError
from launcher.spec.gpuset import parse_gpu_set
from launcher.spec.limits import MAX_NODES

WORKERS = ("env", "reward", "agent")  # RLinf's worker components, top-level keys of its configs
# what RLinf's worker names start when no entry is given: the examples this project ships,
# each an HTTP service (its health path) the default recipe talks to
SHIPPED = {
    "env": ("-m recipes.workers.text_env", "/health"),
    "reward": ("-m recipes.workers.reward_server", "/health"),
}
SERVE_PARALLEL = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp"}
TRAIN_PARALLEL = {
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "context_parallel_size": "cp",
}
OFFLOAD_PARTS = ("weight", "optimizer", "grad")


def translate(job: Any, context: Context, out: Translation) -> None:
    """RLinf's keys in `job` replaced by ours (see the module's table)."""
    if take(job, "cluster.auto_scheduler"):
        raise ConfigError(
            "cluster.auto_scheduler=true: not supported (RLinf's run-time placement); "
            "areal-launch places every component before anything starts: write "
            "cluster.component_placement, or leave it out for the default"
        )
    for name in ENGINES:
        _offload(job, name, out)
        _parallel(job, name, out)
    _workers(job, out)
    _node_groups(job, out)


def _offload(job: Any, name: str, out: Translation) -> None:
    enabled = take(job, f"{name}.enable_offload")
    parts = {p: take(job, f"{name}.offload_{p}") for p in OFFLOAD_PARTS}
    serving = name == "rollout"
    if enabled is not None:
        out.spellings[f"{name}.offload" + ("" if serving else ".weight")] = f"{name}.enable_offload"
    if serving:
        if enabled:
            put(job, f"{name}.offload", True, f"{name}.enable_offload")
        return
    for part in OFFLOAD_PARTS:
        on = parts[part] or (enabled and part != "grad")
        if parts[part] is not None:
            out.spellings[f"{name}.offload.{part}"] = f"{name}.offload_{part}"
        if on:
            put(job, f"{name}.offload.{part}", True, f"{name}.offload_{part}")


def _parallel(job: Any, name: str, out: Translation) -> None:
    """RLinf's model-parallel keys as `<name>.parallel`."""
    keys = (
        {f"{name}.{k}": v for k, v in SERVE_PARALLEL.items()}
        if name == "rollout"
        else {f"{name}.model.{k}": v for k, v in TRAIN_PARALLEL.items()}
    )
    for theirs, ours in keys.items():
        if not has(job, theirs):
            take(job, theirs)  # a null one says nothing
            continue
        put(job, f"{name}.parallel.{ours}", take(job, theirs), theirs)
        out.spellings[f"{name}.parallel.{ours}"] = theirs


def _workers(job: Any, out: Translation) -> None:
    """env, reward and agent as worker components, where on."""
    placement = get(job, "cluster.component_placement") or {}
    placed = {p.strip() for k, v in placement.items() if v is not None for p in str(k).split(",")}
    known = {f.name for f in dataclasses.fields(ComponentConfig)}
    for name in WORKERS:
        raw = take(job, name)
        section = dict(raw) if isinstance(raw, Mapping) else {}
        if not section and name not in placed:
            continue
        if has(job, f"components.{name}"):
            raise ConfigError(
                f"components.{name} and {name}: two sections for one worker; write one of them"
            )
        if raw is not None and not isinstance(raw, Mapping):
            raise ConfigError(f"invalid value in '{name}={raw}': {name} holds a worker's keys")
        component = {k: v for k, v in section.items() if k in known}
        options = {str(k): v for k, v in section.items() if k not in known | {"enable_offload"}}
        if section.get("enable_offload"):
            component["offload"] = True
        if options:
            component["options"] = {**options, **dict(component.get("options") or {})}
        if not str(component.get("entry") or "").strip() and name in SHIPPED:
            component["entry"] = SHIPPED[name][0]
            component.setdefault("health_path", SHIPPED[name][1])
        put(job, f"components.{name}", component, name)
        out.spellings[f"components.{name}"] = name


def _node_groups(job: Any, out: Translation) -> None:
    groups = get(job, "cluster.node_groups")
    if not isinstance(groups, list) or not any(isinstance(g, Mapping) for g in groups):
        return
    put(
        job,
        "cluster.node_groups",
        [_group(g, i) for i, g in enumerate(groups)],
        "cluster.node_groups",
    )


def _group(group: Any, i: int) -> Any:
    """One node group with RLinf's env_configs and hardware read into ours."""
    if not isinstance(group, Mapping):
        return group
    where = f"cluster.node_groups[{i}]"
    out = {k: v for k, v in group.items() if k not in ("env_configs", "hardware")}
    hardware = group.get("hardware")
    if hardware is not None:
        out["hardware"] = (
            str(hardware.get("type", "device")) if isinstance(hardware, Mapping) else str(hardware)
        )
        if out.get("gpus_per_node") is None:
            out["gpus_per_node"] = 0  # RLinf's robots and other devices: CPU-only nodes
    env = {str(k): str(v) for k, v in dict(group.get("env") or {}).items()}
    python = group.get("python")
    for j, item in enumerate(group.get("env_configs") or []):
        if not isinstance(item, Mapping):
            raise ConfigError(
                f"{where}.env_configs[{j}]: a mapping with node_ranks, python_interpreter_path, "
                "env_vars"
            )
        ranks = item.get("node_ranks")
        if ranks is not None and _ranks(f"{where}.env_configs[{j}].node_ranks", ranks) != _ranks(
            f"{where}.node_ranks", group.get("node_ranks")
        ):
            raise ConfigError(
                f"{where}.env_configs[{j}].node_ranks={ranks}: settings for part of a group "
                "are not supported; split the group in two"
            )
        python = item.get("python_interpreter_path") or python
        env_vars = item.get("env_vars") or []
        for pair in env_vars if isinstance(env_vars, list) else [env_vars]:
            if not isinstance(pair, Mapping):
                raise ConfigError(f"{where}.env_configs[{j}].env_vars: NAME: value mappings")
            env.update({str(k): str(v) for k, v in pair.items()})
    if env:
        out["env"] = env
    if python is not None:
        out["python"] = str(python)
    return out


def _ranks(where: str, value: Any) -> frozenset[int]:
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
    try:
        return frozenset(parse_gpu_set(text, ClusterSpec(1, MAX_NODES, "cpu")))
    except PlacementError as exc:
        raise ConfigError(
            f"{where}={value!r}: not node ranks ({str(exc).partition(': ')[2]})"
        ) from None
