"""What a started worker needs to know about its place in the plan (docs/architecture.md §6, §7).

The launcher hands every process the plan's path (`AREAL_LAUNCH_PLAN`), its engines
(`AREAL_COMPONENT`) and the rollout servers (`AREAL_LLM_SERVER_ADDRS`). A recipe asks this
module which engine it is, its rank's coordinates and groups, which rollout instance its
weights go to, and where the servers are, instead of re-deriving the launcher's arithmetic:
coordinates and groups are read from the plan's rank list, so worker and launcher cannot
disagree. Stdlib only, so any worker (and the launcher) imports it without torch.

Surviving failures (docs/architecture.md §11): `restart()` is the job's restart count
($AREAL_RESTART, 0 on
the first attempt), `checkpoint_dir()` where checkpoints go (`<run folder>/checkpoints`,
launcher/trainer/checkpoints.py), `latest_checkpoint()` the newest complete one (step, path) to
resume
from, `checkpoint_request()` / `checkpoint_request_done(id)` the launcher's asking for one.
`heartbeat(step, phase)` keeps `<run folder>/progress/<job>.<rank>.json` current for the launcher's
hang watchdog and status (trainer/progress.py); the first call also makes SIGUSR2 dump every
thread's Python stack to the log (and says so in the record, so the launcher may send it).

Metrics (docs/architecture.md §16): `log(metrics, step)` on rank 0 writes to the trackers of
`launcher.tracking` and `<run folder>/metrics.jsonl`, one step axis over every restart;
`finish_tracking()` closes them and draws the run's picture.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from launcher.planning.ranks import AXES
from launcher.spec.errors import LaunchError
from launcher.spec.plan import SCHEMA, ComponentPlan, Plan, Rank, plan_meta
from launcher.spec.process import (
    DEFAULT_SERVED_MODEL,
    ENV_COMPONENT,
    ENV_HOSTS,
    ENV_PLAN,
    ENV_RESTART,
    ENV_RUN_DIR,
    ENV_SERVED_MODEL,
    ENV_SERVER_ADDRS,
    ProcessSpec,
    fill_hosts,
)
from launcher.spec.request import HEALTH_TIMEOUT_S
from launcher.trainer import checkpoints, progress, tracking

EXPERT_AXES = ("etp", "ep", "edp")  # Megatron's expert grid over the same ranks, fastest first


@dataclass(frozen=True)
class MeshLayout:
    """An engine's ranks as nested lists, one level per name (outermost first), indexed by the
    ranks' coordinates: what `DeviceMesh(device, mesh=torch.tensor(ranks), mesh_dim_names=
    names)` takes, so a trainer's mesh is the plan's grid, not one re-derived from sizes."""

    names: tuple[str, ...]
    ranks: list

    @property
    def shape(self) -> tuple[int, ...]:
        out, level = [], self.ranks
        for _ in self.names:
            out.append(len(level))
            level = level[0]
        return tuple(out)


@dataclass(frozen=True)
class RuntimePlan:
    """A plan dict plus the environment of this process; every answer is a pure lookup.

    The structure (components, ranks, instances, weight sync, processes) is read by the
    launcher's own reader, `Plan.from_dict`, once, on the first question about it; the run facts
    (recipe, engine options, model) are `plan_meta`, so a dict of run facts alone answers those."""

    data: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    path: Optional[str] = None
    # the last heartbeat written, the stack signal registered, the trackers: the mutable part
    _beat: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _read: dict[str, Plan] = field(default_factory=dict, compare=False, repr=False)

    @property
    def plan(self) -> Plan:
        """The plan as the launcher reads it (read once)."""
        if "plan" not in self._read:
            self._read["plan"] = read_plan(self.data, self.path)
        return self._read["plan"]

    @property
    def meta(self) -> dict[str, Any]:
        """The plan's run facts (Plan.meta), read without its structure."""
        return plan_meta(self.data)

    # ------------------------------------------------------------------ who am I
    def components(self) -> list[str]:
        """The engines this process serves: $AREAL_COMPONENT, else every training engine."""
        named = self.env.get(ENV_COMPONENT, "")
        if named.strip():
            return [c.strip() for c in named.split(",") if c.strip()]
        return [name for name, comp in self.plan.components.items() if not comp.is_inference]

    def has_component(self, engine: str) -> bool:
        """True when the plan runs `engine` (disabled engines are absent from the plan)."""
        return engine in self.plan.components

    def rank(self, rank: Optional[int] = None) -> int:
        """`rank` when given, else torchrun's $RANK, else 0 (a single process)."""
        return int(self.env.get("RANK", "0")) if rank is None else int(rank)

    def run_dir(self) -> Optional[str]:
        """The run folder: $AREAL_RUN_DIR, else the folder the plan was written to."""
        named = self.env.get(ENV_RUN_DIR)
        if named:
            return named
        return os.path.dirname(os.path.abspath(self.path)) if self.path else None

    def device(self) -> str:
        return self.plan.cluster.device

    def model_path(self, default: Optional[str] = None) -> Optional[str]:
        """The model the rollout servers started from (the plan's model_path), else `default`."""
        path = self.meta.get("model_path") or default
        return os.path.expanduser(path) if isinstance(path, str) else path

    def recipe_options(self, defaults: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        """The plan's free-form `recipe` dict laid over `defaults`."""
        out = dict(defaults or {})
        out.update(self.meta.get("recipe") or {})
        return out

    # ------------------------------------------------------------------ training ranks
    def component(self, engine: str) -> Mapping[str, Any]:
        """The engine's entry in the plan JSON (docs/architecture.md §6)."""
        return self._component(engine).to_dict()

    def _component(self, engine: str) -> ComponentPlan:
        try:
            return self.plan.components[engine]
        except KeyError:
            have = ", ".join(self.plan.components) or "none"
            raise LaunchError(f"the plan has no {engine!r} component (it has: {have})") from None

    def _ranks(self, engine: str) -> tuple[Rank, ...]:
        comp = self._component(engine)
        if comp.is_inference:
            raise LaunchError(f"{engine!r} is an inference engine: it has instances, not ranks")
        return comp.ranks

    def ranks(self, engine: str = "actor") -> list[Mapping[str, Any]]:
        return [r.to_dict() for r in self._ranks(engine)]

    def world_size(self, engine: str = "actor") -> int:
        return len(self._ranks(engine))

    def coords(self, rank: Optional[int] = None, engine: str = "actor") -> dict[str, int]:
        """dp/tp/pp/cp/gpu/node/local_gpu of one rank of `engine`, as the plan placed it."""
        r = self.rank(rank)
        for entry in self._ranks(engine):
            if entry.rank == r:
                return entry.to_dict()
        raise LaunchError(
            f"rank {r} is not in {engine!r} (world size "
            f"{self.world_size(engine)}); check RANK and the plan"
        )

    def size(self, axis: str, engine: str = "actor") -> int:
        """How many ranks one `axis` group has (1 + the largest coordinate on that axis)."""
        _check_axis(axis)
        return 1 + max(getattr(e, axis) for e in self._ranks(engine))

    def group(self, axis: str, rank: Optional[int] = None, engine: str = "actor") -> list[int]:
        """The ranks that share every coordinate with `rank` except `axis`, in axis order."""
        _check_axis(axis)
        mine = self.coords(rank, engine)
        others = [a for a in AXES if a != axis]
        members = [e for e in self._ranks(engine) if all(getattr(e, a) == mine[a] for a in others)]
        return [e.rank for e in sorted(members, key=lambda e: getattr(e, axis))]

    def parallel(self, engine: str = "actor") -> dict[str, int]:
        """The engine's parallel sizes (dp, tp, pp, cp, ep, etp, edp), from its backend spec."""
        return dict(self._component(engine).alloc.to_dict())

    def mesh_layout(
        self, dims: tuple[str, ...] = ("dp", "cp", "tp"), engine: str = "actor"
    ) -> MeshLayout:
        """The engine's ranks laid out by their plan coordinates on `dims` (outermost first;
        FSDP's mesh is (dp, cp, tp)). An axis left out of `dims` must have size 1 and every
        place of the grid must hold exactly one rank, else LaunchError naming the rank."""
        for axis in dims:
            _check_axis(axis)
        for axis in AXES:
            if axis not in dims and self.size(axis, engine) > 1:
                raise LaunchError(
                    f"{engine} has {self.size(axis, engine)} {axis} ranks but a "
                    f"mesh of {', '.join(dims)} has no {axis} axis"
                )
        shape = [self.size(axis, engine) for axis in dims]
        grid: dict[tuple[int, ...], int] = {}
        for entry in self._ranks(engine):
            place = tuple(getattr(entry, axis) for axis in dims)
            if place in grid:
                where = " ".join(f"{a} {c}" for a, c in zip(dims, place))
                raise LaunchError(
                    f"rank {entry.rank}: {where} is rank {grid[place]}'s place "
                    f"too in the {engine} plan"
                )
            grid[place] = entry.rank
        if len(grid) != _product(shape):
            raise LaunchError(
                f"{engine}: {len(grid)} ranks do not fill a "
                f"{' x '.join(map(str, shape))} ({', '.join(dims)}) grid"
            )

        def nest(prefix: tuple[int, ...]) -> list:
            if len(prefix) == len(dims) - 1:
                return [grid[prefix + (i,)] for i in range(shape[-1])]
            return [nest(prefix + (i,)) for i in range(shape[len(prefix)])]

        return MeshLayout(tuple(dims), nest(()))

    def expert_group(
        self, axis: str, rank: Optional[int] = None, engine: str = "actor"
    ) -> list[int]:
        """Megatron's expert groups (etp, ep, edp) holding `rank`: experts re-partition the
        same ranks over (etp, ep, edp, pp), etp fastest (docs/architecture.md §3; Megatron's expert
        rank
        generator), laid out by launcher.planning.ranks' one grid formula."""
        from launcher.planning.ranks import grid

        if axis not in EXPERT_AXES:
            raise LaunchError(f"unknown expert axis {axis!r}; use one of {', '.join(EXPERT_AXES)}")
        p = self.parallel(engine)
        order = ("etp", "ep", "edp", "pp")
        coords = grid(
            {"etp": p["etp"], "ep": p["ep"], "edp": p["edp"], "pp": p["pp"]}, "-".join(order)
        )
        world = len(coords["pp"])
        if world != self.world_size(engine):
            raise LaunchError(
                f"{engine}: etp*ep*edp*pp = {world} but the plan has "
                f"{self.world_size(engine)} ranks"
            )
        r = self.rank(rank)
        others = [a for a in order if a != axis]
        return [o for o in range(world) if all(coords[a][o] == coords[a][r] for a in others)]

    def _engine_options(self, engine: str) -> Mapping[str, Any]:
        return (self.meta.get("engine_options") or {}).get(engine) or {}

    def engine_options(self, engine: str = "actor") -> dict[str, Any]:
        """The engine's options from the plan (actor.fsdp.*, actor.megatron.*, rollout.vllm.*
        ...: the sub-key its backend selects); {} when the plan carries none."""
        return dict(self._engine_options(engine).get("options") or {})

    def training(self, engine: str = "actor") -> dict[str, Any]:
        """How a training engine trains, from the plan: dtype, gradient_checkpointing,
        max_tokens_per_mb (the launcher's defaults where the plan carries none)."""
        default = "float32" if self.device() == "cpu" else "bfloat16"
        return {
            "dtype": default,
            "gradient_checkpointing": False,
            "max_tokens_per_mb": 10240,
            **(self._engine_options(engine).get("training") or {}),
        }

    def offload(self, engine: str = "actor") -> Any:
        """The engine's offload setting from the plan: {"weight", "optimizer", "grad"} for a
        training engine, a bool for rollout; falsy when the plan carries none."""
        return self._engine_options(engine).get("offload") or ({} if engine != "rollout" else False)

    def shares_gpus(self, first: str = "actor", second: str = "rollout") -> bool:
        """True when both engines run in the plan and their GPU sets (virtual slots on cpu)
        overlap: their phases then compete for the same memory."""
        comps = self.plan.components
        if first not in comps or second not in comps:
            return False
        return bool(set(comps[first].gpus) & set(comps[second].gpus))

    # ------------------------------------------------------------------ surviving failures
    def restart(self) -> int:
        """How many times this process's job was restarted: $AREAL_RESTART, 0 when unset."""
        value = self.env.get(ENV_RESTART, "").strip()
        try:
            return int(value) if value else 0
        except ValueError:
            raise LaunchError(f"{ENV_RESTART}={value!r}: expected a whole number") from None

    def checkpoint_dir(self) -> Optional[str]:
        """`<run folder>/checkpoints`, or None without a run folder."""
        run_dir = self.run_dir()
        return str(checkpoints.root(run_dir)) if run_dir else None

    def latest_checkpoint(self) -> Optional[checkpoints.Checkpoint]:
        """The newest complete checkpoint, (step, path), or None."""
        folder = self.checkpoint_dir()
        return checkpoints.latest(folder) if folder else None

    def checkpoint_request(self) -> Optional[str]:
        """The id of a checkpoint the launcher asked for and no trainer saved yet, or None.
        Read it on one rank and share the answer: all ranks must save at the same step."""
        run_dir = self.run_dir()
        return checkpoints.pending_request(run_dir) if run_dir else None

    def checkpoint_request_done(self, request_id: str, final: bool = False) -> None:
        """Tell the launcher the checkpoint it asked for (`request_id`) is complete; `final`:
        it was the last step (a job near its time limit then ends instead of requeueing).
        The trackers are closed first (the next `log` opens them again)."""
        run_dir = self.run_dir()
        trackers = self._beat.get("trackers")
        if trackers is not None:  # the launcher may stop the job next (a requeue): close them
            trackers.close()
        if run_dir:
            checkpoints.mark_done(run_dir, request_id, final)

    def hold_for_stop(self, request_id: str, step: int, say: Callable[[str], None] = print) -> bool:
        """After the checkpoint of request `request_id`: when the launcher said it stops the
        job next (a requeue), hold here, heartbeating, until it does, so that nothing is done or
        logged that the resume would do again. Returns False at once when the launcher goes on
        after it, True when the stop never came within its bound (then the trainer goes on)."""
        run_dir = self.run_dir()
        bound = checkpoints.stop_within_s(run_dir, request_id) if run_dir else None
        if bound is None:
            return False
        say(
            f"step {step}: the launcher stops this job within {bound} s after this checkpoint: "
            "holding"
        )
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            self.heartbeat(step, "held for the stop")
            time.sleep(0.5)
        say(f"step {step}: no stop came within {bound} s: going on")
        return True

    def enable_stack_dumps(self) -> str:
        """SIGUSR2 (launcher.trainer.progress.STACK_SIGNAL) dumps every thread's Python stack to
        stderr, the process's log, and the process carries on; once per process."""
        if "stacks" not in self._beat:
            self._beat["stacks"] = progress.enable_stack_dumps()
        return str(self._beat["stacks"])

    def heartbeat(self, step: int, phase: str, min_interval_s: float = 1.0) -> bool:
        """Record this rank's step and phase in `<run folder>/progress/<job>.<rank>.json` (and, the
        first time, turn on stack dumps). A new step or phase is always written; the same one
        again at most every `min_interval_s`. True when written; nothing without a run folder."""
        stacks = self.enable_stack_dumps()
        run_dir = self.run_dir()
        if not run_dir:
            return False
        now = time.monotonic()
        key = (int(step), str(phase))
        if self._beat.get("last") == key and now - self._beat.get("at", 0.0) < min_interval_s:
            return False
        progress.write(
            run_dir,
            progress.record(
                self.rank(), step, phase, self.restart(), stacks, self.env.get(ENV_COMPONENT, "")
            ),
        )
        self._beat.update(last=key, at=now)
        return True

    # ------------------------------------------------------------------ metrics
    def log(self, metrics: Mapping[str, Any], step: int) -> bool:
        """Rank 0 writes `metrics` (numbers; others are left out) for `step` to every tracker of
        launcher.tracking and to `<run folder>/metrics.jsonl` (launcher.trainer.tracking); a step
        logged before (a restart re-does the steps after its checkpoint) is not written again.
        True when written; other ranks, and a process without a run folder, write nothing."""
        run_dir = self.run_dir()
        if self.rank() != 0 or not run_dir:
            return False
        if "trackers" not in self._beat:
            self._beat["trackers"] = tracking.Trackers(self.env, run_dir, self.restart())
        return bool(self._beat["trackers"].log(metrics, step))

    def finish_tracking(self, picture: bool = True) -> Optional[str]:
        """At the end of a run (rank 0): close the trackers and, with `picture`, draw
        `<run folder>/metrics.png` from metrics.jsonl. Its path, or why there is none."""
        trackers = self._beat.pop("trackers", None)
        if trackers is not None:
            trackers.close()
        run_dir = self.run_dir()
        if self.rank() != 0 or not run_dir or not picture:
            return None
        records = tracking.read_metrics(run_dir)
        if not records:
            return None
        from launcher.spec.tracking import PICTURE
        from launcher.trainer.plot import PlotUnavailable, draw

        try:
            return str(draw(records, os.path.join(run_dir, PICTURE), os.path.basename(run_dir)))
        except PlotUnavailable as exc:
            return str(exc)

    # ------------------------------------------------------------------ rollout side
    def instances(self, engine: str = "rollout") -> list[Mapping[str, Any]]:
        return [i.to_dict() for i in self._component(engine).instances]

    def rollout_backend(self) -> Optional[str]:
        comp = self.plan.components.get("rollout")
        return comp.backend if comp else None

    def weight_targets(
        self, rank: Optional[int] = None, src: str = "actor", dst: str = "rollout"
    ) -> list[tuple[int, int]]:
        """(instance, tp rank) pairs that training rank `rank` of `src` feeds in `dst`."""
        r = self.rank(rank)
        return sorted(
            (p.instance, p.tp)
            for sync in self.plan.weight_sync
            if sync.src == src and sync.dst == dst
            for p in sync.pairs
            if p.rank == r
        )

    def server_addrs(self) -> list[str]:
        """host:port of every rollout server: $AREAL_LLM_SERVER_ADDRS, else the plan's servers
        with $AREAL_HOSTS filling in the node addresses (runs with many servers: a variable
        that long would not fit)."""
        named = self.env.get(ENV_SERVER_ADDRS, "")
        if named.strip():
            return [a.strip() for a in named.split(",") if a.strip()]
        hosts = [h for h in self.env.get(ENV_HOSTS, "").split(",") if h]
        return _addrs_from_processes(self.plan.processes, hosts)

    def served_model_name(self) -> str:
        """The model name the servers answer to in OpenAI requests."""
        return self.env.get(ENV_SERVED_MODEL) or DEFAULT_SERVED_MODEL

    def health_timeout_s(self, default: float = HEALTH_TIMEOUT_S) -> float:
        """How long the launcher waits for the servers' /health: a trainer waits as long."""
        return float(self.meta.get("health_timeout_s") or default)

    def wait_for_servers(
        self, timeout_s: float = HEALTH_TIMEOUT_S, interval_s: float = 1.0
    ) -> list[str]:
        """Block until every server answers /health with 200; return their addresses."""
        return wait_for_servers(self.server_addrs(), timeout_s, interval_s)


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _check_axis(axis: str) -> None:
    if axis not in AXES:
        raise LaunchError(f"unknown parallel axis {axis!r}; use one of {', '.join(AXES)}")


def _addrs_from_processes(processes: Sequence[ProcessSpec], hosts: list[str]) -> list[str]:
    """Servers' addresses from their health URLs, hosts filled in (no hosts: every node is this
    machine), in plan order; followers of multi-node instances have no URL of their own."""
    out = []
    for proc in processes:
        if not proc.is_server or not proc.health_url:
            continue
        url = fill_hosts(proc.health_url, hosts or ["127.0.0.1"] * (1 + proc.node))
        out.append(urllib.parse.urlsplit(url).netloc)
    return out


def read_plan(data: Mapping[str, Any], path: Optional[str] = None) -> Plan:
    """`data` read by the launcher's reader; a dict it cannot read is said in one line."""
    try:
        return Plan.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise LaunchError(
            f"{path or 'the plan'}: not a plan of schema {SCHEMA} the launcher "
            f"wrote ({type(exc).__name__}: {exc})"
        ) from None


def health_ok(addr: str, timeout_s: float = 2.0) -> bool:
    """True when http://addr/health answers 200 right now."""
    try:
        with urllib.request.urlopen(f"http://{addr}/health", timeout=timeout_s) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_for_servers(
    addrs: list[str], timeout_s: float = HEALTH_TIMEOUT_S, interval_s: float = 1.0
) -> list[str]:
    """Poll each address's /health until all answer 200; TimeoutError names the late ones."""
    if not addrs:
        raise LaunchError(
            f"no rollout servers to wait for: set {ENV_SERVER_ADDRS} "
            "or give the plan a rollout component"
        )
    deadline = time.monotonic() + timeout_s
    pending = list(addrs)
    while True:
        pending = [a for a in pending if not health_ok(a)]
        if not pending:
            return list(addrs)
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"rollout servers not healthy after {timeout_s:.0f}s: " + ", ".join(pending)
            )
        time.sleep(interval_s)


def plan_from_dict(
    data: Mapping[str, Any], env: Optional[Mapping[str, str]] = None, path: Optional[str] = None
) -> RuntimePlan:
    """A RuntimePlan over a plan dict; `env` defaults to this process's environment."""
    return RuntimePlan(data=data, env=dict(os.environ if env is None else env), path=path)


def load_plan(path: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> RuntimePlan:
    """Read the plan JSON at `path` (default: $AREAL_LAUNCH_PLAN)."""
    environ = dict(os.environ if env is None else env)
    path = path or environ.get(ENV_PLAN)
    if not path:
        raise LaunchError(f"no plan: set {ENV_PLAN} to the plan JSON the launcher wrote")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise LaunchError(f"{ENV_PLAN}={path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise LaunchError(f"{path}: not a plan JSON ({exc})") from None
    return plan_from_dict(data, environ, path)
