"""RLinf's `cluster` section in our keys (reference: RLinf's rlinf/scheduler/cluster/config.py,
cluster.py and its managers): node groups, profiling, and the keys we do not honour.

    node_groups[*].node_ranks: all          every node of the cluster (cluster.num_nodes)
    node_groups[*].env_configs              the group's env and python (an item for part of
                                            the group: refused, one line)
    node_groups[*].hardware                 hardware (its type); CPU-only unless the group
                                            gives gpus_per_node
    profiling                               ours (cluster.profiling): worker_groups as our
                                            components, step indices + 1, nsight by default
    net_emulation, tracer, the dynamic      one note each: not honoured
      scheduler's use_*_policy keys
RLinf ignores a cluster key it does not know; here such a key is the entry's (handed to it)
or an error for our recipe, never dropped without a word.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from launcher.config.peers import Translation
from launcher.config.peers.edit import get, has, put, take
from launcher.config.schema import ProfilingConfig
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import ConfigError, PlacementError
from launcher.spec.gpuset import parse_gpu_set
from launcher.spec.limits import MAX_NODES

NOT_HONOURED = {
    "net_emulation": "RLinf's emulated network links between worker groups (delay, "
    "bandwidth); the run uses the network as it is",
    "tracer": "RLinf's trace of worker events (trace_events.jsonl); no trace is written",
    "use_pre_process_policy": "a setting of RLinf's run-time scheduler (auto_scheduler)",
    "use_wait_before_last_iter_policy": "a setting of RLinf's run-time scheduler",
    "recreate_nccl_groups": "a setting of RLinf's run-time scheduler",
}
PROFILING_KEYS = ("backend", "enabled", "worker_groups", "steps", "output_dir", "options", "flags")


def translate(job: Any, out: Translation) -> None:
    """RLinf's cluster keys in `job` as ours, with a note for each one not honoured."""
    for key, what in NOT_HONOURED.items():
        if has(job, f"cluster.{key}"):
            take(job, f"cluster.{key}")
            out.notes.append(f"cluster.{key}: not honoured ({what})")
    _profiling(job, out)
    _node_groups(job)


def _profiling(job: Any, out: Translation) -> None:
    """RLinf 0.3's `cluster.profiling` in our keys (launcher.config.schema.ProfilingConfig):
    its worker groups are our components (each section's `group_name`; `all`: every group the
    config has; none: nothing is profiled, as RLinf does), its step indices (RLinf's first step
    is 0) our step numbers (the recipe's first is 1), nsight its default backend. A section
    of ours (no `worker_groups`, in a config that is not RLinf's) is left as it is."""
    section = get(job, "cluster.profiling")
    if not isinstance(section, Mapping) or all(v in (None, [], {}) for v in section.values()):
        return  # not written (our schema's defaults)
    ours = {f.name for f in dataclasses.fields(ProfilingConfig)}
    if "worker_groups" not in section and not (_groups(job) and not section.get("components")):
        return
    unknown = sorted(set(map(str, section)) - set(PROFILING_KEYS) - ours)
    if unknown:
        raise ConfigError(
            f"cluster.profiling.{unknown[0]}: not one of RLinf's keys ({', '.join(PROFILING_KEYS)})"
        )
    if section.get("components"):
        raise ConfigError(
            "cluster.profiling: worker_groups (RLinf's) and components (ours) both set; give "
            "one of them"
        )
    backend = str(section.get("backend") or "nsight")
    if backend == "rocprof_sys":
        raise ConfigError(
            "cluster.profiling.backend=rocprof_sys: RLinf's AMD profiler; areal-launch runs "
            "nsight (nsys profile) or torch (torch.profiler in the default recipe)"
        )
    take(job, "cluster.profiling.worker_groups")
    components = _profiled(job, section.get("worker_groups"), out)
    if section.get("enabled") is False or not components:
        put(job, "cluster.profiling.enabled", False, "cluster.profiling.enabled")
        return
    ours_now = {
        "enabled": True,
        "backend": backend,
        "components": components,
        "steps": _steps(section.get("steps"), out),
        "options": _options(section.get("options")),
    }
    for key, value in ours_now.items():
        put(job, f"cluster.profiling.{key}", value, f"cluster.profiling.{key}")
    out.spellings.setdefault("cluster.profiling.components", "cluster.profiling.worker_groups")


def _groups(job: Any) -> dict[str, str]:
    """RLinf's worker group names in `job` (lower case) -> the section (component) of each."""
    return {
        str(value["group_name"]).lower(): str(key)
        for key, value in (job.items() if hasattr(job, "items") else ())
        if isinstance(value, Mapping) and value.get("group_name")
    }


def _profiled(job: Any, given: Any, out: Translation) -> list[str]:
    """The components of RLinf's `worker_groups`; a group this config has no section for is
    one note (RLinf profiles nothing of it either)."""
    groups = _groups(job)
    names = [given] if isinstance(given, str) else list(given or [])
    if not names:
        out.notes.append(
            "cluster.profiling: no worker_groups; RLinf profiles no worker group, and nothing "
            "is profiled here (name the groups, `all`, or our cluster.profiling.components)"
        )
        return []
    if any(str(n).lower() == "all" for n in names):
        return sorted(set(groups.values()))
    found = [groups[str(n).lower()] for n in names if str(n).lower() in groups]
    missing = [str(n) for n in names if str(n).lower() not in groups]
    if missing:
        out.notes.append(
            f"cluster.profiling.worker_groups: no worker group {', '.join(missing)} in this "
            "config (RLinf's channel workers run in no process of their own here); nothing of "
            "it is profiled"
        )
    return list(dict.fromkeys(found))


