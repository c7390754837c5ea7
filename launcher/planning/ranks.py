"""All rank arithmetic in one place: training ranks, inference instances, weight-sync pairs.

Like Megatron-core's RankGenerator, one formula turns a rank into grid coordinates, with the
axis order named as a string (ORDER, first axis fastest), and every group is derived from those
coordinates rather than built by hand. Ranks follow the engine's GPU list in order, so whoever
places GPUs controls which ranks share a node.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping, Optional, Sequence

from launcher.spec.alloc import ModelAllocation
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import PlacementError
from launcher.spec.gpuset import format_gpu_set
from launcher.spec.plan import ComponentPlan, Instance, Rank, SyncPair, WeightSync

ORDER = "tp-cp-dp-pp"  # Megatron's default 'tp-cp-ep-dp-pp' without ep (experts re-use the grid)
AXES = ("tp", "cp", "dp", "pp")


def grid(sizes: Mapping[str, int], order: str = ORDER) -> dict[str, list[int]]:
    """The coordinates of every rank 0..world-1, per axis: the first axis in `order` varies
    fastest, so rank r has axis coordinate (r // stride) % size (the one formula)."""
    world = 1
    for axis in order.split("-"):
        world *= sizes[axis]
    coords: dict[str, list[int]] = {}
    stride = 1
    for axis in order.split("-"):
        size = sizes[axis]
        coords[axis] = [(r // stride) % size for r in range(world)]
        stride *= size
    return coords


def _members(coords: Mapping[str, Sequence[int]], axis: str) -> list[list[int]]:
    """Positions that share every coordinate but `axis`, ordered by their first position."""
    if axis not in AXES:
        raise ValueError(f"axis {axis!r}: expected one of {', '.join(AXES)}")
    # key: the rank with `axis` set to 0, by the same formula as grid (ints, not tuples: cheap)
    keys = [0] * len(coords[axis])
    stride = 1
    for other in ORDER.split("-"):
        if other != axis:
            keys = [k + c * stride for k, c in zip(keys, coords[other])]
        stride *= max(coords[other], default=0) + 1
    found: dict[int, list[int]] = {}
    for position, key in enumerate(keys):
        found.setdefault(key, []).append(position)
    return list(found.values())


def groups(ranks: Sequence[Rank], axis: str) -> list[list[int]]:
    """Rank ids that differ only along `axis` (tp, cp, dp or pp), ordered by their first rank."""
    coords = {a: [getattr(r, a) for r in ranks] for a in AXES}
    return [[ranks[i].rank for i in members] for members in _members(coords, axis)]


def _sizes(alloc: ModelAllocation) -> dict[str, int]:
    return {"tp": alloc.tp, "cp": alloc.cp, "dp": alloc.dp, "pp": alloc.pp}


def _check_count(name: str, alloc: ModelAllocation, gpus: Sequence[int]) -> None:
    if len(gpus) != alloc.world_size:
        raise PlacementError(
            f"{name} {alloc} has world size {alloc.world_size} but was given {len(gpus)} GPUs "
            f"({format_gpu_set(gpus)}); give it {alloc.world_size} GPUs or change {name}.backend"
        )


def _node_words(nodes: Sequence[int], cluster: ClusterSpec) -> str:
    g = cluster.gpus_per_node
    return ", ".join(f"node {n} = GPUs {n * g}-{n * g + g - 1}" for n in nodes)


def check_training(
    name: str, alloc: ModelAllocation, gpus: Sequence[int], cluster: ClusterSpec
) -> dict[str, list[int]]:
    """The rank grid, after checking that no tp group crosses a node (PlacementError)."""
    _check_count(name, alloc, gpus)
    coords = grid(_sizes(alloc))
    if alloc.tp == 1:
        return coords
    g = cluster.gpus_per_node
    for index, members in enumerate(_members(coords, "tp")):
        nodes = sorted({gpus[r] // g for r in members})
        if len(nodes) > 1:
            fix = (
                f"use t<={g} in {name}.backend"
                if alloc.tp > g
                else f"place {name} so each block of {alloc.tp} GPUs lies within one node"
            )
            raise PlacementError(
                f"{name} {alloc} tp group {index} (ranks {format_gpu_set(members)}) gets "
                f"GPUs {format_gpu_set(gpus[r] for r in members)}, across "
                f"{_node_words(nodes, cluster)}: a tp group must stay on one node ({fix})"
            )
    return coords


def training_ranks(
    name: str, alloc: ModelAllocation, gpus: Sequence[int], cluster: ClusterSpec
) -> tuple[Rank, ...]:
    """Rank r runs on gpus[r] at grid coordinates r; a tp group across nodes is an error."""
    coords = check_training(name, alloc, gpus, cluster)
    g = cluster.gpus_per_node
    return tuple(
        Rank(r, gpu, gpu // g, gpu % g, dp, tp, pp, cp)
        for r, (gpu, dp, tp, pp, cp) in enumerate(
            zip(gpus, coords["dp"], coords["tp"], coords["pp"], coords["cp"])
        )
    )


def check_inference(
    name: str, alloc: ModelAllocation, gpus: Sequence[int], cluster: ClusterSpec
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(gpus, nodes) per instance, after checking each stays on one node or fills whole nodes
    from a node boundary (PlacementError): SGLang and vLLM split a multi-node instance evenly
    over `--nnodes`, starting from local GPU 0."""
    _check_count(name, alloc, gpus)
    size = alloc.tp * alloc.pp
    g = cluster.gpus_per_node
    out = []
    for index in range(len(gpus) // size):
        block = tuple(gpus[index * size : (index + 1) * size])
        nodes = tuple(sorted({gpu // g for gpu in block}))
        if len(nodes) > 1 and not (
            block[0] % g == 0 and size % g == 0 and block == tuple(range(block[0], block[0] + size))
        ):
            if size > g and size % g:
                fix = f"use t*p<={g} or a multiple of {g} in {name}.backend"
            elif size <= g:
                fix = f"place {name} so each block of {size} GPUs lies within one node"
            else:
                fix = (
                    f"place {name} so each block of {size} GPUs starts at a node "
                    "boundary and fills whole nodes"
                )
            raise PlacementError(
                f"{name} {alloc} instance {index} gets GPUs {format_gpu_set(block)}, across "
                f"{_node_words(nodes, cluster)}: an instance ({size} GPUs) must stay on one "
                f"node or fill whole nodes from a node boundary ({fix})"
            )
        out.append((block, nodes))
    return out


def inference_instances(
    name: str, alloc: ModelAllocation, gpus: Sequence[int], cluster: ClusterSpec
) -> tuple[Instance, ...]:
    """Instance i takes the i-th block of t*p GPUs of the engine's list (see check_inference)."""
    return tuple(
        Instance(index, block, nodes)
        for index, (block, nodes) in enumerate(check_inference(name, alloc, gpus, cluster))
    )


def fed_order(
    alloc: ModelAllocation, gpus: Sequence[int], feeder: ComponentPlan
) -> tuple[int, ...]:
    """A serving engine's GPUs in instance order. On exactly the GPUs of the trainer that
    feeds it, with the trainer's tp a multiple s>1 of its own (pp 1): in each block of
    s*t GPUs, instance j takes every s-th GPU from the j-th, so each of the trainer's tp groups
    feeds whole instances, each instance one shard from every s consecutive tp ranks (tp 4
    into tp 2 on GPUs 0-3: instances 0,2 and 1,3), and the weight update needs no reshuffle.
    Otherwise the GPUs as placed: instance i takes the i-th block."""
    t, trainer_tp = alloc.tp, feeder.alloc.tp
    stride = trainer_tp // t
    if alloc.pp != 1 or stride < 2 or trainer_tp % t or tuple(gpus) != feeder.gpus:
        return tuple(gpus)
    span = t * stride
    if len(gpus) % span:
        return tuple(gpus)
    return tuple(
        gpus[block + j + k * stride]
        for block in range(0, len(gpus), span)
        for j in range(stride)
        for k in range(t)
    )


def component_plan(
    name: str,
    alloc: ModelAllocation,
    gpus: Sequence[int],
    cluster: ClusterSpec,
    inherited_from: Optional[str] = None,
    feeder: Optional[ComponentPlan] = None,
) -> ComponentPlan:
    """An engine's plan entry: instances for inference backends (in `fed_order` of the
    trainer that feeds it), ranks for training ones."""
    gpus = tuple(gpus)
    if alloc.is_inference:
        gpus = gpus if feeder is None else fed_order(alloc, gpus, feeder)
        return ComponentPlan(
            name,
            alloc,
            inherited_from,
            gpus,
            instances=inference_instances(name, alloc, gpus, cluster),
        )
    return ComponentPlan(
        name, alloc, inherited_from, gpus, ranks=training_ranks(name, alloc, gpus, cluster)
    )


# ----------------------------------------------------------------------------- weight sync
def weight_sync(actor: ComponentPlan, rollout: ComponentPlan, cluster: ClusterSpec) -> WeightSync:
    """Which actor rank feeds which rollout shard (instance, tp), for every shard.

    `tp` is the shard's index within its instance's t*p block (pp_rank*t + tp_rank, SGLang's
    GPU order), so pp>1 instances are covered shard by shard too.
    1. A shard on a GPU that also runs an actor rank is fed by that rank (same-GPU copy), for
       any ratio of tp sizes: collocated plans are all of this kind.
    2. Every other shard goes to the least-loaded actor ranks, level by level (so loads differ
       by at most one beyond step 1), preferring a rank on the shard's node at each level.
    Hybrid plans get step 1 where GPUs overlap and step 2 for the rest.
    A pair says who sends to whom; a rank holding only part of the weights (fsdp shards,
    tp/pp slices) gathers the full tensors over its own groups first.
    """
    rank_on_gpu = {r.gpu: r.rank for r in actor.ranks}
    shards = [(inst.index, k, gpu) for inst in rollout.instances for k, gpu in enumerate(inst.gpus)]
    load = [0] * len(actor.ranks)
    sender = [-1] * len(shards)  # shard position -> actor rank
    remote: list[tuple[int, int]] = []  # (shard position, node)
    for position, (_, _, gpu) in enumerate(shards):
        own = rank_on_gpu.get(gpu)
        if own is None:
            remote.append((position, cluster.node_of(gpu)))
        else:
            sender[position] = own
            load[own] += 1
    _spread(remote, actor.ranks, load, sender)
    pairs = tuple(SyncPair(rank, index, k) for rank, (index, k, _) in zip(sender, shards))
    return WeightSync(src=actor.name, dst=rollout.name, pairs=pairs)


def _spread(
    shards: list[tuple[int, int]], ranks: Sequence[Rank], load: list[int], sender: list[int]
) -> None:
    """Water-fill `shards` (position, node) onto `ranks`, writing sender[position]: each round
    gives one shard to each rank at the lowest load, same-node shards first."""
    if not shards:
        return
    if not ranks:
        raise PlacementError("weight sync: the actor has no ranks to feed the rollout from")
    waiting: dict[int, deque[int]] = {}  # node -> indices into shards, in order
    for i, (_, node) in enumerate(shards):
        waiting.setdefault(node, deque()).append(i)
    taken = [False] * len(shards)
    cursor = 0  # next shard index for cross-node fills
    left = len(shards)
    while left:
        low = min(load)
        pool = [r for r in ranks if load[r.rank] == low]
        unpaired = []
        for r in pool:  # same-node shards first
            queue = waiting.get(r.node)
            while queue and taken[queue[0]]:
                queue.popleft()
            if queue and left:
                i = queue.popleft()
                taken[i] = True
                left -= 1
                sender[shards[i][0]] = r.rank
                load[r.rank] += 1
            else:
                unpaired.append(r)
        for r in unpaired:  # then any shard, in order
            if not left:
                break
            while taken[cursor]:
                cursor += 1
            taken[cursor] = True
            left -= 1
            sender[shards[cursor][0]] = r.rank
            load[r.rank] += 1
