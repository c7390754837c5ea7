"""AReaL's experiment YAML as AReaL means it: its launcher's keys in ours, the rest its trainer's.

An AReaL config (examples/**/*.yaml of areal-project/AReaL) is one file for the launcher and the
trainer. Its launcher's keys become ours here:

    cluster.n_nodes, cluster.n_gpus_per_node   cluster.num_nodes, cluster.gpus_per_node
                                               (n_gpus_per_node: 0 is a CPU cluster)
    scheduler.type                             the runner (as launcher= chooses it); `local`
                                               also cluster.oversubscribe (AReaL's local
                                               scheduler hands GPUs out in turn, wrapping);
                                               `slurm`/`ray`: n_nodes does not bound the
                                               cluster (AReaL's single controller asks each
                                               engine's nodes apart)
    <engine>.scheduling_strategy               cluster.colocate.<engine> / cluster.separate
    <engine>.scheduling_spec (its first item)  <engine>.resources (reservation and exclusive
                                               too: Slurm's), <engine>.env, and cpu as the
                                               thread counts AReaL's launchers set
    actor.weight_update_mode: awex             with no strategy for rollout: rollout on the
                                               actor's GPUs, both releasing between phases
    teacher (1.x and 2.0)                      our teacher (areal_teacher)
    post_exit_hook                             launcher.post_exit_hook
    cluster.fileroot, cluster.name_resolve     the folders an entry not ours shares (made
                                               before anything starts, this trial's records
                                               cleared), handed to it as overrides when unset
    actor.path                                 model_path (unless the file gives one)
    vllm:, sglang:                             the rollout's options and flags (areal_servers)
    allocation_mode, multi_agent_allocation    the engines' backends (areal_allocation)

Every one of these is also handed to an entry that is not ours, as written (config.handoff).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from launcher.config.peers import (
    Context,
    Translation,
    areal_allocation,
    areal_servers,
    areal_teacher,
)
from launcher.config.peers.areal_allocation import explicit_keys, parse_backend_world
from launcher.config.peers.edit import drop_empty, get, put, take
from launcher.config.schema import typed
from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError, UserError
from launcher.spec.request import USER, Folders

# AReaL's trainer reads it: "started by a launcher, under torchrun" (areal/utils/launcher.py)
ENV_SPMD_MODE = "AREAL_SPMD_MODE"
THREAD_ENV = (  # what AReaL's launchers set from scheduling_spec.cpu (get_thread_env_vars)
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
# AReaL's former `launcher` section (resources per GPU, environment per kind of process)
OLD_LAUNCHER = (
    "inference_server_cpus_per_gpu",
    "inference_server_mem_per_gpu",
    "trainer_cpus_per_gpu",
    "trainer_mem_per_gpu",
    "inference_server_env_vars",
    "trainer_env_vars",
)
STRATEGIES = ("colocation", "separation")
# what an experiment config of AReaL's sets (besides the engines); a file with none is not one
EXPERIMENT_KEYS = (
    "experiment_name",
    "allocation_mode",
    "cluster",
    "components",
    "model_path",
    "runner",  # another peer's experiments set it
)
AWEX = "awex"  # actor.weight_update_mode: AReaL's actor and rollout take turns on its GPUs
SINGLE_CONTROLLER = ("slurm", "ray")  # scheduler.type whose scheduler sizes each engine's nodes
SIZE = "n_nodes"  # AReaL's cluster size: its single controller's schedulers never read it
KL_DEFAULT = 0.1  # AReaL's actor.kl_ctl: above 0, its trainer starts the ref
NAME_RESOLVE_TYPES = ("nfs", "etcd3", "ray")


@dataclass
class SchedulingStrategy:
    """AReaL's `<engine>.scheduling_strategy`: `colocation` with `target` puts the engine on
    its target's GPUs, `separation` on GPUs of its own."""

    type: Optional[str] = None
    target: Optional[str] = None
    fork: bool = True  # AReaL's: the target spawns a process of its own (ours always do)


