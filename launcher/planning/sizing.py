"""Backends written without dims (`rollout.backend=vllm`, the default) sized for the machine.

What a new user meets first must run on what the machine has:
- no GPU (cpu): one rollout server and two training ranks, the CPU demo (`vllm:d1`, `fsdp:d2`);
- one GPU: rollout and actor collocated on it, each releasing its memory between phases;
- more: the GPUs other engines leave free, split between rollout (the first half, rounded
  down) and actor (the rest), disaggregated; with none left, a bare engine shares the other
  one's GPUs (collocated, releasing memory between phases).
A bare engine that `cluster.component_placement` places gets one instance or rank per placed
GPU. critic, ref and teacher written bare take the actor's world size, so they share its GPUs.
Pure: the caller gives the GPU count and parses the texts this returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from launcher.spec import registry
from launcher.spec.alloc import parse_backend
from launcher.spec.builtins import POLICY, PRIMARY
from launcher.spec.errors import ConfigError

CPU_SIZE = {registry.SERVE: 1, registry.TRAIN: 2}  # the demo: 1 vLLM server, 2 ranks


@dataclass(frozen=True)
class Sizing:
    """The backend texts with dims filled in, the placement and releases the sizes need, and
    one line that says what was chosen (for the plan's notes)."""

    texts: dict[str, Optional[str]]
    placement: dict[str, str] = field(default_factory=dict)
    release: tuple[str, ...] = ()  # engines that must release memory between phases
    note: str = ""


@dataclass(frozen=True)
class Dims:
    """How a world size becomes dims: each engine's tp, pp and cp where asked for
    (`<engine>.parallel`, or a serving process map's GPUs per process), else one instance or
    rank per GPU (`vllm:d4`)."""

    parallel: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)  # tp, pp, cp
    said: Mapping[str, str] = field(default_factory=dict)  # engine -> the keys that asked

    def group(self, name: str) -> int:
        tp, pp, cp = self.parallel.get(name, (1, 1, 1))
        return tp * pp * cp

    def text(self, name: str, backend: str, world: int) -> str:
        tp, pp, cp = self.parallel.get(name, (1, 1, 1))
        unit = tp * pp * cp
        if world % unit:
            raise ConfigError(
                f"{self.said[name]}: {unit} GPUs per copy do not divide the "
                f"{world} GPU(s) {name} gets; place it on a multiple of {unit}"
            )
        parts = [f"d{world // unit}"] + [
            f"{a}{n}" for a, n in (("t", tp), ("p", pp), ("c", cp)) if n > 1
        ]
        return f"{backend}:{''.join(parts)}"


def _world(text: Optional[str]) -> int:
    return 0 if not text else parse_backend(text).world_size


def size(
    texts: Mapping[str, Optional[str]],
    placement: Mapping[str, Optional[str]],
    device: str,
    total_gpus: int,
    placed_count: Callable[[str], int],
    dims: Dims = Dims(),
) -> Sizing:
    """Fill the dims of bare backend names in `texts` (engine -> text; "" inherits the actor).

    total_gpus: the cluster's GPUs (cuda). placed_count(text): how many GPUs a placement text
    names. Engines whose texts have dims are left as they are.
    """
    from launcher.planning.resolve import is_bare

    bare = [n for n, t in texts.items() if is_bare(t)]
    if not bare:
        return Sizing(dict(texts))
    out = dict(texts)
    kind = {n: registry.backend_facts(str(texts[n]).strip()).kind for n in bare}
    placed = {
        n.strip(): str(v) for k, v in placement.items() if v is not None for n in str(k).split(",")
    }
    for name in [n for n in bare if n in placed]:
        out[name] = dims.text(name, str(texts[name]).strip(), placed_count(placed[name]))
    todo = [n for n in bare if n not in placed and n in (PRIMARY, POLICY)]
    extra = Sizing(out)
    if device == "cpu":
        for name in todo:
            out[name] = dims.text(
                name, str(texts[name]).strip(), CPU_SIZE[kind[name]] * dims.group(name)
            )
        note = "sized for cpu (no GPU): " if todo else ""
    else:
        extra = _share_gpus(out, todo, total_gpus, dims) if todo else Sizing(out)  # all placed
        out = extra.texts
        note = f"sized for {total_gpus} GPU(s): " if todo else ""
    actor_world = _world(out.get(POLICY)) or 1
    for name in [n for n in bare if n not in placed and n not in (PRIMARY, POLICY)]:
        out[name] = dims.text(name, str(texts[name]).strip(), actor_world)
    sized = [f"{n}.backend={out[n]}" for n in bare]
    return Sizing(out, extra.placement, extra.release, (note or "sized: ") + " ".join(sized))


def _share_gpus(texts: dict[str, Optional[str]], todo: list[str], total: int, dims: Dims) -> Sizing:
    """Size bare rollout/actor into the GPUs the other engines leave free (see module doc)."""
    from launcher.planning.resolve import is_bare

    out = dict(texts)
    # a bare critic/ref/teacher takes the actor's world size later: it shares the actor's GPUs
    fixed = {n: _world(t) for n, t in texts.items() if n not in todo and t and not is_bare(t)}
    actor_world = fixed.get(POLICY)
    need = sum(
        w
        for n, w in fixed.items()
        if n in (PRIMARY, POLICY) or actor_world is None or w != actor_world
    )
    free = total - need
    names = {n: str(texts[n]).strip() for n in todo}
    if len(todo) == 2 and free >= 2:
        out[PRIMARY] = dims.text(PRIMARY, names[PRIMARY], free // 2)
        out[POLICY] = dims.text(POLICY, names[POLICY], free - free // 2)
        return Sizing(out)
    if len(todo) == 1 and free >= 1:
        out[todo[0]] = dims.text(todo[0], names[todo[0]], free)
        return Sizing(out)
    if len(todo) == 2:  # one GPU (or none) left: both on it, taking turns
        out[PRIMARY] = dims.text(PRIMARY, names[PRIMARY], 1)
        out[POLICY] = dims.text(POLICY, names[POLICY], 1)
        first = max(0, min(need, total - 1))
        return Sizing(out, {f"{POLICY},{PRIMARY}": str(first)}, (PRIMARY, POLICY))
    name = todo[0]  # no GPU left: share the other engine's GPUs
    other = POLICY if name == PRIMARY else PRIMARY
    world = max(1, fixed.get(other, 1))
    out[name] = dims.text(name, names[name], world)
    gpus = "0" if world == 1 else f"0-{world - 1}"  # where the default places the other
    return Sizing(out, {f"{POLICY},{PRIMARY}": gpus}, (name, other))
