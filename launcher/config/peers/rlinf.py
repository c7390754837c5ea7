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
    rollout.rollout_backend,                rollout.backend, actor.backend (sized by the
      actor.training_backend                placement; fsdp2 is our fsdp)
    env:, reward:, agent:                   components.env, .reward, .agent: worker
                                            components. With RLinf's entry as trainer.entry,
                                            on when that entry starts it (rlinf_entries: the
                                            embodied entries' rollout is a worker too, the
                                            agent entries add agentloop and tool, and
                                            wideseek_r1 its tool groups and judge:
                                            rlinf_entries.Extra); else on
                                            when placed or when a key of ours is set under
                                            it. A section of RLinf's settings only starts
                                            nothing; a note says why each is on or off.
                                            RLinf's own keys are the worker's options; env
                                            and reward start the workers this project
                                            ships unless `entry` says otherwise
    cluster.node_groups, .profiling,        rlinf_cluster: node_ranks all, env_configs,
      .net_emulation, .tracer, ...          hardware; one note for each key not honoured
    cluster.auto_scheduler: true            refused: placement is decided before anything
                                            starts
    an engine on a hardware group's device  refused: RLinf runs it on the device's node
                                            with that node's GPUs; ours run on GPUs placed

Placement forms (GPU sets, process maps, `{node_group, placement}`, node groups) are ours too
and need no translation (launcher.planning.forms, launcher.planning.nodes).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from launcher.config.peers import Context, Translation, rlinf_cluster
from launcher.config.peers.edit import get, has, put, take
from launcher.config.peers.rlinf_entries import REWARD_SERVER, Entry, entry_of, reward_server
from launcher.config.schema import ComponentConfig
from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError

WORKERS = ("env", "reward", "agent")  # RLinf's worker components, top-level keys of its configs
# what RLinf's worker names start when no entry is given: the examples this project ships,
# each an HTTP service (its health path) the default recipe talks to
SHIPPED = {
    "env": ("-m recipes.workers.text_env", "/health"),
    "reward": ("-m recipes.workers.reward_server", "/health"),
}
# workers only RLinf's entries start (no section of their own, or RLinf's rollout run as a
# policy worker per process): RLinf's modules, and how each is placed
RLINF_WORKERS = {
    "rollout": {"entry": "-m rlinf.workers.rollout.hf.huggingface_worker"},
    "agentloop": {"entry": "-m rlinf.workers.agent.agent_loop", "beside": "rollout"},
    "tool": {"entry": "-m rlinf.workers.agent.tool_worker"},
}
SERVE_PARALLEL = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp"}
TRAIN_PARALLEL = {
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "context_parallel_size": "cp",
}
OFFLOAD_PARTS = ("weight", "optimizer", "grad")
BACKEND_KEYS = {
    "rollout": "rollout_backend",
    "actor": "training_backend",
    "critic": "training_backend",
}
TRAINING_BACKENDS = {"fsdp": "fsdp", "fsdp2": "fsdp", "megatron": "megatron"}


def translate(job: Any, context: Context, out: Translation) -> None:
    """RLinf's keys in `job` replaced by ours (see the module's table)."""
    if take(job, "cluster.auto_scheduler"):
        raise ConfigError(
            "cluster.auto_scheduler=true: not supported (RLinf's run-time placement); "
            "areal-launch places every component before anything starts: write "
            "cluster.component_placement, or leave it out for the default"
        )
    entry = entry_of(str(get(job, "trainer.entry") or ""))
    if entry is not None and entry.missing:
        raise ConfigError(
            f"trainer.entry={get(job, 'trainer.entry')}: RLinf's {entry.path} starts "
            f"{entry.missing}; areal-launch does not plan these yet"
        )
    rlinf_cluster.translate(job, out)
    for name in ENGINES:
        _resolved_model(job, name)
    on = entry.starts(_values(job)) if entry is not None else {}
    if entry is not None and entry.rollout == "worker" and "rollout" in on:
        _rollout_worker(job, context)
    for name in ENGINES:
        _offload(job, name, out)
        _parallel(job, name, out)
        _backend(job, name, out)
    if entry is None:
        _workers(job, context, out)
    else:
        _entry_workers(job, entry, on, out)
        _extra(job, entry, out)
        _engines_on_devices(job)


def _rlinf_section(job: Any, context: Context, name: str) -> dict:
    """`name`'s keys as the RLinf file wrote them (resolved), or the job's for our configs."""
    raw = (context.raw or {}).get(name)
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): get(job, f"{name}.{k}") for k in raw if has(job, f"{name}.{k}")}


def _resolved_model(job: Any, name: str) -> None:
    """`<engine>.model` (RLinf's model settings, the entry's) resolved now: it refers to
    sections the entry keeps (`${runner.seq_length}`) that our typed config drops."""
    if has(job, f"{name}.model"):
        put(job, f"{name}.model", take(job, f"{name}.model"), f"{name}.model")


