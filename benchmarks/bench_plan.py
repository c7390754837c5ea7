"""Planning at scale: place + rank maps + weight sync + Plan.to_dict, in process
(docs/benchmarks.md).

All five engines on 1024 nodes x 8 GPUs (8192 GPUs: rollout 4096, actor and critic sharing 2048,
ref 1024, teacher 1024), and the same layout scaled down to 128 nodes, measured in one run.
Targets: 1024 nodes <= 100 ms; 1024 nodes / 128 nodes <= 10x (8x the GPUs: linear or better);
the same 1024 nodes plus 100 CPU agent processes a node (102400 processes) <= 2x without them.
The GPU map (terminal and SVG) of the big plan is timed too, for information, and so is the
whole of `areal-launch plan --json` at 1024 nodes in process (compose the Hydra config, resolve,
build every process's command line, dump the JSON): target <= 1 s. And the Ray runner's fit
check of 1024 plan nodes against 1024 Ray nodes (runners/rayjob.fit_problem: it fits, then one
node is short), which tests/test_rayjob.py no longer times: target <= 100 ms, a share of
planning the same nodes.
    .venv/bin/python benchmarks/bench_plan.py [--runs N]
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

from rich.console import Console

from launcher.cli.launch import counted_request, prepare
from launcher.cli.render import render_gpu_map, render_svg
from launcher.planning.components import Worker, worker_plan
from launcher.planning.forms import read_placement
from launcher.planning.placement import place
from launcher.planning.ranks import component_plan, weight_sync
from launcher.runners.rayjob import RayNode, fit_problem, ray_job
from launcher.spec.alloc import parse_backend
from launcher.spec.cluster import ClusterSpec
from launcher.spec.plan import Plan
from launcher.spec.process import ProcessSpec
from launcher.spec.request import LaunchRequest


def specs(nodes: int) -> dict[str, str]:
    """The layout for `nodes` nodes (a multiple of 128): 1/2 rollout, 1/4 actor (+critic),
    1/8 ref, 1/8 teacher."""
    k = nodes // 128
    return {
        "rollout": f"sglang:d{64 * k}t8",
        "actor": f"megatron:d{2 * k}p4t8c4",
        "critic": f"megatron:d{2 * k}p4t8c4",
        "ref": f"fsdp:d{128 * k}",
        "teacher": f"fsdp:d{128 * k}",
    }


AGENT = Worker(name="agent", backend="process", entry="agent.py")


def plan(nodes: int, agents_per_node: int = 0) -> Plan:
    """The layout above; with `agents_per_node`, CPU agent processes on every node too
    (RLinf's `agent: {node_group: node, placement: 0-1023:0-102399}`)."""
    cluster = ClusterSpec(nodes, 8)
    allocs = {name: parse_backend(spec) for name, spec in specs(nodes).items()}
    placed = place(allocs, cluster, {}, {name: True for name in allocs})
    components = {
        name: component_plan(name, alloc, placed.gpus[name], cluster)
        for name, alloc in allocs.items()
    }
    if agents_per_node:
        value = {
            "node_group": "node",
            "placement": f"0-{nodes - 1}:0-{nodes * agents_per_node - 1}",
        }
        components["agent"] = worker_plan(AGENT, read_placement("agent", value, cluster), cluster)
    sync = weight_sync(components["actor"], components["rollout"], cluster)
    return Plan(cluster, placed.mode, components, (sync,), warnings=placed.warnings)


def whole_plan_json(nodes: int) -> int:
    """What `areal-launch plan --json` does for `nodes` nodes, minus printing: its JSON size."""
    overrides = [
        f"cluster.num_nodes={nodes}",
        "cluster.gpus_per_node=8",
        "cluster.device=cuda",
        "launcher.check_memory=off",
    ]
    overrides += [f"{name}.backend={spec}" for name, spec in specs(nodes).items()]
    the_plan, _ = counted_request(prepare(overrides, to_run=False))
    return len(the_plan.to_json())


def timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def reference_loop() -> None:
    """A fixed pure-Python loop: its time shows how busy the machine was during the run."""
    total = 0
    for i in range(1_000_000):
        total += i & 7


def fit_check():
    """fit_problem of a trainer on each of 1024 plan nodes, 8 GPUs each, on 1024 Ray nodes
    (tests/test_rayjob.py): it fits; with one node of 4 GPUs it does not."""
    procs = tuple(
        ProcessSpec(f"a{k}", "actor", "trainer", k, ("sleep", "1"), gpus=tuple(range(8)))
        for k in range(1024)
    )
    request = LaunchRequest("bench", "/runs/bench", "bench", "cuda", 1024, 8, procs)
    job = ray_job(request, "/venv/bin/python", 1.0, "/work", 60.0)
    nodes = [RayNode(f"10.0.{k // 256}.{k % 256}", 8, 4) for k in range(1024)]
    short = nodes[:-1] + [RayNode("10.9.9.9", 4, 4)]

    def check() -> None:
        assert fit_problem(job, nodes, "auto") is None
        assert fit_problem(job, short, "auto") is not None

    return check


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    runs = ap.parse_args().runs
    plan(128).to_dict(), plan(1024).to_dict()  # warm up
    small, big, agents, loop = [], [], [], []
    for _ in range(runs):  # interleaved so load changes hit all alike
        small += timed(lambda: plan(128).to_dict(), 1)
        big += timed(lambda: plan(1024).to_dict(), 1)
        agents += timed(lambda: plan(1024, agents_per_node=100).to_dict(), 1)
        loop += timed(reference_loop, 1)
    s, b = statistics.median(small), statistics.median(big)
    p = plan(1024)
    pairs = len(p.weight_sync[0].pairs)
    print(f"plan 128 nodes x 8   median {s * 1000:7.1f} ms  (min {min(small) * 1000:.1f})")
    print(
        f"plan 1024 nodes x 8  median {b * 1000:7.1f} ms  (min {min(big) * 1000:.1f})  "
        f"target <= 100 ms; {pairs} weight-sync pairs"
    )
    print(f"ratio 1024/128 nodes: {b / s:.2f}x (8x the GPUs; target <= 10x)")
    a = statistics.median(agents)
    print(
        f"plan 1024 nodes + 100 CPU agents a node  median {a * 1000:7.1f} ms  "
        f"(min {min(agents) * 1000:.1f}); ratio to without: {a / b:.2f}x (target <= 2x)"
    )
    print(
        f"reference loop (machine load) median {statistics.median(loop) * 1000:.1f} ms "
        f"(min {min(loop) * 1000:.1f})"
    )
    console = Console(file=io.StringIO(), width=200, color_system=None)
    text = statistics.median(timed(lambda: console.print(render_gpu_map(p)), 5))
    svg = statistics.median(timed(lambda: render_svg(p), 5))
    print(
        f"GPU map of 1024 nodes: terminal {text * 1000:.1f} ms, SVG {svg * 1000:.1f} ms "
        f"({len(render_svg(p)) // 1024} KiB)"
    )
    fit = statistics.median(timed(fit_check(), 5))
    print(f"Ray fit check, 1024 nodes: {fit * 1000:.1f} ms = {fit / b:.2f}x planning them")
    size = whole_plan_json(1024)
    whole = statistics.median(timed(lambda: whole_plan_json(1024), 3))
    print(
        f"plan --json of 1024 nodes (compose, resolve, {len(p.components)} engines' command "
        f"lines, JSON {size // 1024} KiB): {whole * 1000:.0f} ms (target <= 1 s)"
    )


if __name__ == "__main__":
    main()
