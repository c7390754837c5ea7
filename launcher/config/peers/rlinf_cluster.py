"""RLinf's `cluster` section in our keys (reference: RLinf's rlinf/scheduler/cluster/config.py,
cluster.py and its managers): node groups, profiling, and the keys we do not honour.

    node_groups[*].node_ranks: all          every node of the cluster (cluster.num_nodes)
    node_groups[*].env_configs              the group's env and python (an item for part of
                                            the group: refused, one line)
    node_groups[*].hardware                 hardware (its type); CPU-only unless the group
                                            gives gpus_per_node
    profiling, net_emulation, tracer, the   one note each: not honoured (profiling's keys
      dynamic scheduler's use_*_policy keys checked: RLinf's only)
RLinf ignores a cluster key it does not know; here such a key is the entry's (handed to it)
or an error for our recipe, never dropped without a word.
"""

from __future__ import annotations

from typing import Any, Mapping

from launcher.config.peers import Translation
from launcher.config.peers.edit import get, has, put, take
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
    """RLinf 0.3's `cluster.profiling`: one note that no profile is recorded."""
    section = take(job, "cluster.profiling")
    if section is None:
        return
    if not isinstance(section, Mapping):
        raise ConfigError(f"cluster.profiling={section!r}: a mapping ({{backend: nsight, ...}})")
    unknown = sorted(set(map(str, section)) - set(PROFILING_KEYS))
    if unknown:
        raise ConfigError(
            f"cluster.profiling.{unknown[0]}: not one of RLinf's keys ({', '.join(PROFILING_KEYS)})"
        )
    if not section.get("enabled", True):
        return  # RLinf's own default: nothing is profiled
    out.notes.append(
        f"cluster.profiling (backend {section.get('backend') or 'nsight'}): not honoured "
        "(RLinf runs the named worker groups under `nsys profile`); no profile is recorded"
    )


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
