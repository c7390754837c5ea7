"""The launch command's steps: compose -> plan -> request -> a runner runs it (or prints it).

Everything up to the request is validation: it raises UserError before anything starts. A
dry run takes exactly the path of a launch (the same request, the same runner checks) and
stops short of the side effects: it writes nothing and starts nothing. A sweep prepares every
point first, so one bad point stops the whole sweep with nothing started.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from omegaconf import DictConfig

from launcher.config.compose import Composer
from launcher.config.run import ComposedRun
from launcher.config.schema import engine
from launcher.planning.build import Planned
from launcher.runners import Runner
from launcher.spec import registry
from launcher.spec.builtins import ENGINES, POLICY, PRIMARY
from launcher.spec.errors import ConfigError, LaunchError, PlacementError, UserError
from launcher.spec.plan import Plan
from launcher.spec.profiling import Profiling
from launcher.spec.request import FlagCheck, Folders, LaunchRequest
from launcher.spec.runfolder import ENTRY_CONFIG, PLAN
from launcher.spec.tracking import Identity, check

if TYPE_CHECKING:
    from launcher.memory.capacity import Capacity

REPO_ROOT = Path(__file__).resolve().parents[2]  # the folder holding launcher/ and recipes/


@dataclass
class Prepared:
    """A run, resolved and checked, not started."""

    overrides: list[str]
    run: ComposedRun
    planned: Planned
    runner: Runner
    entry: str  # the trainer entry, resolved
    run_dir: Path  # where the run folder goes (the launch makes it unique and sets it here)
    point: Optional[int] = None  # index in a sweep
    sweep: Optional[str] = None  # the sweep's id (launcher.spec.tracking.sweep_id)
    job_id: Optional[str] = None  # set once submitted to a scheduler

    @property
    def plan(self) -> Plan:
        return self.planned.plan

    @property
    def dry_run(self) -> bool:
        return bool(self.run.config.launcher.dry_run)


def prepare(
    overrides: list[str],
    to_run: bool = True,
    composed: Optional[DictConfig] = None,
    composer: Optional[Composer] = None,
) -> Prepared:
    """Compose and resolve; every user mistake raises here, before anything starts, named in
    the spelling the config used (a peer's key where it wrote one).

    to_run=False (`plan`): the trainer script need not exist on the machine that plans.
    composed: the config Hydra already composed for these overrides (a sweep point)."""
    from launcher.config.run import run_spec

    composer = composer or Composer()
    if composed is None:
        composed = composer.compose(overrides, with_hydra=True)
    run = run_spec(composer, composed)
    try:
        return _prepared(overrides, composer, run, to_run)
    except UserError as exc:
        raise run.translation.restated(exc) from None


def _prepared(overrides: list[str], composer: Composer, run: ComposedRun, to_run: bool) -> Prepared:
    from launcher import runners
    from launcher.config.compose import choices_only
    from launcher.config.run import run_spec
    from launcher.node.hostinfo import count_local_gpus
    from launcher.planning.build import build_plan
    from launcher.planning.resolve import check_unused_options

    config = run.config
    runner = runners.create(config.launcher)
    device = str(config.cluster.device)
    planned = build_plan(
        config,
        count_local_gpus,
        more_nodes=runner.more_nodes(device),
        offer=runner.offer() if device == "auto" else None,
        flag_origins=run.translation.flag_origins,
    )
    chosen = {n: str(c.alloc) for n, c in planned.plan.components.items()}
    try:
        check_unused_options(config, chosen)
    except ConfigError:  # set by the user, or by a preset/group file? only the user's count
        defaults = composer.compose(choices_only(overrides), with_hydra=True)
        check_unused_options(config, chosen, run_spec(composer, defaults).config)
    entry = str(config.trainer.entry)
    if any(c.kind == registry.TRAIN for c in planned.plan.components.values()):
        entry = resolve_entry(entry, must_exist=to_run)
    planned = dataclasses.replace(
        planned,
        workers={
            name: dataclasses.replace(
                w, entry=resolve_entry(w.entry, to_run, f"components.{name}.entry")
            )
            for name, w in planned.workers.items()
        },
    )
    planned = as_written(with_memory(planned, here=not runner.more_nodes(device)), run)
    return Prepared(list(overrides), run, planned, runner, entry, Path(run.run_dir).absolute())


def as_written(planned: Planned, run: ComposedRun) -> Planned:
    """The plan's notes (the adapters' first) and warnings (theirs too) in the spelling the
    config used."""
    said = run.translation.as_written
    meta = planned.plan.meta
    if "memory" in meta:  # its problems' fixes name keys too
        meta = {**meta, "memory": _strings(meta["memory"], said)}
    plan = dataclasses.replace(
        planned.plan,
        warnings=tuple(said(w) for w in (*run.translation.warnings, *planned.plan.warnings)),
        meta=meta,
    )
    notes = tuple(said(n) for n in (*run.notes, *planned.notes))
    return dataclasses.replace(planned, plan=plan, notes=notes)


def _strings(value: Any, said: Callable[[str], str]) -> Any:
    """`value` (JSON-like) with `said` applied to every string in it."""
    if isinstance(value, str):
        return said(value)
    if isinstance(value, dict):
        return {k: _strings(v, said) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strings(v, said) for v in value]
    return value


def with_memory(planned: Planned, here: bool) -> Planned:
    """The plan with its `memory` section (docs/architecture.md §10): the model's shape from its
    config.json
    (read here, never downloaded), the GPUs' memory (`here`: this machine's GPUs, by NVML or
    their names; else cluster.gpu_type, which the Slurm partition's gres fills in); a plan
    that does not fit even at the estimate's low end is refused (launcher.check_memory=error),
    said (warn) or not checked (off); one that may not fit (at its high end) is said."""

    from launcher.backends.memory_inputs import plan_memory
    from launcher.memory.model_shape import read_model_shape

    config = planned.config
    mode = config.launcher.check_memory
    plan = planned.plan
    if mode == "off":
        return planned
    model = plan.meta["model_path"]
    shape = read_model_shape(model)
    capacity = gpu_capacity(planned, here)
    if shape is None:  # a hub name, or a folder on the cluster's disks: nothing to read here
        why = f"no config.json at {model} here"
        memory = {
            "gpu_capacity_gib": capacity.gib,
            "fits": None,
            "unknown": why,
            "capacity_source": capacity.source,
        }
        plan = dataclasses.replace(
            plan,
            meta={**plan.meta, "memory": memory},
            warnings=plan.warnings + (f"memory unknown: {why}, so no GPU is checked",),
        )
        return dataclasses.replace(planned, plan=plan)
    own = {  # an engine with a model of its own (teacher.model_path): its own shape
        n: read_model_shape(e.model_path)
        for n, e in planned.engines.items()
        if e.model_path and e.model_path != model
    }
    report = plan_memory(plan, planned.engines, shape, capacity.gib, own)
    said = list(report.warnings)
    problem = report.error()
    if problem is not None and mode == "error":
        raise UserError(f"does not fit: {problem} (launcher.check_memory=warn starts it anyway)")
    if problem is not None:
        said.append(f"does not fit: {problem}")
    said += [risk.line() for risk in report.risks]  # "GPU 4 (node 0) may not fit: ..."
    memory = {**report.to_dict(), "capacity_source": capacity.source}
    plan = dataclasses.replace(
        plan, meta={**plan.meta, "memory": memory}, warnings=plan.warnings + tuple(said)
    )
    return dataclasses.replace(planned, plan=plan)


def gpu_capacity(planned: Planned, here: bool) -> "Capacity":
    """Memory per GPU (or of the host on cpu) for the memory check and --suggest: the
    planned cluster's gpu_type (the user's, or the Slurm partition's gres type); `here`: this
    machine's GPUs are the run's, asked first (NVML, else their names from nvidia-smi -L)."""
    from launcher.memory.capacity import resolve_capacity
    from launcher.node.hostinfo import local_gpu_names

    cluster = planned.config.cluster
    return resolve_capacity(
        planned.plan.cluster.device,
        cluster.gpu_memory_gib,
        cluster.gpu_type,
        detect=here,
        local_names=local_gpu_names,
    )


def resolve_entry(entry: str, must_exist: bool = True, key: str = "trainer.entry") -> str:
    """A relative entry (`key`: trainer.entry, components.<name>.entry) is looked up in the working
    directory, then beside the
    launcher (the default recipe ships with it, editable or installed).

    Checked here, so a missing script fails before any server spends a minute starting."""
    if entry.startswith("-m "):
        return entry
    for candidate in (Path(entry), REPO_ROOT / entry):
        if candidate.is_file():
            return str(candidate.absolute())
    if not must_exist:
        return entry
    raise UserError(
        f"{key}={entry!r}: no such file (relative paths are looked up in "
        f"the working directory, then in {REPO_ROOT}); use a path or '-m module'"
    )


def job_name(prep: Prepared) -> str:
    config = prep.run.config
    base = (
        getattr(config.launcher, "job_name", None)
        or f"{config.experiment_name}-{config.trial_name}"
    )
    return base if prep.point is None else f"{base}-{prep.point}"


def build_request(
    prep: Prepared, run_dir: Path, next_port: Callable[[], int]
) -> tuple[Plan, LaunchRequest]:
    """The plan with its processes, and the request a runner executes (no side effect)."""
    from launcher.backends.context import LaunchContext
    from launcher.backends.plan_processes import build_processes
    from launcher.planning.build import health_timeout_s

    config = prep.run.config
    run_id = uuid.uuid4().hex
    extra_env = user_env(config.launcher.env)
    trains = any(c.kind == registry.TRAIN for c in prep.plan.components.values())
    trainer_env = identity(prep, run_id, run_dir).env({**os.environ, **extra_env})
    if trains:  # a peer's contract for its own trainer (an entry not ours)
        trainer_env.update(prep.run.translation.trainer_env)
    ctx = LaunchContext(
        run_dir=str(run_dir),
        plan_path=str(run_dir / PLAN),
        python=prep.runner.python(prep.run.asks),
        next_port=next_port,
        cpus=prep.runner.cpus(),
        extra_env=extra_env,
        trainer_env=trainer_env,
        engine_env={name: user_env(engine(config, name).env, shell=False) for name in ENGINES},
    )
    args = entry_args(prep, run_dir)
    plan = build_processes(
        prep.planned, prep.entry, args, ctx, trainer_python=config.trainer.python
    )
    request = LaunchRequest(
        run_id=run_id,
        run_dir=str(run_dir),
        job_name=job_name(prep),
        device=plan.cluster.device,
        num_nodes=plan.cluster.num_nodes,
        gpus_per_node=plan.cluster.gpus_per_node,
        processes=plan.processes,
        grace_period_s=float(config.launcher.grace_period_s),
        health_timeout_s=health_timeout_s(config),
        paths=read_paths(plan, prep.entry),
        max_restarts=int(config.launcher.max_restarts),
        hang_timeout_s=config.launcher.hang_timeout_s,
        console=str(config.launcher.console),
        node_groups=plan.cluster.groups,
        cpu_nodes=plan.cluster.cpu_nodes,
        folders=with_profiles(shared_folders(prep, run_dir) if trains else None, plan),
        flag_check=flag_check(prep),
        asks=dict(prep.run.asks),
        post_exit_hook=(config.launcher.post_exit_hook or "").strip() or None,
    )
    return plan, request


def identity(prep: Prepared, run_id: str, run_dir: Path) -> Identity:
    """Who the run is to the experiment trackers (launcher.spec.tracking)."""
    config = prep.run.config
    return Identity(
        check(config.launcher.tracking),
        run_id,
        str(run_dir),
        job_name(prep) if prep.sweep else f"{job_name(prep)}-{run_dir.name}",
        str(config.experiment_name),
        prep.sweep,
    )


def entry_args(prep: Prepared, run_dir: Path) -> list[str]:
    """The trainer entry's arguments: trainer.args, and for an entry of another trainer its
    config as AReaL's launcher hands it (--config FILE ...) with the folders chosen for it."""
    args = [str(a) for a in prep.run.config.trainer.args]
    if prep.run.handoff is not None:
        args += prep.run.handoff.args(str(run_dir))
        args += [at_run(o, run_dir) for o in prep.run.translation.entry_overrides]
    return args