@dataclass
class SchedulingSpec:
    """One of AReaL's `<engine>.scheduling_spec` items, as AReaL names its keys."""

    cpu: Optional[int] = None  # CPU cores per GPU
    gpu: Optional[int] = None  # GPUs per process
    mem: Optional[int] = None  # GB per GPU
    port_count: Optional[int] = None
    image: Optional[str] = None
    task_type: Optional[str] = None
    env_vars: Dict[str, str] = field(default_factory=dict)
    cmd: Optional[str] = None
    srun_additional_args: Optional[str] = None
    additional_bash_cmds: Optional[List[str]] = None
    container_type: Optional[str] = None
    mount: Optional[str] = None
    nodelist: Optional[str] = None
    exclude: Optional[str] = None
    reservation: Optional[str] = None
    exclusive: Optional[bool] = None
    ray_placement_strategy: Optional[str] = None


# scheduling_spec key -> our <engine>.resources key
RESOURCES = {
    "cpu": "cpus_per_gpu",
    "mem": "mem_gib_per_gpu",
    "image": "image",
    "nodelist": "nodelist",
    "exclude": "exclude",
    "reservation": "reservation",
    "exclusive": "exclusive",
}
# keys our vocabulary has no word for: what decides instead
DECIDED = {
    "gpu": "GPUs: {name}.backend",
    "cmd": "command: {what}",
    "port_count": "ports: the launcher's",
}


@dataclass
class NameResolve:
    """AReaL's `cluster.name_resolve`: where its processes find each other."""

    type: str = "nfs"
    nfs_record_root: Optional[str] = None
    etcd3_addr: Optional[str] = None
    ray_actor_name: Optional[str] = None


def translate(job: Any, context: Context, out: Translation) -> None:
    """AReaL's launcher keys in `job` replaced by ours (see the module's table)."""
    _not_an_experiment(context)
    _old_launcher(context)
    _cluster(job, out)
    scheduler = get(job, "scheduler.type")
    _scheduler(job, out)
    areal_allocation.translate(job, context, out)
    areal_teacher.translate(job, context, out)
    _awex(job, out)
    for name in ENGINES:
        _strategy(job, name, out)
        _scheduling_spec(job, name, context, out)
    _controller_nodes(job, scheduler, context, out)
    _model_path(job, context)
    _folders(job, context, out)
    _exit_hook(job, out)
    areal_servers.translate(job, context, out)


def _old_launcher(context: Context) -> None:
    """`launcher:` is our runner's options; AReaL's former section of that name is refused
    with what to write instead, rather than as an unknown key of the runner."""
    section = (context.raw or {}).get("launcher")
    old = [k for k in section if k in OLD_LAUNCHER] if isinstance(section, dict) else []
    if old:
        raise ConfigError(
            f"launcher.{old[0]} in config {context.config_name!r}: AReaL's former launcher "
            "section is not read (areal-launch's `launcher` holds its runner's options); "
            "write <engine>.scheduling_spec instead: cpu, mem, env_vars"
        )


def _cluster(job: Any, out: Translation) -> None:
    """n_nodes and n_gpus_per_node are num_nodes and gpus_per_node (0: a CPU cluster)."""
    for ours, theirs in (("num_nodes", "n_nodes"), ("gpus_per_node", "n_gpus_per_node")):
        alias = take(job, f"cluster.{theirs}")
        if alias is None:
            continue
        given = get(job, f"cluster.{ours}")
        out.spellings[f"cluster.{ours}"] = f"cluster.{theirs}"
        if alias == 0 and theirs == "n_gpus_per_node":  # AReaL's CPU template
            device = get(job, "cluster.device")
            if device not in ("auto", "cpu") or given:
                raise ConfigError(
                    "cluster.n_gpus_per_node=0 is a CPU cluster, but "
                    f"cluster.device={device} cluster.gpus_per_node={given}: write one of them"
                )
            put(job, "cluster.device", "cpu", f"cluster.{theirs}")
            continue
        if given is not None and given != alias:
            raise ConfigError(
                f"cluster.{theirs}={alias} and cluster.{ours}={given} say the same thing "
                "differently: write one of them"
            )
        put(job, f"cluster.{ours}", alias, f"cluster.{theirs}")


