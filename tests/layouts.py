"""Hypothesis strategies for placement and rank tests: random clusters and engine layouts.

Every engine's tp group or instance size divides an aligned block of `unit` GPUs (unit divides
gpus_per_node), world sizes are whole blocks, and explicit placements are unions of blocks, so
a layout either fits or fails only for lack of GPUs (`Layout.fits` says which), except rollout
instances that fill whole nodes, which are drawn only for default placements.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from launcher.planning.placement import place
from launcher.planning.ranks import component_plan, weight_sync
from launcher.spec.alloc import ModelAllocation
from launcher.spec.cluster import ClusterSpec
from launcher.spec.plan import Plan

TRAINERS = ("actor", "critic", "ref", "teacher")


@dataclass(frozen=True)
class Layout:
    cluster: ClusterSpec
    allocs: dict[str, ModelAllocation]
    placement: dict[str, str]  # as the user writes it: keys may join engines ("actor,ref")
    explicit: dict[str, tuple[int, ...]]  # engine -> the GPUs its placement names

    @property
    def fits(self) -> bool:
        """Whether the default engines find enough free GPUs (the only way these can fail)."""
        taken = {g for s in self.explicit.values() for g in s}
        need = sum(
            a.world_size
            for n, a in self.allocs.items()
            if n not in self.explicit and not self.shares_actor(n)
        )
        return need <= self.cluster.total_gpus - len(taken)

    def shares_actor(self, name: str) -> bool:
        return (
            name in ("critic", "ref", "teacher")
            and name not in self.explicit
            and "actor" in self.allocs
            and self.allocs[name].world_size == self.allocs["actor"].world_size
        )


def _split(draw, n: int, parts: int) -> list[int]:
    """n as a product of `parts` factors, drawn at random."""
    out = []
    for _ in range(parts - 1):
        f = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
        out.append(f)
        n //= f
    return out + [n]


@st.composite
def layouts(draw, max_nodes: int = 4) -> Layout:
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    cluster = ClusterSpec(draw(st.integers(1, max_nodes)), gpn)
    unit = draw(st.sampled_from([u for u in (1, 2, 4, 8) if u <= gpn]))
    blocks = cluster.total_gpus // unit
    allocs: dict[str, ModelAllocation] = {}
    # sizes are drawn within the GPUs left, except now and then, to see the shortage error
    overcommit = draw(st.integers(0, 3)) == 0
    left = blocks
    whole_nodes = draw(st.booleans()) and cluster.num_nodes > 1
    if whole_nodes:  # rollout instances span whole nodes
        span = gpn * draw(st.integers(1, cluster.num_nodes - (not overcommit)))
        t, p = _split(draw, span, 2)
        dp = draw(st.integers(1, (cluster.total_gpus - (not overcommit) * unit) // span))
        allocs["rollout"] = ModelAllocation(
            draw(st.sampled_from(["sglang", "vllm"])), dp=dp, tp=t, pp=p
        )
    else:
        t, p = _split(draw, draw(st.sampled_from([d for d in (1, 2, 4, 8) if d <= unit])), 2)
        size = draw(st.integers(1, blocks if overcommit else max(1, blocks - 1))) * unit
        allocs["rollout"] = ModelAllocation(
            draw(st.sampled_from(["sglang", "vllm"])), dp=size // (t * p), tp=t, pp=p
        )
    left -= allocs["rollout"].world_size // unit
    for name in TRAINERS:
        if name != "actor" and not draw(st.booleans()):
            continue
        if name != "actor" and left < 1 and not overcommit:
            allocs[name] = allocs["actor"]  # only room on the actor's GPUs
            continue
        world = draw(st.integers(1, blocks if overcommit else max(1, left))) * unit
        if name == "actor" or world != allocs["actor"].world_size:
            left -= world // unit
        tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if d <= unit]))
        backend = draw(st.sampled_from(["fsdp", "megatron"]))
        dp, pp, cp = _split(draw, world // tp, 3)
        if backend == "fsdp":
            dp, pp = dp * pp, 1
        allocs[name] = ModelAllocation(backend, dp=dp, tp=tp, pp=pp, cp=cp)
    explicit: dict[str, tuple[int, ...]] = {}
    placement: dict[str, str] = {}
    if not whole_nodes:
        for name, alloc in allocs.items():
            if alloc.world_size > cluster.total_gpus or not draw(st.booleans()):
                continue
            picked = sorted(
                draw(
                    st.lists(
                        st.integers(0, blocks - 1),
                        unique=True,
                        min_size=alloc.world_size // unit,
                        max_size=alloc.world_size // unit,
                    )
                )
            )
            explicit[name] = tuple(g for b in picked for g in range(b * unit, (b + 1) * unit))
        for name, gpus in explicit.items():
            text = ",".join(str(g) for g in gpus)
            if draw(st.booleans()):  # write it as a range where it is one
                text = (
                    "all"
                    if len(gpus) == cluster.total_gpus
                    else f"{gpus[0]}-{gpus[-1]}"
                    if gpus[-1] - gpus[0] + 1 == len(gpus)
                    else text
                )
            placement[name] = text
        # engines with the same GPUs may be written as one key ("actor,ref")
        if draw(st.booleans()):
            joined: dict[str, list[str]] = {}
            for name, text in placement.items():
                joined.setdefault(",".join(map(str, explicit[name])), []).append(name)
            placement = {",".join(names): placement[names[0]] for names in joined.values()}
    return Layout(cluster, allocs, placement, explicit)


def plan_of(layout: Layout, offload: dict[str, bool] | None = None) -> Plan:
    """Place, map ranks and weight sync, as launcher.planning.build does."""
    placed = place(layout.allocs, layout.cluster, layout.placement, offload)
    components = {
        name: component_plan(name, alloc, placed.gpus[name], layout.cluster)
        for name, alloc in layout.allocs.items()
    }
    syncs = (weight_sync(components["actor"], components["rollout"], layout.cluster),)
    return Plan(layout.cluster, placed.mode, components, syncs, warnings=placed.warnings)


def build(
    allocs: dict[str, ModelAllocation],
    cluster: ClusterSpec,
    placement: dict[str, str] | None = None,
    offload: dict[str, bool] | None = None,
) -> Plan:
    """A plan from plain values (no config), for examples."""
    return plan_of(Layout(cluster, allocs, placement or {}, {}), offload)
