"""The launch command's steps: compose -> plan -> processes -> run locally or submit to Slurm.

Everything up to `Prepared` is validation: it raises LaunchError before anything starts. A sweep
prepares every point first, so one bad point stops the whole sweep with nothing started.
"""
from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from launcher.errors import LaunchError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASE_PORT = 30000


@dataclass
class Prepared:
    overrides: list[str]
    cfg: Any  # DictConfig typed as LaunchConfig, with the `hydra` node
    plan: Any  # launcher.plan.Plan without processes
    run_dir: Path
    point: Optional[int] = None  # index in a sweep
    job_id: Optional[str] = None  # set once submitted to Slurm


def prepare(overrides: list[str], run_dir: Optional[Path] = None, to_run: bool = True) -> Prepared:
    """Compose and resolve; every user mistake raises here, before anything starts.

    to_run=False (`plan`): the trainer script need not exist on the machine that plans."""
    from omegaconf import OmegaConf, open_dict

    from launcher.build import build_plan, explicit_keys
    from launcher.compose import compose_config
    from launcher.engines import check_unused_options
    from launcher.hostinfo import count_local_gpus

    cfg = compose_config(overrides, with_hydra=True)
    base = cfg.launcher.base_port
    if base is not None and not 1024 <= base <= 65000:
        raise LaunchError(f"launcher.base_port={base}: choose a port in 1024..65000 (or null: free ports)")
    plan = build_plan(cfg, count_local_gpus, explicit_keys(overrides))
    backends = {n: str(c.alloc) for n, c in plan.components.items()}
    try:
        check_unused_options(cfg, backends=backends)
    except LaunchError:  # set by the user, or by a preset/group file? only the user's count
        check_unused_options(cfg, backends=backends, defaults=compose_config(choices_only(overrides)))
    if any(not c.is_inference for c in plan.components.values()):
        with open_dict(cfg):
            cfg.trainer.entry = resolve_entry(str(cfg.trainer.entry), must_exist=to_run)
    if run_dir is None:
        try:
            run_dir = Path(str(OmegaConf.select(cfg, "hydra.run.dir")))
        except Exception as exc:  # noqa: BLE001 - an interpolation the user wrote
            raise LaunchError(f"hydra.run.dir: {str(exc).splitlines()[0]}") from None
    return Prepared(list(overrides), cfg, plan, run_dir.absolute())


def choices_only(overrides: list[str]) -> list[str]:
    """The overrides that pick config files (`rollout=sglang`, `experiment=...`), not values."""
    return [o for o in overrides if "." not in o.partition("=")[0]
            and not o.startswith(("hydra", "+", "~"))]


def resolve_entry(entry: str, must_exist: bool = True) -> str:
    """A relative trainer entry is looked up in the working directory, then in the project.

    Checked here, so a missing script fails before any server spends a minute starting."""
    if entry.startswith("-m "):
        return entry
    for candidate in (Path(entry), REPO_ROOT / entry):
        if candidate.is_file():
            return str(candidate.absolute())
    if not must_exist:
        return entry
    raise LaunchError(f"trainer.entry={entry!r}: no such file (relative paths are looked up in "
                      f"the working directory, then in {REPO_ROOT}); use a path or '-m module'")


def counting_ports(start: int) -> Callable[[], int]:
    """Ports for printed plans and Slurm scripts: deterministic, counted up from a base."""
    counter = itertools.count(start)
    return lambda: next(counter)


def with_processes(prep: Prepared, next_port: Callable[[], int], host=None, cpus: tuple[int, ...] = ()):
    from launcher.engines import LaunchContext, plan_with_processes

    ctx = LaunchContext(run_dir=str(prep.run_dir), plan_path=str(prep.run_dir / "plan.json"),
                        python=sys.executable, next_port=next_port, cpus=cpus,
                        extra_env=user_env(prep.cfg))
    if host is not None:
        ctx.host = host
    return plan_with_processes(prep.plan, prep.cfg, ctx)


def user_env(cfg: Any) -> dict[str, str]:
    """What the user says every process gets: engine defaults they exported in their shell
    (OMP_NUM_THREADS, ...), then launcher.env. The launcher's contract still wins over both."""
    from launcher.engines.options import ENV_DEFAULT_KEYS

    exported = {k: os.environ[k] for k in ENV_DEFAULT_KEYS if k in os.environ}
    return {**exported, **{str(k): str(v) for k, v in (cfg.launcher.env or {}).items()}}


def warn(plan: Any) -> None:
    for w in plan.warnings:
        print(f"warning: {w}", file=sys.stderr)


# ----------------------------------------------------------------------------- one run
def launch_one(overrides: list[str]) -> int:
    return start(prepare(overrides))


def job_name(prep: Prepared) -> str:
    base = prep.cfg.launcher.job_name or f"{prep.cfg.experiment_name}-{prep.cfg.trial_name}"
    return base if prep.point is None else f"{base}-{prep.point}"