def _rollout_worker(job: Any, context: Context) -> None:
    """An embodied entry's rollout: a policy worker per process (RLinf's HF workers), not a
    server: our rollout engine is off and `components.rollout` a worker with its settings."""
    section = _rlinf_section(job, context, "rollout")
    for key in section:
        take(job, f"rollout.{key}")
    put(job, "rollout.backend", None, "rollout")
    offload = bool(section.pop("enable_offload", False) or section.pop("offload", False))
    worker = {**RLINF_WORKERS["rollout"], "offload": offload, "options": section}
    put(job, "components.rollout", worker, "rollout")


def _backend(job: Any, name: str, out: Translation) -> None:
    """RLinf's backend keys (`rollout.rollout_backend: sglang`, `actor.training_backend:
    megatron`) as a bare backend, sized by the placement."""
    key = BACKEND_KEYS.get(name)
    theirs = take(job, f"{name}.{key}") if key else None
    if theirs is None:
        return
    text = str(theirs).strip().lower()
    backend = text if name == "rollout" else TRAINING_BACKENDS.get(text)
    if backend is None:
        raise ConfigError(
            f"{name}.{key}={theirs}: choose {', '.join(TRAINING_BACKENDS)} (RLinf's training "
            "backends areal-launch runs)"
        )
    current = str(get(job, f"{name}.backend") or "")
    if current.partition(":")[2] and current.partition(":")[0] == backend:
        return  # dims given in our key: theirs says the same backend
    put(job, f"{name}.backend", backend, f"{name}.{key}")
    out.spellings[f"{name}.backend"] = f"{name}.{key}"
    if text != backend:
        out.notes.append(f"{name}.{key}={theirs}: runs as {backend} (FSDP2 is our fsdp)")


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


def _workers(job: Any, context: Context, out: Translation) -> None:
    """env, reward and agent for an entry not RLinf's: on when placed or when a key of ours
    (`processes`, `entry`, ...) is set under them; a section of RLinf's settings only starts
    nothing (RLinf's entries decide from their own keys, not from the section)."""
    placed = _placed(job)
    known = {f.name for f in dataclasses.fields(ComponentConfig)}
    for name in WORKERS:
        raw = get(job, name)
        if raw is not None and not isinstance(raw, Mapping):
            raise ConfigError(f"invalid value in '{name}={raw}': {name} holds a worker's keys")
        section = dict(raw or {})
        ours = sorted(set(map(str, section)) & known)
        if name in placed or ours:
            _worker(job, name, out)
        elif section:
            take(job, name)
            out.notes.append(
                f"{name}: RLinf's settings only ({', '.join(sorted(map(str, section))[:3])}"
                f"{', ...' if len(section) > 3 else ''}): no {name} worker starts (place it, "
                f"or set one of our keys such as {name}.processes=1)"
            )


def _entry_workers(job: Any, entry: Entry, on: Mapping[str, str], out: Translation) -> None:
    """The workers and engines RLinf's `entry` starts for this config (`on`: name -> why),
    each with a note saying why; what it does not start is off (section, placement out)."""
    if reward_server(_values(job), entry):
        _reward_server(job, entry, out)
    placed = _placed(job)
    for name in (*WORKERS, *RLINF_WORKERS):
        if name in on and (name != "rollout" or entry.rollout == "worker"):
            _worker(job, name, out)
            out.notes.append(f"{name}: on, RLinf's {entry.path} starts it ({on[name]})")
        elif name in WORKERS and (get(job, name) is not None or name in placed):
            take(job, name)
            _unplace(job, name)
            out.notes.append(f"{name}: off, RLinf's {entry.path} starts no {name} worker here")
    for name in ENGINES:
        if name in on or get(job, f"{name}.backend") is None and name not in placed:
            continue  # on (an embodied rollout: the worker, its engine off already), or off
        put(job, f"{name}.backend", None, name)
        _unplace(job, name)
        if name in placed:
            out.notes.append(f"{name}: off, RLinf's {entry.path} does not start it here")


def _engines_on_devices(job: Any) -> None:
    """An engine placed on a node group's devices (a robot, `hardware`): RLinf runs its one
    process on the device's node, seeing that node's GPUs; ours run on GPUs they are given."""
    groups = {
        str(g.get("label")): str(g["hardware"])
        for g in get(job, "cluster.node_groups") or []
        if isinstance(g, Mapping) and g.get("hardware") is not None and not g.get("gpus_per_node")
    }
    placement = get(job, "cluster.component_placement") or {}
    for key, value in placement.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        label = next((str(i.get("node_group")) for i in items if isinstance(i, Mapping)), None)
        for name in (p.strip() for p in str(key).split(",")):
            if label in groups and name in ENGINES and get(job, f"{name}.backend") is not None:
                raise ConfigError(
                    f"cluster.component_placement.{name}={{node_group: {label}, ...}}: RLinf "
                    f"runs the {name} on the node of a {groups[label]} device, seeing that "
                    f"node's GPUs; areal-launch runs an engine on the GPUs its placement "
                    f"names, not on a device: place {name} on GPUs (a GPU set such as 0-3)"
                )