def flag_check(prep: Prepared) -> Optional[FlagCheck]:
    """The rollout's flags the user wrote (AReaL's section, server_args, extra_args), each
    with where it was written, for the preflight's check with the engine's parser (None:
    none given, nothing to check)."""
    found = prep.planned.engines.get(PRIMARY)
    origins = prep.planned.flag_origins
    if found is None or not origins:
        return None
    return FlagCheck(found.alloc.backend, PRIMARY, dict(origins))


def shared_folders(prep: Prepared, run_dir: Path) -> Optional[Folders]:
    """The folders an entry not ours shares (a peer's adapter says which), in this run's
    folder where they name it; None: none."""
    found = prep.run.translation.folders
    if not found.make and not found.clear:
        return None
    return Folders(
        tuple(at_run(p, run_dir) for p in found.make),
        tuple(at_run(p, run_dir) for p in found.clear),
    )


def with_profiles(folders: Optional[Folders], plan: Plan) -> Optional[Folders]:
    """`folders` and cluster.profiling's output folder, made on every node before anything
    starts (nsys writes its reports there, and does not make it)."""
    found = Profiling.of_plan(plan.meta)
    if found is None:
        return folders
    base = folders or Folders()
    return Folders((*base.make, found.output_dir), base.clear)


def at_run(text: str, run_dir: Path) -> str:
    """`text` with `{run_dir}` (a peer's adapter names the run folder so) filled in."""
    return text.replace("{run_dir}", str(run_dir))