def runner_choice(cfg: Any, overrides: tuple[str, ...]) -> Optional[str]:
    """The runner `scheduler.type` names where it is not launcher='s choice (None: nothing to
    change); ConfigError for an unknown one or one beside another launcher=."""
    from launcher.spec import registry

    chosen = get(cfg, "hydra.runtime.choices.launcher")
    wanted = get(cfg, "scheduler.type")
    if wanted is None or wanted == chosen:
        return None
    if str(wanted) not in registry.runner_names():
        raise ConfigError(
            f"scheduler.type={wanted}: areal-launch runs on "
            f"{', '.join(registry.runner_names())} (scheduler.type chooses the runner, as "
            "launcher= does)"
        )
    explicit = next((o for o in overrides if o.lstrip("+").partition("=")[0] == "launcher"), None)
    if explicit is not None:
        raise ConfigError(
            f"scheduler.type={wanted} and {explicit} choose different runners: write one of them"
        )
    return str(wanted)


def _scheduler(job: Any, out: Translation) -> None:
    """scheduler.type chose the runner already (runner_choice); AReaL's local scheduler also
    hands GPUs out in turn, wrapping round when the engines ask more than the machine has."""
    kind = take(job, "scheduler.type")
    drop_empty(job, "scheduler")
    if kind == "local":
        put(job, "cluster.oversubscribe", True, "scheduler.type")
        out.spellings["cluster.oversubscribe"] = "scheduler.type=local"


