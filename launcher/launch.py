"""The launch command's steps: compose -> plan -> processes -> run locally or submit to Slurm.

Everything up to `Prepared` is validation: it raises LaunchError before anything starts. A sweep
prepares every point first, so one bad point stops the whole sweep with nothing started.
"""
from __future__ import annotations

import itertools
import os
import re
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
EXIT_FAILED = 1  # a point that could not be started (sbatch refused it, ...)


def sweep_points(overrides: list[str]) -> list[list[str]]:
    """Hydra's basic sweep: the cartesian product of every `key=a,b,c` (and range/choice) override.

    Same order as Hydra's BasicSweeper (the last swept key varies fastest; a key given twice
    keeps its first place and its last value). Each value is written as typed when Hydra reads
    it back the same (`fsdp:d8`, not Hydra's escaped `fsdp\\:d8`), so errors and the summary
    show what the user wrote; quoted values ('0-2,5,7') are one value, not a sweep.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from launcher.compose import explain_hydra_error

    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(overrides)
    except Exception as exc:  # noqa: BLE001 - Hydra's parse errors become one line
        raise LaunchError(explain_hydra_error(exc, overrides)) from None
    axes: dict[str, list[str]] = {}
    for o in parsed:
        key = o.get_key_element()
        if not o.is_sweep_override():
            axes[key] = [o.input_line]
            continue
        try:
            values = list(o.sweep_string_iterator())
        except HydraException:
            raise LaunchError(f"{o.input_line!r}: an interval has no points to run; list the "
                              f"values ({key}=a,b,c) or use range(start,stop,step)") from None
        axes[key] = [_as_typed(parser, key, v) for v in values]
    return [list(p) for p in itertools.product(*axes.values())]


def _as_typed(parser: Any, key: str, value: str) -> str:
    """`key=value` without Hydra's backslash escapes, when Hydra reads that back as the same value."""
    escaped = f"{key}={value}"
    plain = key + "=" + re.sub(r"\\(.)", r"\1", value)
    if plain == escaped:
        return escaped
    try:
        again = parser.parse_override(plain)
        same = not again.is_sweep_override() and again.value() == parser.parse_override(escaped).value()
    except Exception:  # noqa: BLE001 - not readable unescaped: keep Hydra's form
        same = False
    return plain if same else escaped


def point_labels(points: list[list[str]]) -> list[str]:
    """Each point in a few words: the overrides that differ between points (all, if none do)."""
    varying = [j for j in range(len(points[0])) if len({p[j] for p in points}) > 1] if points else []
    return [" ".join(p[j] for j in varying) or " ".join(p) or "(defaults)" for p in points]


def rehearse(prep: Prepared) -> int:
    """Build a point's processes, and for Slurm its script, without starting anything: engine
    option and script errors then stop a sweep before its first point starts. Returns how many
    ports the point takes, counted up from launcher.base_port."""
    base = prep.cfg.launcher.base_port or DEFAULT_BASE_PORT
    ports = itertools.count(base)
    kind = str(prep.cfg.launcher.type)
    if kind == "local":
        with_processes(prep, ports.__next__)
    elif kind == "slurm":
        from launcher.runners import slurm

        plan = with_processes(prep, ports.__next__, host=slurm.slurm_host_placeholder)
        job_name = prep.cfg.launcher.job_name or f"{prep.cfg.experiment_name}-{prep.cfg.trial_name}"
        slurm.render_sbatch(plan, plan.processes, prep.cfg.launcher, str(prep.run_dir), job_name)
    else:
        raise LaunchError(f"launcher.type={kind!r}: choose launcher=local or launcher=slurm")
    return next(ports) - base


def launch_sweep(overrides: list[str]) -> int:
    """Resolve every point (run folder sweep_dir/<i>), then run them in turn locally or submit
    one Slurm job each; a summary table goes to stderr (stdout keeps the job ids).

    Slurm points may run at once on one host (jobs with launcher.cpus_per_gpu share nodes; the
    test cluster's nodes are one machine), so each takes its own ports, one range after the
    other from launcher.base_port; local points run in turn and reserve free ports as they start."""
    points = sweep_points(overrides)
    labels = point_labels(points)
    prepared: list[Prepared] = []
    sweep_dir: Optional[Path] = None
    free_port: Optional[int] = None  # the first port no Slurm point has taken yet
    for i, (point, label) in enumerate(zip(points, labels)):
        try:
            prep = prepare(point)
            sweep_dir = sweep_dir or _sweep_dir(prep.cfg)  # one folder, even if ${now:} ticks
            prep.run_dir = sweep_dir / str(i)
            if str(prep.cfg.launcher.type) != "slurm":
                rehearse(prep)
            else:
                base = free_port or prep.cfg.launcher.base_port or DEFAULT_BASE_PORT
                prep.cfg.launcher.base_port = base
                free_port = base + rehearse(prep)
                if free_port > 65536:
                    raise LaunchError(f"the points need ports {base}..{free_port - 1}, past 65535: "
                                      "set a lower launcher.base_port")
        except LaunchError as exc:
            raise LaunchError(f"sweep point {i} ({label}): {exc}; nothing was started") from None
        prepared.append(prep)
    rows: list[tuple[int, str, str, Path]] = []
    codes: list[int] = []
    for i, (prep, label) in enumerate(zip(prepared, labels)):
        if codes and codes[-1] >= 128:  # the launcher was interrupted: stop the sweep
            rows.append((i, label, "not started", prep.run_dir))
            continue
        print(f"[sweep] point {i} ({i + 1} of {len(prepared)}): {label}", file=sys.stderr)
        try:
            code = start(prep)
            job = getattr(prep, "job_id", None)
            result = f"job {job}" if job else ("dry run" if prep.cfg.launcher.dry_run else f"exit {code}")
        except LaunchError as exc:  # e.g. sbatch refused it: the next points are still tried
            print(f"error: sweep point {i} ({label}): {exc}", file=sys.stderr)
            code, result = EXIT_FAILED, "not started: error above"
        codes.append(code)
        rows.append((i, label, result, prep.run_dir))
    print(summary_table(rows, sweep_dir), file=sys.stderr)
    return max(codes, default=0)


def _sweep_dir(cfg: Any) -> Path:
    from omegaconf import OmegaConf

    try:
        return Path(str(OmegaConf.select(cfg, "hydra.sweep.dir"))).absolute()
    except Exception as exc:  # noqa: BLE001 - an interpolation the user wrote
        raise LaunchError(f"hydra.sweep.dir: {str(exc).splitlines()[0]}") from None


def summary_table(rows: list[tuple[int, str, str, Path]], sweep_dir: Optional[Path]) -> str:
    """Plain aligned text: nothing is cut, so run folders and job ids can be copied."""
    table = [("point", "overrides", "job id / exit code", "run folder")]
    table += [(str(i), label, result, str(folder)) for i, label, result, folder in rows]
    widths = [max(len(r[c]) for r in table) for c in range(3)]
    lines = ["  ".join(r[c].ljust(widths[c]) for c in range(3)) + "  " + r[3] for r in table]
    return "\n".join([f"sweep: {len(rows)} points in {sweep_dir}"] + lines)


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