def read_paths(plan: Plan, entry: str) -> tuple[str, ...]:
    """Folders the processes read that must exist where they run: the model (a local path;
    a hub name is the engine's business), and the trainer entry's folder."""
    out = []
    model = str(plan.meta.get("model_path", ""))
    if os.path.isabs(model) and any(c.is_inference for c in plan.components.values()):
        out.append(model)
    if os.path.isabs(entry) and any(c.kind == registry.TRAIN for c in plan.components.values()):
        out.append(os.path.dirname(entry))
    return tuple(out)


def user_env(env: dict, shell: bool = True) -> dict[str, str]:
    """What the user says processes get: engine defaults they exported in their shell
    (OMP_NUM_THREADS, ...; `shell`), then `env` (launcher.env, or an engine's own). The
    launcher's contract still wins over both."""
    from launcher.backends.common import ENV_DEFAULT_KEYS

    exported = {k: os.environ[k] for k in ENV_DEFAULT_KEYS if k in os.environ} if shell else {}
    return {**exported, **{str(k): str(v) for k, v in (env or {}).items()}}


def notes_of(prep: Prepared, request: LaunchRequest) -> list[str]:
    """What the user should know of the run: the plan's notes and the runner's, in the
    spelling the config used."""
    return [*prep.planned.notes, *map(prep.run.translation.as_written, prep.runner.notes(request))]