def request(prep: Prepared, next_port: Callable[[], int], cpus: tuple[int, ...] = ()) -> tuple[Any, Optional[str]]:
    """What a run will do, before any side effect (TorchX's dry run): the plan with its
    processes and, for Slurm, the whole sbatch script. Raises LaunchError for what engines or
    the script renderer refuse."""
    kind = str(prep.cfg.launcher.type)
    if kind == "local":
        return with_processes(prep, next_port, cpus=cpus), None
    if kind != "slurm":
        raise LaunchError(f"launcher.type={kind!r}: choose launcher=local or launcher=slurm")
    from launcher.runners import slurm

    plan = with_processes(prep, next_port, host=slurm.slurm_host_placeholder)
    script = slurm.render_sbatch(plan, plan.processes, prep.cfg.launcher, str(prep.run_dir),
                                 job_name(prep), mask_secrets=bool(prep.cfg.launcher.dry_run))
    return plan, script


def start(prep: Prepared) -> int:
    """Perform the request: run it here, or submit it to Slurm (`dry_run`: print it)."""
    launcher = prep.cfg.launcher
    base = launcher.base_port or None
    if launcher.dry_run or str(launcher.type) == "slurm":
        plan, script = request(prep, counting_ports(base or DEFAULT_BASE_PORT))
        warn(plan)
        if launcher.dry_run:
            from launcher.runners.local import dry_run_text

            print(script if script is not None else dry_run_text(plan.processes) + "\n", end="")
            return 0
        return submit_slurm(prep, plan, script)
    return start_local(prep, base)


def start_local(prep: Prepared, base: Optional[int]) -> int:
    from launcher.render import console as make_console
    from launcher.runners.local import supervise, write_plan
    from launcher.runners.ports import PortReserver

    launcher = prep.cfg.launcher
    nodes = prep.plan.cluster.num_nodes
    if nodes > 1 and prep.plan.cluster.device == "cuda":
        raise LaunchError(f"the plan spans {nodes} nodes; launcher=local runs on this machine only: "
                          "use launcher=slurm, or cluster.num_nodes=1")
    console = make_console()
    prep.run_dir.mkdir(parents=True, exist_ok=True)
    with PortReserver(base_port=base) as ports:
        plan, _ = request(prep, ports.take, cpus=tuple(sorted(os.sched_getaffinity(0))))
        warn(plan)
        write_plan(plan, prep.run_dir)
        show_plan_summary(plan, console, prep.run_dir)
        health = launcher.health_timeout_s or prep.cfg.rollout.health_timeout_s
        # on cpu every node is this machine (virtual slots): all nodes' processes start here
        result = supervise(plan.processes, prep.run_dir, grace_period_s=launcher.grace_period_s,
                           health_timeout_s=health, console=console, node=None)
    return result.exit_code


def show_plan_summary(plan: Any, console: Any, run_dir: Path) -> None:
    from launcher.render import render_gpu_map

    console.print(render_gpu_map(plan))
    console.print(f"[bold]run folder[/bold] {run_dir}  ({len(plan.processes)} processes)")


def submit_slurm(prep: Prepared, plan: Any, script: str) -> int:
    from launcher.runners import slurm
    from launcher.runners.local import write_plan

    prep.run_dir.mkdir(parents=True, exist_ok=True)
    write_plan(plan, prep.run_dir)
    prep.job_id = slurm.submit(script, prep.run_dir)
    print(prep.job_id)
    return 0


def show_plan(overrides: list[str], json_out: bool, svg: Optional[Path]) -> int:
    """`areal-launch plan`: the table and GPU map, or the plan JSON; starts nothing."""
    prep = prepare(overrides, to_run=False)
    the_plan, _ = request(prep, counting_ports(prep.cfg.launcher.base_port or DEFAULT_BASE_PORT))
    warn(the_plan)
    if svg is not None:
        from launcher.render import render_svg

        try:
            svg.write_text(render_svg(the_plan))
        except OSError as exc:
            raise LaunchError(f"--svg {svg}: cannot write it ({exc.strerror})") from None
    if json_out:
        sys.stdout.write(the_plan.to_json() + "\n")
        return 0
    from launcher.render import console as make_console
    from launcher.render import render_gpu_map, render_table

    console = make_console()
    console.print(render_table(the_plan))
    console.print(render_gpu_map(the_plan))
    return 0


def print_config(overrides: list[str], mode: str) -> int:
    from omegaconf import OmegaConf

    from launcher.compose import compose_config

    if mode not in ("job", "hydra", "all"):
        raise LaunchError(f"--cfg {mode!r}: choose job, hydra or all")
    cfg = compose_config(overrides, with_hydra=True)
    hydra_node = cfg.hydra
    with_hydra = OmegaConf.to_container(cfg, resolve=False)
    job = {k: v for k, v in with_hydra.items() if k != "hydra"}
    if mode in ("job", "all"):
        print(OmegaConf.to_yaml(job), end="")
    if mode in ("hydra", "all"):
        print(OmegaConf.to_yaml({"hydra": OmegaConf.to_container(hydra_node, resolve=False)}), end="")
    return 0