def _steps(steps: Any, out: Translation) -> Any:
    """RLinf's step indices (0 first) as the recipe's step numbers (1 first)."""
    if steps is None:
        return None
    values = steps if isinstance(steps, list) else [steps]
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in values):
        raise ConfigError(f"cluster.profiling.steps={steps!r}: RLinf's step indices (0, 1, ...)")
    ours = [s + 1 for s in values]
    out.notes.append(
        f"cluster.profiling.steps={values}: RLinf counts steps from 0, the recipe from 1: "
        f"steps {ours} here"
    )
    return ours


def _options(options: Any) -> Any:
    """nsys's options, RLinf's `stop-on-range-end` alias read as RLinf reads it."""
    if not isinstance(options, Mapping) or "stop-on-range-end" not in options:
        return options or {}
    out = {k: v for k, v in options.items() if k != "stop-on-range-end"}
    if "capture-range-end" in out:
        raise ConfigError(
            "cluster.profiling.options: stop-on-range-end and capture-range-end both set; give one"
        )
    value = str(options["stop-on-range-end"]).strip().lower()
    out["capture-range-end"] = {"true": "stop", "1": "stop", "yes": "stop", "on": "stop"}.get(
        value, "none" if value in ("false", "0", "no", "off") else str(options["stop-on-range-end"])
    )
    return out


def _node_groups(job: Any) -> None:
    groups = get(job, "cluster.node_groups")
    if not isinstance(groups, list) or not any(isinstance(g, Mapping) for g in groups):
        return
    nodes = get(job, "cluster.num_nodes")
    put(
        job,
        "cluster.node_groups",
        [_group(g, i, nodes) for i, g in enumerate(groups)],
        "cluster.node_groups",
    )


def _group(group: Any, i: int, num_nodes: Any) -> Any:
    """One node group with RLinf's node_ranks, env_configs and hardware read into ours."""
    if not isinstance(group, Mapping):
        return group
    where = f"cluster.node_groups[{i}]"
    out = {k: v for k, v in group.items() if k not in ("env_configs", "hardware")}
    out["node_ranks"] = _all(group.get("node_ranks"), num_nodes, f"{where}.node_ranks")
    hardware = group.get("hardware")
    if hardware is not None:
        out["hardware"] = (
            str(hardware.get("type", "device")) if isinstance(hardware, Mapping) else str(hardware)
        )
        if out.get("gpus_per_node") is None:
            out["gpus_per_node"] = 0  # RLinf's robots and other devices: CPU-only nodes
    env = {str(k): str(v) for k, v in dict(group.get("env") or {}).items()}
    python = group.get("python")
    whole = _ranks(f"{where}.node_ranks", out["node_ranks"])
    for j, item in enumerate(group.get("env_configs") or []):
        at = f"{where}.env_configs[{j}]"
        one = _env_config(at, item, num_nodes)
        ranks = one.get("node_ranks")
        if not one.get("env") and one.get("python") is None:
            continue  # sets nothing (RLinf's `python_interpreter_path: null`)
        if ranks is not None and _ranks(f"{at}.node_ranks", ranks) != whole:
            raise ConfigError(
                f"{at}.node_ranks={item['node_ranks']!r}: RLinf sets this env for part of the "
                "group; areal-launch sets a node group's env for all its nodes: give those "
                "nodes a node group of their own"
            )
        env.update(one.get("env", {}))
        python = one.get("python") or python
    if env:
        out["env"] = env
    if python is not None:
        out["python"] = str(python)
    return out


def _env_config(where: str, item: Any, num_nodes: Any) -> dict:
    """One of RLinf's env_configs items as our node settings {node_ranks, env, python}."""
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where}: a mapping with node_ranks, python_interpreter_path, env_vars")
    env: dict[str, str] = {}
    env_vars = item.get("env_vars") or []
    for pair in env_vars if isinstance(env_vars, list) else [env_vars]:
        if not isinstance(pair, Mapping):
            raise ConfigError(f"{where}.env_vars: NAME: value mappings")
        env.update({str(k): str(v) for k, v in pair.items()})
    one: dict[str, Any] = {"env": env}
    if item.get("node_ranks") is not None:
        one["node_ranks"] = _all(item["node_ranks"], num_nodes, f"{where}.node_ranks")
    if item.get("python_interpreter_path") is not None:
        one["python"] = str(item["python_interpreter_path"])
    return one


def _all(ranks: Any, num_nodes: Any, where: str) -> Any:
    """RLinf's `all` node ranks: every node of the cluster."""
    if not (isinstance(ranks, str) and ranks.strip().lower() == "all"):
        return ranks
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise ConfigError(f"{where}=all: set cluster.num_nodes (all is every node of the cluster)")
    return f"0-{num_nodes - 1}"


def _ranks(where: str, value: Any) -> frozenset[int]:
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
    try:
        return frozenset(parse_gpu_set(text, ClusterSpec(1, MAX_NODES, "cpu")))
    except PlacementError as exc:
        raise ConfigError(
            f"{where}={value!r}: not node ranks ({str(exc).partition(': ')[2]})"
        ) from None