def _controller_nodes(job: Any, scheduler: Any, context: Context, out: Translation) -> None:
    """AReaL's single controller on Slurm or Ray asks each engine's nodes apart (a Slurm job,
    a placement group per engine: ceil(GPUs / n_gpus_per_node) nodes each; none for an engine
    colocated with another, nor for a ref with actor.kl_ctl 0, which its trainer does not
    start: areal/trainer/rl_trainer.py) and never reads cluster.n_nodes (areal/infra/
    scheduler/slurm.py, ray.py; AReaL's help: the Slurm hostname suffix). So n_nodes does not
    bound the plan: where the engines ask more nodes than it says, the cluster has what they
    ask, with a note. Runners ask only the nodes the plan's processes use; where our plan
    needs more still (a ref placed apart that AReaL would not start), the planner says so."""
    if str(scheduler) not in SINGLE_CONTROLLER or f"cluster.{SIZE}" in explicit_keys(
        context.overrides
    ):
        return
    given, per_node = get(job, "cluster.num_nodes"), get(job, "cluster.gpus_per_node")
    placed = get(job, "cluster.component_placement")
    if not isinstance(given, int) or not isinstance(per_node, int) or per_node < 1 or placed:
        return
    colocated = dict(get(job, "cluster.colocate") or {})
    kl = get(job, "actor.kl_ctl", KL_DEFAULT)
    try:
        kl = float(kl or 0)
    except (TypeError, ValueError):
        raise ConfigError(
            f"actor.kl_ctl={kl!r}: a number (AReaL's KL coefficient; 0: its trainer starts no ref)"
        ) from None
    asked: dict[str, int] = {}
    for name in ENGINES:
        text = get(job, f"{name}.backend")
        if text is None or name in colocated or (name == "ref" and not kl > 0):
            continue
        try:
            asked[name] = max(1, -(-parse_backend_world(text) // per_node))
        except UserError:  # the planner names a bad backend, with its column
            return
    if sum(asked.values()) <= given:
        return
    put(job, "cluster.num_nodes", sum(asked.values()), f"cluster.{SIZE}")
    each = ", ".join(f"{name} {n}" for name, n in asked.items())
    out.notes.append(
        f"cluster.{SIZE}={given}: AReaL's single controller on {scheduler} (scheduler.type="
        f"{scheduler}) asks each engine's nodes apart and does not read {SIZE} (areal/infra/"
        f"scheduler/{scheduler}.py): planned for the {sum(asked.values())} nodes its engines "
        f"ask ({each}, {per_node} GPUs a node)"
    )


def _not_an_experiment(context: Context) -> None:
    """A file of AReaL's examples that is not an experiment config, named as what it is: a
    SkyPilot task (`sky launch` runs AReaL's launcher from its `run:`), or a reference file
    of keys to copy into one (examples/environ_ref.yaml)."""
    raw = context.raw
    if raw is None or any(k in raw for k in (*ENGINES, *EXPERIMENT_KEYS)):
        return
    if "run" in raw and "resources" in raw:
        raise ConfigError(
            "this file is a SkyPilot task (resources, run: SkyPilot's keys), which AReaL runs "
            "with `sky launch`; areal-launch reads an experiment config: give the one its "
            "run: command names (its --config)"
        )
    keys = ", ".join(sorted(str(k) for k in raw)[:4])
    raise ConfigError(
        f"this file sets {keys} but no experiment (none of experiment_name, cluster, actor, "
        "rollout, allocation_mode): a file like this (AReaL's reference of keys, a group "
        "file of RLinf's) is part of an experiment config, not one to run"
    )


def _awex(job: Any, out: Translation) -> None:
    """AReaL's AWEX colocation (`actor.weight_update_mode: awex`, controller v1): actor and
    rollout take turns on the actor's GPUs, each releasing its memory while the other runs,
    as AReaL's trainer does whatever the strategy (AReaL's runs leave it at the default,
    separation); where the rollout is colocated or placed already, that stands. The key stays
    the entry's."""
    mode = get(job, "actor.weight_update_mode")
    if mode != AWEX or str(get(job, "actor._version") or "v1") != "v1":
        return
    if get(job, "rollout.backend") is None or get(job, "actor.backend") is None:
        return
    placed = {
        n.strip() for k in dict(get(job, "cluster.component_placement") or {}) for n in k.split(",")
    }
    strategy = get(job, "rollout.scheduling_strategy")
    if (isinstance(strategy, dict) and strategy.get("type") == "colocation") or "rollout" in placed:
        return
    if get(job, "cluster.colocate.rollout") is not None:
        return
    key = "actor.weight_update_mode"
    put(job, "cluster.colocate.rollout", "actor", key)
    put(job, "rollout.offload", True, key)
    put(job, "actor.offload.weight", True, key)
    put(job, "actor.offload.optimizer", True, key)
    out.spellings["cluster.colocate.rollout"] = f"{key}=awex"
    out.notes.append(
        f"{key}=awex: actor and rollout take turns on the actor's GPUs, as AReaL's AWEX "
        "colocation does (cluster.colocate.rollout=actor rollout.offload=true "
        "actor.offload.weight=true actor.offload.optimizer=true)"
    )


def _exit_hook(job: Any, out: Translation) -> None:
    """AReaL's `post_exit_hook`: launcher.post_exit_hook (run once every process is gone,
    with LOG_DIR set; the key stays the entry's too, which ignores it)."""
    hook = get(job, "post_exit_hook")
    if hook is None or not str(hook).strip():
        take(job, "post_exit_hook")
        return
    if get(job, "launcher.post_exit_hook") not in (None, "", hook):
        raise ConfigError(
            "post_exit_hook and launcher.post_exit_hook are both set, differently: keep one "
            "(post_exit_hook is AReaL's name for it)"
        )
    take(job, "post_exit_hook")
    # a value, not an interpolation: AReaL escapes its shell variables (`\${ROOT:-/x}`)
    put(job, "launcher.post_exit_hook", str(hook).replace("${", "\\${"), "post_exit_hook")
    out.spellings["launcher.post_exit_hook"] = "post_exit_hook"


def _strategy(job: Any, name: str, out: Translation) -> None:
    """`<name>.scheduling_strategy` as cluster.colocate / cluster.separate."""
    raw = take(job, f"{name}.scheduling_strategy")
    if not raw:
        return
    key = f"{name}.scheduling_strategy"
    strategy = typed(key, SchedulingStrategy, raw, "a scheduling strategy")
    if not strategy.fork:
        out.notes.append(f"{key}.fork=false not honoured: every engine runs processes of its own")
    if strategy.type is None:
        return
    if strategy.type not in STRATEGIES:
        raise ConfigError(
            f"scheduling_strategy.type={strategy.type!r}: choose {' or '.join(STRATEGIES)}"
        )
    if strategy.type == "colocation":
        if not strategy.target:
            raise ConfigError(
                "scheduling_strategy.type=colocation needs a target: the component to share "
                "GPUs with, e.g. target: actor"
            )
        put(job, f"cluster.colocate.{name}", str(strategy.target), key)
        out.spellings[f"cluster.colocate.{name}"] = key
    else:
        separate = list(get(job, "cluster.separate") or [])
        put(job, "cluster.separate", [*separate, name], key)
        out.spellings[f"cluster.separate.{name}"] = key


def _scheduling_spec(job: Any, name: str, context: Context, out: Translation) -> None:
    """The first item of `<name>.scheduling_spec`: resources, env_vars into the engine's
    environment, cpu also as its processes' thread counts (below env_vars and what the
    launcher's environment sets, as AReaL's launchers do); a note for the rest."""
    raw = take(job, f"{name}.scheduling_spec")
    items = [raw] if isinstance(raw, dict) else list(raw or [])
    if not items:
        return
    first = typed(f"{name}.scheduling_spec[0]", SchedulingSpec, items[0], "a scheduling spec")
    env = {str(k): str(v) for k, v in first.env_vars.items()}
    if isinstance(first.cpu, int) and not isinstance(first.cpu, bool) and first.cpu > 0:
        env = {**{v: str(first.cpu) for v in THREAD_ENV if v not in context.environ}, **env}
    if env:
        put(
            job,
            f"{name}.env",
            {**env, **(get(job, f"{name}.env") or {})},
            f"{name}.scheduling_spec",
        )
    skipped = []
    out.spellings[f"{name}.resources"] = f"{name}.scheduling_spec"
    for f in dataclasses.fields(SchedulingSpec):
        value = getattr(first, f.name)
        if f.name == "env_vars" or value is None:
            continue
        if f.name in RESOURCES:
            ours = f"{name}.resources.{RESOURCES[f.name]}"
            put(job, ours, value, f"{name}.scheduling_spec.{f.name}")
            out.spellings[ours] = f"{name}.scheduling_spec.{f.name}"
        else:
            skipped.append(f.name)
    unread = len(items) - 1
    if skipped or unread:
        what = "its backend's server" if name == "rollout" else "trainer.entry under torchrun"
        why = "; ".join(DECIDED[k].format(name=name, what=what) for k in skipped if k in DECIDED)
        more = f"; items after the first ({unread}) are not read" if unread else ""
        out.notes.append(
            f"{name}.scheduling_spec: {', '.join(skipped) or 'nothing'} not honoured"
            f"{f' ({why})' if why else ''}{more}"
        )


def _model_path(job: Any, context: Context) -> None:
    """AReaL names the model `actor.path`: it is the run's model_path unless the file gives
    one (the key stays: it is the trainer's too)."""
    if context.raw is None or "model_path" in context.raw:
        return
    path = get(job, "actor.path")
    if isinstance(path, str) and path:
        put(job, "model_path", path, "actor.path")


def _folders(job: Any, context: Context, out: Translation) -> None:
    """AReaL's fileroot and name_resolve's record root for an entry not ours: made before
    anything starts (this trial's old records cleared first, as AReaL's launcher does), the
    run folder's where the config leaves them unset (AReaL's defaults are folders every run
    shares); and AReaL's trainer is told it was started by a launcher."""
    fileroot = take(job, "cluster.fileroot")
    resolve = typed(
        "cluster.name_resolve",
        NameResolve,
        take(job, "cluster.name_resolve") or {},
        "AReaL's name_resolve",
    )
    if resolve.type not in NAME_RESOLVE_TYPES:
        raise ConfigError(
            f"cluster.name_resolve.type={resolve.type!r}: choose {', '.join(NAME_RESOLVE_TYPES)}"
        )
    if context.ours_entry:
        return
    records = resolve.nfs_record_root if resolve.type == "nfs" else None
    overrides = [] if fileroot else ["++cluster.fileroot={run_dir}"]
    if resolve.type == "nfs" and not records:
        overrides.append("++cluster.name_resolve.nfs_record_root={run_dir}/name_resolve")
    root = str(records or "{run_dir}/name_resolve")
    trial = f"{get(job, 'experiment_name')}/{get(job, 'trial_name')}"
    out.folders = Folders(
        make=(*out.folders.make, str(fileroot or "{run_dir}"), root),
        clear=(*out.folders.clear, f"{root}/{USER}/{trial}"),
    )
    out.entry_overrides = (*out.entry_overrides, *overrides)
    out.trainer_env[ENV_SPMD_MODE] = "1"


def unknown_hint(key: str) -> str:
    """For our recipe, where AReaL's server sections go in our keys ("" for other keys)."""
    return areal_servers.unknown_hint(key)
