"""cluster.device=auto under a scheduler: plan for the nodes the job will get (pure).

On a Slurm login node "auto" cannot look at this machine (it usually has no GPU): the runner
reads what the job's partition offers (a NodeOffer: each node's GPU count and gres type) and
this module fills in the device, the GPUs per node and the GPU type (for the memory table)
from it. What the user set stays, with a note where it differs from the nodes; a cluster the
nodes cannot hold is one ConfigError naming the partition and the numbers.
"""

from __future__ import annotations

import dataclasses

from launcher.config.schema import ClusterConfig
from launcher.spec.cluster import ClusterSpec, NodeOffer, gpu_name_key
from launcher.spec.errors import ConfigError
from launcher.spec.limits import MAX_GPUS_PER_NODE

CHOOSE = "choose another partition (launcher.partition)"


def with_offer(cluster: ClusterConfig, offer: NodeOffer) -> tuple[ClusterConfig, tuple[str, ...]]:
    """`cluster` (device auto) with device, gpus_per_node and gpu_type from `offer`, and the
    notes that say so. GPUs per node, unless given: the most that cluster.num_nodes of the
    nodes all have (every node has them on a partition of one kind). An offer that could not
    be read leaves `cluster` as it is (planned for this machine), with a note saying why."""
    if offer.unread is not None:
        return cluster, (
            f"cluster.device=auto: {offer.unread}; so the plan is for this "
            "machine's GPUs, not the cluster's (set cluster.device and "
            "cluster.gpus_per_node, or start the cluster first)",
        )
    counts = sorted((n.gpus for n in offer.nodes if n.gpus > 0), reverse=True)
    given = cluster.gpus_per_node
    if not counts:
        if given:
            raise ConfigError(
                f"cluster.gpus_per_node={given}: the nodes of {offer.where} have "
                f"no GPU; {CHOOSE}, or set cluster.device=cpu"
            )
        return (
            dataclasses.replace(cluster, device="cpu"),
            (
                f"cluster.device=auto: {offer.where} has no GPU on its {len(offer.nodes)} "
                "node(s): planning for cpu",
            ),
        )
    wanted = cluster.num_nodes if isinstance(cluster.num_nodes, int) else 1
    found = min(counts[min(max(wanted, 1), len(counts)) - 1], MAX_GPUS_PER_NODE)
    per_node = found if given is None else given
    types = sorted({n.gpu_type for n in offer.holding(max(per_node, 1)) if n.gpu_type})
    gpu_type = cluster.gpu_type
    notes = [
        f"cluster.device=auto: {offer.where} has {len(offer.holding(found))} node(s) "
        f"with {found} GPU(s){' (' + ', '.join(types) + ')' if types else ''}: planning "
        f"for cuda, {per_node} GPU(s) per node"
    ]
    if given is not None and given != found:
        notes.append(
            f"cluster.gpus_per_node={given} as given: the nodes of {offer.where} have {found}"
        )
    if gpu_type is None and len(types) == 1:
        gpu_type = types[0]
    elif gpu_type is None and types:
        notes.append(
            f"{offer.where} has GPUs of several types ({', '.join(types)}): set "
            "cluster.gpu_type (or cluster.gpu_memory_gib) for the memory check"
        )
    elif gpu_type is not None and types and gpu_name_key(gpu_type) not in map(gpu_name_key, types):
        notes.append(
            f"cluster.gpu_type={gpu_type} as given: {offer.where}'s gres says {', '.join(types)}"
        )
    return (
        dataclasses.replace(cluster, device="cuda", gpus_per_node=per_node, gpu_type=gpu_type),
        tuple(notes),
    )


def check_holds(cluster: ClusterSpec, offer: NodeOffer) -> None:
    """ConfigError when the plan's nodes are more than `offer` has: more GPU nodes than it has
    nodes with that many GPUs, or more GPUs per node than any of its nodes has."""
    per_node = cluster.gpus_per_node if cluster.device == "cuda" else 0
    needed = cluster.gpu_nodes
    holding = offer.holding(per_node)
    if len(holding) >= needed:
        return
    most = max((n.gpus for n in offer.nodes), default=0)
    if not holding:
        raise ConfigError(
            f"cluster.gpus_per_node={per_node}: the nodes of {offer.where} have at "
            f"most {most} GPU(s) each; set cluster.gpus_per_node={most} or "
            f"less, or {CHOOSE}"
        )
    kind = f" with {per_node} GPU(s)" if per_node else ""
    raise ConfigError(
        f"cluster.num_nodes={cluster.num_nodes}: the plan needs {needed} "
        f"{'GPU ' if cluster.cpu_nodes else ''}node(s) but {offer.where} has "
        f"{len(holding)}{kind}; set cluster.num_nodes={len(holding) + cluster.cpu_nodes}"
        f" or less, or {CHOOSE}"
    )