def _extra(job: Any, entry: Entry, out: Translation) -> None:
    """The groups `entry` starts beyond the sections it shares with ours (rlinf_entries.Extra):
    each our component, on its placement, with a note saying why."""
    for name, extra in entry.extra(_values(job)).items():
        if has(job, f"components.{name}"):
            raise ConfigError(
                f"components.{name}: RLinf's {entry.path} starts its own {name}; leave it out"
            )
        put(job, f"components.{name}", dict(extra.component), entry.path)
        if extra.placement is not None:
            if name in _placed(job):
                raise ConfigError(
                    f"cluster.component_placement.{name}: RLinf's {entry.path} places its "
                    f"{name} itself ({extra.why}); leave it out"
                )
            put(job, f"cluster.component_placement.{name}", extra.placement, entry.path)
        elif extra.component.get("beside") is None and name not in _placed(job):
            raise ConfigError(
                f"cluster.component_placement.{name} is not set: RLinf's {entry.path} starts "
                f"{name} ({extra.why}) on its placement: place it"
            )
        out.notes.append(f"{name}: on, RLinf's {entry.path} starts it ({extra.why})")


def _reward_server(job: Any, entry: Entry, out: Translation) -> None:
    """The SGLang server RLinf's embodied entry starts for an API reward model without an
    api_base: a serving component of ours (no trainer feeds it), on its placement, serving
    reward.model.model_path; the reward worker finds it as AREAL_REWARD_SERVER_ADDRS."""
    if REWARD_SERVER not in _placed(job):
        raise ConfigError(
            f"reward.worker_type=api without reward.api.api_base: RLinf's {entry.path} starts "
            f"an SGLang server for the reward model: place it "
            f"(cluster.component_placement.{REWARD_SERVER}) or give reward.api.api_base"
        )
    server: dict[str, Any] = {"kind": "serve", "backend": "sglang"}
    if get(job, "reward.model.model_path") is not None:
        server["model_path"] = get(job, "reward.model.model_path")
    put(job, f"components.{REWARD_SERVER}", server, "reward.worker_type")
    out.notes.append(
        f"{REWARD_SERVER}: on, RLinf's {entry.path} starts an SGLang server for the API reward "
        "model (reward.worker_type=api without reward.api.api_base)"
    )


def _values(job: Any) -> dict:
    """The job as plain values, for the entries' conditions (interpolations left as
    written where they do not resolve)."""
    from omegaconf import OmegaConf

    try:
        values = OmegaConf.to_container(job, resolve=True)
    except Exception:  # noqa: BLE001 - a key only the entry resolves
        values = OmegaConf.to_container(job, resolve=False)
    assert isinstance(values, dict)
    return values


def _placed(job: Any) -> set[str]:
    placement = get(job, "cluster.component_placement") or {}
    return {p.strip() for k, v in placement.items() if v is not None for p in str(k).split(",")}


def _unplace(job: Any, name: str) -> None:
    """`name` out of cluster.component_placement (out of a comma key, the rest kept)."""
    placement = get(job, "cluster.component_placement") or {}
    out = {}
    for key, value in placement.items():
        rest = [p.strip() for p in str(key).split(",") if p.strip() != name]
        if rest:
            out[",".join(rest)] = value
    if out != placement:
        take(job, "cluster.component_placement")
        put(job, "cluster.component_placement", out, "cluster.component_placement")


def _worker(job: Any, name: str, out: Translation) -> None:
    """RLinf's section `name` (or none) as `components.<name>`: our component keys as ours,
    RLinf's own as its options, the shipped or RLinf's worker as its entry."""
    known = {f.name for f in dataclasses.fields(ComponentConfig)}
    raw = take(job, name) if name != "rollout" else None
    if has(job, f"components.{name}") and raw is not None:
        raise ConfigError(
            f"components.{name} and {name}: two sections for one worker; write one of them"
        )
    section = dict(raw) if isinstance(raw, Mapping) else {}
    component = dict(get(job, f"components.{name}") or {})
    component.update({k: v for k, v in section.items() if k in known})
    options = {str(k): v for k, v in section.items() if k not in known | {"enable_offload"}}
    if section.get("enable_offload"):
        component["offload"] = True
    if options:
        component["options"] = {**options, **dict(component.get("options") or {})}
    if not str(component.get("entry") or "").strip():
        if name in SHIPPED:
            component["entry"] = SHIPPED[name][0]
            component.setdefault("health_path", SHIPPED[name][1])
        else:
            component.update({k: v for k, v in RLINF_WORKERS.get(name, {}).items()})
    if has(job, f"components.{name}"):
        take(job, f"components.{name}")
    put(job, f"components.{name}", component, name)
    out.spellings[f"components.{name}"] = name
