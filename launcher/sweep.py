"""Hydra multirun sweeps: every point resolved and rehearsed before any starts.

Locally the points run one after another; with launcher=slurm each is submitted as its own job.
A bad point stops the sweep with nothing started; a summary table ends it.
"""
from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path
from typing import Any, Optional

from launcher.errors import LaunchError
from launcher.launch import Prepared, build_request, prepare, start
from launcher.runners.ports import DEFAULT_BASE_PORT, counted_ports

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
        key = str(o.get_key_element())
        if not o.is_sweep_override():
            axes[key] = [str(o.input_line)]
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
    """Build a point's request (processes, and for Slurm its script) without starting anything:
    engine option and script errors then stop a sweep before its first point starts. Returns
    how many ports the point takes, counted up from launcher.base_port."""
    base = prep.spec.config.launcher.base_port or DEFAULT_BASE_PORT
    taken: list[int] = []
    counted = counted_ports(base)

    def take() -> int:
        taken.append(counted())
        return taken[-1]
    _, request = build_request(prep, prep.run_dir, take)
    prep.runner.check(request)
    return len(taken)


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
            prep.point = i
            sweep_dir = sweep_dir or Path(prep.spec.sweep_dir).absolute()  # one folder
            prep.run_dir = sweep_dir / str(i)
            if prep.runner_name == "local":
                rehearse(prep)
            else:
                base = free_port or prep.spec.config.launcher.base_port or DEFAULT_BASE_PORT
                prep.spec.config.launcher.base_port = base
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
            job = prep.job_id
            result = f"job {job}" if job else ("dry run" if prep.dry_run else f"exit {code}")
        except LaunchError as exc:  # e.g. sbatch refused it: the next points are still tried
            print(f"error: sweep point {i} ({label}): {exc}", file=sys.stderr)
            code, result = EXIT_FAILED, "not started: error above"
        codes.append(code)
        rows.append((i, label, result, prep.run_dir))
    print(summary_table(rows, sweep_dir), file=sys.stderr)
    return max(codes, default=0)


def summary_table(rows: list[tuple[int, str, str, Path]], sweep_dir: Optional[Path]) -> str:
    """Plain aligned text: nothing is cut, so run folders and job ids can be copied."""
    table = [("point", "overrides", "job id / exit code", "run folder")]
    table += [(str(i), label, result, str(folder)) for i, label, result, folder in rows]
    widths = [max(len(r[c]) for r in table) for c in range(3)]
    lines = ["  ".join(r[c].ljust(widths[c]) for c in range(3)) + "  " + r[3] for r in table]
    return "\n".join([f"sweep: {len(rows)} points in {sweep_dir}"] + lines)
