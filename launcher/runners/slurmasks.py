"""The engines' resource asks as the Slurm job's options: pure (docs/architecture.md §8).

One job step per node runs every engine's processes, so Slurm gets one value for the whole job
from the asks (launcher.spec.request.EngineAsk): the most CPUs and memory per GPU any engine
asks (a note says so when they differ), the one container image, node list, excluded nodes,
reservation and exclusive they ask (two different ones are an error: the job cannot have
both). What the user set as the runner's own option (launcher.cpus_per_gpu, mem_per_gpu,
container_image, reservation, exclusive) wins, with a note.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

from launcher.spec.errors import ConfigError
from launcher.spec.request import EngineAsk, LaunchRequest

# per-GPU asks -> what they are, the launcher option that says them to Slurm, its value
PER_GPU: dict[str, tuple[str, str, Callable[[int], Any]]] = {
    "cpu": ("CPUs", "cpus_per_gpu", int),
    "mem_gib": ("memory", "mem_per_gpu", lambda gib: f"{gib}G"),
}
NODES = {"nodelist": "--nodelist", "exclude": "--exclude"}  # asks -> sbatch's own options
# asks -> the Slurm runner's own option, which the ask fills where the user left it unset
JOB_WIDE = {"image": "container_image", "reservation": "reservation", "exclusive": "exclusive"}


def job_options(request: LaunchRequest, opts: Any) -> tuple[Any, list[str]]:
    """The Slurm runner's options (`opts`, its Config) with the job-wide values the request's
    asks give, and the notes on them. ConfigError where engines ask for two images or two node
    lists."""
    notes: list[str] = []
    changes: dict[str, Any] = {}
    for field, (what, option, value_of) in PER_GPU.items():
        asked = asking(request.asks, field)
        if not asked:
            continue
        if request.device != "cuda":
            notes.append(
                f"{', '.join(asked)}: the {what} per GPU asked are not honoured: the plan asks "
                "Slurm for no GPU (cluster.device=cpu)"
            )
            continue
        most = value_of(max(asked.values()))
        if users_own(opts, option):
            notes += _kept(opts, option, most, asked)
            continue
        if len(set(asked.values())) > 1:
            said = ", ".join(f"{key} {value_of(n)}" for key, n in asked.items())
            notes.append(
                f"the engines ask for different {what} per GPU ({said}): the job asks "
                f"{most} for every GPU (one job step per node runs every engine)"
            )
        changes[option] = most
    for field, option in JOB_WIDE.items():
        found = one_value(request.asks, field)
        if found is not None and users_own(opts, option):
            notes += _kept(opts, option, found[1], dict([found]))
        elif found is not None:
            changes[option] = found[1]
    extra = [f"{flag}={v[1]}" for k, flag in NODES.items() if (v := one_value(request.asks, k))]
    if extra:
        changes["sbatch_extra"] = [*opts.sbatch_extra, *extra]
    return dataclasses.replace(opts, **changes), notes


def asking(asks: Mapping[str, EngineAsk], field: str) -> dict[str, Any]:
    """Who asks for `field` (where they wrote it), and what (`exclusive` false is an ask)."""
    return {
        a.key or name: getattr(a, field)
        for name, a in asks.items()
        if getattr(a, field) or (field == "exclusive" and getattr(a, field) is not None)
    }


def one_value(asks: Mapping[str, EngineAsk], field: str) -> Optional[tuple[str, str]]:
    """(who asks, the value) of the one value the engines ask for `field` (None: none asks).
    ConfigError when two ask for different ones: the job has one."""
    found = asking(asks, field)
    if not found:
        return None
    (one, first), *rest = found.items()
    other = next(((k, v) for k, v in rest if v != first), None)
    if other is not None and isinstance(first, bool):
        raise ConfigError(
            f"{one}.{field}={str(first).lower()} but {other[0]}.{field}="
            f"{str(other[1]).lower()}: the job's nodes are its own or not, for every engine "
            "(areal-launch runs one job); give both the same"
        )
    if other is not None:
        raise ConfigError(
            f"{one} asks Slurm for the {field} {first} but {other[0]} for {other[1]}: the job "
            f"has one {field} for every engine (areal-launch runs one job); give both the same"
        )
    return one, first


def users_own(opts: Any, option: str) -> bool:
    """Whether the user set launcher.<option> (their value wins over the engines' asks)."""
    return getattr(opts, option) not in (None, "")


def _kept(opts: Any, option: str, value: Any, asked: Mapping[str, Any]) -> list[str]:
    """The note that the user's launcher.<option> is used, not the value asked (none: same)."""
    given = getattr(opts, option)
    if str(given) == str(value):
        return []
    verb = "asks" if len(asked) == 1 else "ask"
    return [
        f"{', '.join(asked)} {verb} for launcher.{option}={value}; "
        f"launcher.{option}={given} is used"
    ]