def warn(plan: Plan, notes: Sequence[str] = (), more: Sequence[str] = ()) -> None:
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    for w in (*plan.warnings, *more):
        print(f"warning: {w}", file=sys.stderr)


# ----------------------------------------------------------------------------- one run
def start(prep: Prepared, own_folder: bool = False) -> int:
    """Perform the run with its runner, or (dry run) print exactly what it would perform.

    own_folder: prep.run_dir was made for this run already (by Hydra's run_job, under a Hydra
    launcher other than ours); else the run claims a folder of its own there (-1, -2, ...)."""
    from launcher.config.run import hydra_record
    from launcher.node.runs import claim_run_dir, free_run_dir, write_private

    base = prep.run.config.launcher.base_port
    if prep.dry_run:
        with prep.runner.ports(base, dry=True) as next_port:
            plan, request = build_request(prep, free_run_dir(prep.run_dir), next_port)
            said = prep.runner.check(request)
        warn(plan, notes_of(prep, request), said)
        sys.stdout.write(prep.runner.dryrun(request))
        return 0
    with prep.runner.ports(base, dry=False) as next_port:
        while True:  # checked before its folder exists; a folder of its own, always
            run_dir = prep.run_dir if own_folder else free_run_dir(prep.run_dir)
            plan, request = build_request(prep, run_dir, next_port)
            said = prep.runner.check(request)
            if own_folder or claim_run_dir(run_dir):
                break
        prep.run_dir = run_dir
        warn(plan, notes_of(prep, request), said)
        write_private(run_dir / PLAN, plan.to_json(mask_secrets=False))
        for name, text in hydra_record(prep.run, run_dir).items():  # .hydra/: may hold secrets
            (run_dir / name).parent.mkdir(exist_ok=True)
            write_private(run_dir / name, text)
        write_entry_config(prep, run_dir)
        if prep.runner.runs_here:  # attached here: the console shows where everything runs
            show_plan_summary(plan, run_dir)
        code = prep.runner.run(request)
    from launcher.node.runs import read_record

    try:
        prep.job_id = read_record(run_dir).job_id
    except LaunchError:  # no record (yet) to read the job id from: the run said its own end
        pass
    return code


