"""What the job's Slurm partition offers: its nodes' GPUs, read with sinfo (an edge).

cluster.device=auto under launcher=slurm plans for these nodes, never for the login node
(launcher.planning.offer). `parse_sinfo` is a pure function over sinfo's text, so the plan
level tests it on captured output; `read_offer` runs one `sinfo -N` with a short timeout and
turns a sinfo that is missing, hangs or fails into one UserError line.
"""

from __future__ import annotations

import re
import subprocess
from typing import Mapping, Optional, Sequence, Union

from launcher.spec.cluster import NodeOffer, OfferedNode
from launcher.spec.errors import UserError

SINFO_TIMEOUT_S = 5.0  # a controller answers in milliseconds; a dead one makes sinfo wait ~9 s
SINFO_FORMAT = "%N|%P|%G"  # node, partition (the default one ends in *), its gres
# one gres entry: name[:type][:count][(S:0-1)], e.g. gpu:h100:8(S:0-1), gpu:8, gpu
_GRES = re.compile(r"(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?(?::(?P<count>\d+))?(?:\(.*\))?\Z")
FIX = (
    "set cluster.device=cuda (with cluster.gpus_per_node=N where the config gives none) or "
    "cluster.device=cpu to plan without asking Slurm"
)


def gpus_of(gres: str) -> tuple[int, Optional[str]]:
    """GPUs of one node's gres text (`gpu:h100:8(S:0-1),shard:8`, `gpu:8`, `(null)`) and
    their type (None: untyped, or of several types)."""
    count, types = 0, set()
    for entry in _entries(gres):
        m = _GRES.match(entry.strip())
        if m is None or m["name"] != "gpu":
            continue
        kind, number = m["type"], m["count"]
        if number is None and kind is not None and kind.isdigit():  # gpu:8
            kind, number = None, kind
        count += int(number) if number is not None else 1
        types.add(kind)
    return count, (next(iter(types)) if len(types) == 1 else None)


def _entries(gres: str) -> list[str]:
    """Split on the commas between entries, not those inside `(S:0,1)`."""
    out, depth, word = [], 0, ""
    for ch in gres:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(word)
            word = ""
        else:
            word += ch
    return [*out, word]


def parse_sinfo(text: str, partition: Optional[str]) -> NodeOffer:
    """The nodes of `partition` (comma list; None: the default partition, the one sinfo marks
    with *) from `sinfo -h -N -o '%N|%P|%G'`'s text; UserError when it lists none."""
    wanted = set(partition.split(",")) if partition else None
    nodes: dict[str, OfferedNode] = {}
    default = None
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        name, part, gres = parts
        if part.endswith("*"):
            part = default = part[:-1]
        if (part in wanted) if wanted is not None else part == default:
            gpus, kind = gpus_of(gres)
            nodes.setdefault(name, OfferedNode(name, gpus, kind))
    where = f"Slurm partition {partition or default}"
    if not nodes:
        said = (
            "names no default partition"
            if wanted is None and default is None
            else f"lists no node in partition {partition or default}"
        )
        raise UserError(
            f"launcher=slurm, cluster.device=auto: sinfo {said}; set "
            f"launcher.partition to one of Slurm's partitions (sinfo -s lists them), "
            f"or {FIX}"
        )
    return NodeOffer(where, tuple(nodes[n] for n in sorted(nodes)))


def job_partition(
    partition: Optional[str], sbatch_extra: Sequence[str], env: Mapping[str, str]
) -> Optional[str]:
    """The partition sbatch will put the job in: launcher.partition, else a --partition/-p
    of launcher.sbatch_extra, else $SBATCH_PARTITION; None: Slurm's default."""
    if partition:
        return str(partition)
    extra = [str(e) for e in sbatch_extra]
    for k, option in enumerate(extra):
        for flag in ("--partition=", "-p"):
            if option.startswith(flag) and option != flag:
                return option[len(flag) :].lstrip("=") or None
        if option in ("--partition", "-p") and k + 1 < len(extra):
            return extra[k + 1]
    return env.get("SBATCH_PARTITION") or None


_ANSWERS: dict[Optional[str], Union[NodeOffer, UserError]] = {}  # one sinfo per partition


def read_offer(partition: Optional[str]) -> NodeOffer:
    """The partition's nodes as sinfo says; UserError (one line) when sinfo cannot say. Asked
    once per command (a sweep plans many points), its failure too."""
    if partition not in _ANSWERS:
        try:
            _ANSWERS[partition] = _ask_sinfo(partition)
        except UserError as exc:
            _ANSWERS[partition] = exc
    answer = _ANSWERS[partition]
    if isinstance(answer, UserError):
        raise UserError(str(answer))
    return answer


def _ask_sinfo(partition: Optional[str]) -> NodeOffer:
    argv = ["sinfo", "-h", "-N", "-o", SINFO_FORMAT, *(("-p", partition) if partition else ())]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)
    except FileNotFoundError:
        raise UserError(
            "launcher=slurm, cluster.device=auto reads the partition's GPUs with "
            f"sinfo, which is not on PATH here; {FIX}"
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError(
            f"launcher=slurm, cluster.device=auto: sinfo did not answer within "
            f"{SINFO_TIMEOUT_S:.0f} s (is slurmctld up?); {FIX}"
        ) from None
    if out.returncode != 0:
        lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip()]
        raise UserError(
            f"launcher=slurm, cluster.device=auto: sinfo failed "
            f"({lines[-1] if lines else f'exit code {out.returncode}'}); {FIX}"
        )
    return parse_sinfo(out.stdout, partition)
