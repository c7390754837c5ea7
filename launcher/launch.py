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


def prepare(overrides: list[str], run_dir: Optional[Path] = None) -> Prepared:
    """Compose and resolve; every user mistake raises here, before anything starts."""
    from omegaconf import OmegaConf, open_dict

    from launcher.build import build_plan, explicit_keys
    from launcher.compose import compose_config
    from launcher.engines import check_unused_options
    from launcher.hostinfo import count_local_gpus

    cfg = compose_config(overrides, with_hydra=True)
    with open_dict(cfg):
        cfg.trainer.entry = resolve_entry(str(cfg.trainer.entry))
    device = str(cfg.cluster.device)
    local_gpus = count_local_gpus() if device in ("auto", "cuda") else 0
    plan = build_plan(cfg, local_gpus, explicit_keys(overrides))
    check_unused_options(cfg, backends={n: str(c.alloc) for n, c in plan.components.items()})
    if run_dir is None:
        run_dir = Path(str(OmegaConf.select(cfg, "hydra.run.dir")))
    return Prepared(list(overrides), cfg, plan, run_dir.absolute())


def resolve_entry(entry: str) -> str:
    """A relative trainer entry is looked up in the working directory, then in the project."""
    if entry.startswith("-m ") or os.path.isabs(entry) or os.path.exists(entry):
        return os.path.abspath(entry) if os.path.exists(entry) else entry
    bundled = REPO_ROOT / entry
    return str(bundled) if bundled.exists() else entry


def counting_ports(start: int) -> Callable[[], int]:
    """Ports for printed plans and Slurm scripts: deterministic, counted up from a base."""
    counter = itertools.count(start)
    return lambda: next(counter)


def with_processes(prep: Prepared, next_port: Callable[[], int], host=None, cpus: tuple[int, ...] = ()):
    from launcher.engines import LaunchContext, plan_with_processes

    ctx = LaunchContext(run_dir=str(prep.run_dir), plan_path=str(prep.run_dir / "plan.json"),
                        python=sys.executable, next_port=next_port, cpus=cpus)
    if host is not None:
        ctx.host = host
    return plan_with_processes(prep.plan, prep.cfg, ctx)


def warn(plan: Any) -> None:
    for w in plan.warnings:
        print(f"warning: {w}", file=sys.stderr)


# ----------------------------------------------------------------------------- one run
def launch_one(overrides: list[str]) -> int:
    return start(prepare(overrides))


def start(prep: Prepared) -> int:
    kind = str(prep.cfg.launcher.type)
    if kind == "slurm":
        return start_slurm(prep)
    if kind != "local":
        raise LaunchError(f"launcher.type={kind!r}: choose launcher=local or launcher=slurm")
    return start_local(prep)


def start_local(prep: Prepared) -> int:
    from rich.console import Console

    from launcher.runners.local import dry_run_text, supervise, write_plan
    from launcher.runners.ports import PortReserver

    launcher = prep.cfg.launcher
    warn(prep.plan)
    base = launcher.base_port or None
    if launcher.dry_run:
        plan = with_processes(prep, counting_ports(base or DEFAULT_BASE_PORT))
        print(dry_run_text(plan.processes))
        return 0
    console = Console(stderr=False)
    prep.run_dir.mkdir(parents=True, exist_ok=True)
    with PortReserver(base_port=base) as ports:
        plan = with_processes(prep, ports.take, cpus=tuple(sorted(os.sched_getaffinity(0))))
        write_plan(plan, prep.run_dir)
        show_plan_summary(plan, console, prep.run_dir)
        health = launcher.health_timeout_s or prep.cfg.rollout.health_timeout_s
        result = supervise(plan.processes, prep.run_dir, grace_period_s=launcher.grace_period_s,
                           health_timeout_s=health, console=console)
    return result.exit_code


def show_plan_summary(plan: Any, console: Any, run_dir: Path) -> None:
    from launcher.render import render_gpu_map

    console.print(render_gpu_map(plan))
    console.print(f"[bold]run folder[/bold] {run_dir}  ({len(plan.processes)} processes)")


def start_slurm(prep: Prepared, quiet: bool = False) -> int:
    from launcher.runners import slurm

    plan = with_processes(prep, counting_ports(prep.cfg.launcher.base_port or DEFAULT_BASE_PORT),
                          host=slurm.slurm_host_placeholder)
    job_name = prep.cfg.launcher.job_name or f"{prep.cfg.experiment_name}-{prep.cfg.trial_name}"
    script = slurm.render_sbatch(plan, plan.processes, prep.cfg.launcher, str(prep.run_dir), job_name,
                                 mask_secrets=bool(prep.cfg.launcher.dry_run))
    warn(plan)
    if prep.cfg.launcher.dry_run:
        print(script, end="")
        return 0
    prep.run_dir.mkdir(parents=True, exist_ok=True)
    from launcher.runners.local import write_plan

    write_plan(plan, prep.run_dir)
    job_id = slurm.submit(script, prep.run_dir)
    prep.job_id = job_id  # type: ignore[attr-defined]
    print(job_id)
    return 0


# ----------------------------------------------------------------------------- sweeps
def sweep_points(overrides: list[str]) -> list[list[str]]:
    """Hydra's basic sweep: the cartesian product of every `key=a,b,c` (and range/choice) override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from launcher.compose import explain_hydra_error

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:  # noqa: BLE001 - Hydra's parse errors become one line
        raise LaunchError(explain_hydra_error(exc, overrides)) from None
    axes = []
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([f"{key}={o.get_value_element_as_str()}"])
    return [list(p) for p in itertools.product(*axes)]


def launch_sweep(overrides: list[str]) -> int:
    from omegaconf import OmegaConf
    from rich.console import Console
    from rich.table import Table

    points = sweep_points(overrides)
    prepared = []
    for i, point in enumerate(points):
        try:
            prep = prepare(point)
        except LaunchError as exc:
            raise LaunchError(f"sweep point {i} ({' '.join(point)}): {exc}; nothing was started") from None
        prepared.append(prep)
    sweep_dir = Path(str(OmegaConf.select(prepared[0].cfg, "hydra.sweep.dir"))).absolute()
    rows = []
    for i, prep in enumerate(prepared):
        prep.run_dir = sweep_dir / str(i)
        print(f"[sweep] point {i}/{len(prepared)}: {' '.join(prep.overrides)}", file=sys.stderr)
        code = start(prep)
        rows.append((i, " ".join(prep.overrides), getattr(prep, "job_id", None), code, prep.run_dir))
    table = Table(title=f"sweep: {len(rows)} points")
    for col in ("point", "overrides", "job id / exit code", "run folder"):
        table.add_column(col)
    for i, text, job, code, folder in rows:
        table.add_row(str(i), text, f"job {job}" if job else f"exit {code}", str(folder))
    Console(stderr=True).print(table)
    return max((r[3] for r in rows), default=0)


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