def write_entry_config(prep: Prepared, run_dir: Path) -> None:
    """The entry's config (launcher.config.handoff.Handoff) where its --config points (the
    folders it uses are made by each node: the request's folders)."""
    from launcher.node.runs import write_private

    if prep.run.handoff is not None:
        write_private(run_dir / ENTRY_CONFIG, prep.run.handoff.text())


def show_plan_summary(plan: Plan, run_dir: Path) -> None:
    from launcher.cli.render import console as make_console
    from launcher.cli.render import render_gpu_map

    console = make_console()
    console.print(render_gpu_map(plan))
    console.print(f"[bold]run folder[/bold] {run_dir}  ({len(plan.processes)} processes)")


def counted_request(prep: Prepared) -> tuple[Plan, LaunchRequest]:
    """The plan and request with ports counted up from launcher.base_port (or 30000): what
    `plan` shows and what a sweep rehearses; nothing is reserved, nothing starts."""
    from launcher.node.ports import DEFAULT_BASE_PORT, counted_ports

    base = prep.run.config.launcher.base_port or DEFAULT_BASE_PORT
    return build_request(prep, prep.run_dir, counted_ports(base))


def show_plan(
    overrides: list[str], json_out: bool, svg: Optional[Path], composer: Optional[Composer] = None
) -> int:
    """`areal-launch plan`: the table and GPU map, or the plan JSON; starts nothing."""
    prep = prepare(overrides, to_run=False, composer=composer)
    the_plan, request = counted_request(prep)
    if svg is not None:
        from launcher.cli.render import render_svg

        try:
            svg.write_text(render_svg(the_plan))
        except OSError as exc:
            raise UserError(f"--svg {svg}: cannot write it ({exc.strerror})") from None
    warn(the_plan, notes_of(prep, request))
    if json_out:
        sys.stdout.write(the_plan.to_json() + "\n")
        return 0
    from launcher.cli.render import console as make_console
    from launcher.cli.render import render_gpu_map, render_table

    console = make_console()
    console.print(render_table(the_plan))
    console.print(render_gpu_map(the_plan))
    return 0


def sharing_everything(overrides: list[str], composer: Composer) -> Optional[list[str]]:
    """The overrides that make any cluster hold the run: rollout and actor at d1, sharing
    GPU 0 (what --suggest needs is the cluster, the model and the engines' options, not the
    layout it will replace). None where the backends come from a peer's allocation string."""
    from launcher.config.run import run_spec
    from launcher.config.schema import backend_of

    composed = composer.compose(overrides, with_hydra=True)
    run = run_spec(composer, composed)
    if any(
        w.startswith(("allocation_mode", "multi_agent_allocation"))
        for w in run.translation.warnings
    ):
        return None
    config = run.config
    given = {n: b for n in (PRIMARY, POLICY) if (b := backend_of(engine(config, n).backend))}
    on_gpu0 = ", ".join(f"{n}: 0" for n in given)
    return [
        *(f"{n}.backend={b}:d1" for n, b in given.items()),
        f"cluster.component_placement={{{on_gpu0}}}",
    ]


def show_suggestions(overrides: list[str], composer: Optional[Composer] = None) -> int:
    """`areal-launch plan --suggest OVERRIDES`: the layouts that fit, ranked as
    `areal-launch plan --help` says (the --suggest flag in cli/flags.py)."""
    from launcher.backends.memory_inputs import inference_options, train_options
    from launcher.memory.model_shape import read_model_shape
    from launcher.memory.suggest import SuggestOptions, suggest_within

    prep = _to_search(overrides, composer or Composer())
    plan = prep.plan
    shape = read_model_shape(plan.meta["model_path"])
    if shape is None:
        raise UserError(
            f"model_path={plan.meta['model_path']}: no config.json there, so "
            "nothing to size: point model_path at a local model folder"
        )
    capacity = gpu_capacity(prep.planned, here=not prep.runner.more_nodes("cuda"))
    engines = prep.planned.engines
    options = SuggestOptions(
        train=train_options(engines[POLICY]) if POLICY in engines else SuggestOptions().train,
        infer=inference_options(engines[PRIMARY]) if PRIMARY in engines else SuggestOptions().infer,
    )
    search = suggest_within(shape, plan.cluster, capacity.gib, options)
    if search.cut:
        print(
            f"note: --suggest searched for its {search.budget_s:.0f} s budget and stopped: "
            "the layouts below are the best of those it tried, not of all (fewer nodes, "
            "or fixing actor.backend or rollout.backend, searches less)",
            file=sys.stderr,
        )
    cluster = plan.cluster
    print(
        f"# {len(search.found)} layout(s) that fit {cluster.num_nodes} node(s) x "
        f"{cluster.gpus_per_node} GPUs of {capacity.gib:.1f} GiB ({capacity.source}), best "
        "first (score: sqrt(generation x training tokens), see plan --help)"
    )
    _print_found(search.found, overrides)
    return 0


def _to_search(overrides: list[str], composer: Composer) -> Prepared:
    """The run --suggest searches layouts for: as given, or (when the layout given does not
    fit) the cluster alone, with rollout and actor sharing one GPU."""
    try:
        return prepare([*overrides, "launcher.check_memory=off"], to_run=False, composer=composer)
    except PlacementError as exc:  # the search picks its own layouts: plan the cluster alone
        shared = sharing_everything(overrides, composer)
        if shared is None:
            raise
        print(
            f"note: --suggest: the layout given does not fit ({exc}); searching the "
            "cluster's layouts",
            file=sys.stderr,
        )
        return prepare(
            [*overrides, *shared, "launcher.check_memory=off"], to_run=False, composer=composer
        )


def _print_found(found: Sequence[Any], overrides: list[str]) -> None:
    """Each layout found, and the command that runs it (the user's overrides it keeps)."""
    import shlex

    for s in found:
        print(
            f"# {s.mode}: {PRIMARY} {s.server} ({s.kv_tokens} KV tokens), {POLICY} {s.trainer} "
            f"({s.train_tokens} tokens per micro-step), score {s.score:.0f}"
        )
        keys = {o.partition("=")[0] for o in s.overrides}
        kept = [o for o in overrides if o.lstrip("+").partition("=")[0] not in keys]
        print(s.command(" ".join(["areal-launch", *map(shlex.quote, kept)])))
    if not found:
        print("# none fits: more GPUs, a smaller model, or a smaller context")
