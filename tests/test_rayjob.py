"""What the Ray runner executes, as data (rayjob.py, pure), and what it refuses before it ever
talks to a cluster. The runs themselves, on a real Ray cluster, are tests/test_ray.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from launcher.cli.launch import counted_request, prepare
from launcher.config.schema import ClusterConfig
from launcher.planning.offer import with_offer
from launcher.runners.rayjob import (
    GIB,
    HEAD,
    RayJob,
    RayNode,
    dry_run_text,
    entrypoint,
    fit_problem,
    head_note,
    ray_job,
    ray_offer,
)
from launcher.spec.process import ProcessSpec
from launcher.spec.request import EngineAsk, LaunchRequest
from tests.areal_launch import one_error_line, run
from tests.hand_requests import request_for

RUN = "/runs/exp/trial"
PY = "/venv/bin/python"


def proc(name: str, role: str, node: int, gpus: tuple[int, ...] = ()) -> ProcessSpec:
    return ProcessSpec(
        name,
        "rollout" if role == "server" else "actor",
        role,
        node,
        ("sleep", "1"),
        env={"HF_TOKEN": "hf_secret"},
        gpus=gpus,
    )


def job_of(procs, device="cuda", cpus=1.0, num_nodes=2) -> RayJob:
    request = request_for(RUN, procs, device=device, num_nodes=num_nodes)
    return ray_job(request, PY, cpus, "/work", 60.0)


def test_bundle_k_asks_for_the_gpus_plan_node_k_uses_and_the_actors_cpus():
    job = job_of(
        [
            proc("rollout-0", "server", 0, (0, 1)),
            proc("actor-0", "trainer", 0, (1, 2)),
            proc("actor-1", "trainer", 1, (0, 1, 2, 3, 4)),
        ],
        cpus=2,
    )
    assert job.bundles == ({"CPU": 2.0, "GPU": 3.0}, {"CPU": 2.0, "GPU": 5.0})
    assert (job.gpus(0), job.gpus(1), job.cpus(1)) == (3, 5, 2.0)


def test_a_cpu_plan_asks_ray_for_cpus_only():
    job = job_of(
        [proc("rollout-0", "server", 0, (0,)), proc("actor-0", "trainer", 1, (0, 1))], device="cpu"
    )
    assert job.bundles == ({"CPU": 1.0}, {"CPU": 1.0})


def test_a_plan_node_without_processes_still_gets_its_own_ray_node():
    job = job_of(
        [proc("rollout-0", "server", 0, (0,)), proc("actor-0", "trainer", 2, (0,))], num_nodes=3
    )
    assert len(job.bundles) == 3 and job.bundles[1] == {"CPU": 1.0}


def test_each_node_runs_its_supervisor_on_the_request_with_every_nodes_address():
    job = job_of([proc("actor-0", "trainer", 0, (0,)), proc("actor-1", "trainer", 1, (0,))])
    assert job.node_argv(1, ["10.0.0.7", "10.0.0.9"]) == [
        PY,
        "-m",
        "launcher.node.agent",
        f"{RUN}/request.json",
        "--node",
        "1",
        "--hosts",
        "10.0.0.7,10.0.0.9",
    ]
    assert job.name == f"areal-{job.run_id}"
    assert RayJob.from_dict(json.loads(json.dumps(job.to_dict())), job.request) == job
    assert entrypoint(job) == [PY, "-m", "launcher.runners.ray", "request.json", "ray-job.json"]


def test_dry_run_text_shows_bundles_node_commands_and_the_request_with_secrets_masked():
    procs = [proc("rollout-0", "server", 0, (0, 1)), proc("actor-1", "trainer", 1, (0,))]
    request = request_for(RUN, procs)
    job = ray_job(request, PY, 1.0, "/work", 60.0)
    text = dry_run_text(job, "auto", None)
    assert (
        'bundle 0: {"CPU": 1.0, "GPU": 2.0}' in text
        and 'bundle 1: {"CPU": 1.0, "GPU": 1.0}' in text
    )
    assert (
        f"node 1: {PY} -m launcher.node.agent {RUN}/request.json --node 1 --hosts HOST0,HOST1"
    ) in text
    shown = json.loads(text.split("(secrets masked):\n", 1)[1])
    assert shown["processes"][0]["env"]["HF_TOKEN"] != "hf_secret"
    assert "hf_secret" not in text
    detached = dry_run_text(job, "auto", entrypoint(job))
    assert f"submission id {job.name}" in detached
    assert f"{PY} -m launcher.runners.ray request.json ray-job.json" in detached


# ----------------------------------------------------------------------------- fit
NODES = [RayNode("127.0.0.2", 8, 2), RayNode("127.0.0.3", 4, 2)]


def test_a_plan_that_fits_distinct_nodes_is_accepted_whatever_the_node_order():
    assert (
        fit_problem(
            job_of([proc("a", "trainer", 0, (0,)), proc("b", "trainer", 1, tuple(range(8)))]),
            NODES,
            "auto",
        )
        is None
    )


def test_more_plan_nodes_than_ray_nodes_is_refused_naming_both_counts_and_a_fix():
    job = job_of([proc(f"a{k}", "trainer", k, (0,)) for k in range(3)], num_nodes=3)
    problem = fit_problem(job, NODES, "launcher.address=127.0.0.2:6379")
    assert problem is not None
    assert "needs 3 Ray nodes" in problem and "has 2 alive" in problem
    assert "cluster.num_nodes=2" in problem and "127.0.0.3: 4 GPU, 2 CPU" in problem
    assert "(launcher.address=127.0.0.2:6379)" in problem


def test_a_plan_node_bigger_than_any_ray_node_is_refused():
    problem = fit_problem(job_of([proc("a", "trainer", 0, tuple(range(9)))]), NODES, "auto")
    assert problem is not None
    assert "plan node 0 needs 9 GPU, 1 CPU" in problem and "at most 8" in problem


def test_two_big_plan_nodes_cannot_share_the_one_big_ray_node():
    job = job_of(
        [proc("a", "trainer", 0, tuple(range(8))), proc("b", "trainer", 1, tuple(range(8)))]
    )
    problem = fit_problem(job, NODES, "auto")
    assert problem is not None and "do not fit on distinct nodes" in problem


def test_cpus_count_too():
    assert fit_problem(job_of([proc("a", "trainer", 0, (0,))], cpus=4), NODES, "auto")
    few_cpus = [RayNode("10.0.0.1", 8, 1), RayNode("10.0.0.2", 8, 4), RayNode("10.0.0.3", 8, 4)]
    two = job_of([proc("a", "trainer", 0, (0,)), proc("b", "trainer", 1, (0,))], cpus=2)
    assert fit_problem(two, few_cpus, "auto") is None  # the two nodes with the CPUs
    three = job_of([proc(f"a{k}", "trainer", k, (0,)) for k in range(3)], cpus=2, num_nodes=3)
    assert "do not fit on distinct nodes" in str(fit_problem(three, few_cpus, "auto"))


def test_the_engines_cpu_and_memory_asks_count_in_the_fit():
    """scheduling_spec's cpu and mem are per GPU of the engine's processes, on their node."""
    request = dataclasses.replace(
        request_for(
            RUN, [proc("rollout-0", "server", 0, (0,)), proc("actor-0", "trainer", 1, (0, 1))]
        ),
        asks={"actor": EngineAsk(cpu=1, mem_gib=40)},
    )
    assert LaunchRequest.from_dict(json.loads(request.to_json())) == request  # the nodes read it
    job = ray_job(request, PY, 1.0, "/work", 60.0)
    assert job.bundles == ({"CPU": 1.0, "GPU": 1.0}, {"CPU": 3.0, "GPU": 2.0, "memory": 80 * GIB})
    roomy = [
        RayNode("10.0.0.1", 8, 4, {"memory": 100 * GIB}),
        RayNode("10.0.0.2", 8, 4, {"memory": 10 * GIB}),
    ]
    assert fit_problem(job, roomy, "auto") is None
    small = [RayNode(n.ip, 8, 4, {"memory": 60 * GIB}) for n in roomy]
    problem = fit_problem(job, small, "auto")
    assert problem is not None and "plan node 1 needs 80 GiB memory, 2 GPU, 3 CPU" in problem
    assert "60 GiB memory" in problem and "scheduling_spec" in problem


@pytest.mark.timeout(60)  # a search over every assignment would not end; bench_plan.py times it
def test_the_fit_check_of_a_thousand_nodes_finds_the_one_node_that_is_short():
    job = job_of(
        [proc(f"a{k}", "trainer", k, tuple(range(8))) for k in range(1024)], num_nodes=1024
    )
    nodes = [RayNode(f"10.0.{k // 256}.{k % 256}", 8, 4) for k in range(1024)]
    assert fit_problem(job, nodes, "auto") is None
    assert fit_problem(job, nodes[:-1] + [RayNode("10.9.9.9", 4, 4)], "auto") is not None


# ----------------------------------------------------------------------------- node env
def node_env_of(initial: dict[str, str], set_later: dict[str, str], gpus: list[str]) -> dict:
    """node_env in a process started with `initial` whose Ray-like code then set `set_later`."""
    code = (
        "import json, os, sys; os.environ.update(json.loads(sys.argv[1])); "
        "from launcher.runners.raydriver import node_env; "
        "print(json.dumps(node_env(os.environ, json.loads(sys.argv[2]))))"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(set_later), json.dumps(gpus)],
        env={**base, **initial},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_the_node_supervisor_gets_the_actors_gpus_and_not_rays_own_switches():
    env = node_env_of(
        {},
        {
            "OMP_NUM_THREADS": "1",
            "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
            "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        },
        ["4", "5"],
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert "OMP_NUM_THREADS" not in env  # Ray set it for its worker, after it started
    assert "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES" not in env
    assert env["PYTHONUNBUFFERED"] == "1"


def test_an_omp_setting_the_node_started_with_is_kept():
    assert node_env_of({"OMP_NUM_THREADS": "8"}, {}, [])["OMP_NUM_THREADS"] == "8"


# ----------------------------------------------------------------------------- refusals
CPU_RUN = [
    "launcher=ray",
    "cluster.device=cpu",
    "rollout=none",
    "actor.backend=fsdp:d2",
    "cluster.num_nodes=2",
    "cluster.gpus_per_node=1",
]


def test_a_cluster_address_that_does_not_answer_is_one_error_line(tmp_path):
    """Probed first (ray.init would wait for minutes: run()'s timeout would end the test)."""
    line = one_error_line(
        run(*CPU_RUN, "launcher.address=127.0.0.2:9", f"hydra.run.dir={tmp_path}/r")
    )
    assert "no Ray cluster answers at 127.0.0.2:9" in line and "launcher.address" in line
    assert not (tmp_path / "r").exists()


def test_a_dry_run_without_a_cluster_prints_and_says_the_fit_was_not_checked(tmp_path):
    out = run(
        *CPU_RUN,
        "launcher.address=127.0.0.2:9",
        "launcher.dry_run=true",
        f"hydra.run.dir={tmp_path}/r",
    )
    assert out.returncode == 0, out.stderr
    assert "did not check that the plan fits a Ray cluster" in out.stderr
    assert "node 1: " in out.stdout and "launcher.node.agent" in out.stdout
    assert not (tmp_path / "r").exists()


def test_device_auto_with_no_ray_cluster_plans_for_this_machine_and_says_so():
    out = run("plan", "launcher=ray", "cluster.device=auto", "launcher.address=127.0.0.2:9")
    assert out.returncode == 0, out.stderr
    assert (
        "note: cluster.device=auto: the Ray cluster at 127.0.0.2:9 did not say its nodes "
        "(no Ray cluster answers at 127.0.0.2:9" in out.stderr
    )
    assert "so the plan is for this machine's GPUs, not the cluster's" in out.stderr


def test_without_ray_installed_launcher_ray_is_one_error_line(tmp_path):
    """A FAKE `ray` package that fails to import stands for a machine without Ray (this one
    has it installed)."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    out = run(*CPU_RUN, "launcher.address=auto", env={"PYTHONPATH": path, "RAY_ADDRESS": ""})
    line = one_error_line(out)
    assert "launcher=ray needs Ray here" in line and "pip install -e '.[ray]'" in line


@pytest.mark.parametrize(
    "override, says",
    [
        ("launcher.placement_timeout_s=0", "launcher.placement_timeout_s=0"),
        ("launcher.cpus_per_node=0", "launcher.cpus_per_node=0"),
        ("launcher.address=", "launcher.address is empty"),
    ],
)
def test_bad_ray_options_are_one_error_line(override, says):
    assert says in one_error_line(run(*CPU_RUN, override, "launcher.dry_run=true"))


def test_only_launcher_ray_imports_ray_and_no_launch_imports_an_engine(tmp_path):
    """The launcher process imports ray only for launcher=ray (every runner's module is loaded
    to register its config), and torch, vllm, sglang never (launcher=ray: tests/test_ray.py)."""
    code = """
import sys
from launcher.cli.launch import prepare, start
for runner in sys.argv[1:]:
    prep = prepare([f"launcher={runner}", "launcher.dry_run=true", "cluster.device=cpu"])
    start(prep)
    heavy = [m for m in ("torch", "vllm", "sglang") if m in sys.modules]
    print(runner, "ray" in sys.modules, heavy, file=sys.stderr)
"""
    out = subprocess.run(
        [sys.executable, "-c", code, "local", "slurm"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert out.returncode == 0, out.stderr
    assert "local False []" in out.stderr and "slurm False []" in out.stderr


def test_cluster_device_auto_on_ray_plans_for_the_clusters_gpus_and_their_type():
    """Ray's nodes (GPU counts, accelerator_type resource) become the offer that
    cluster.device=auto plans for: cuda, the GPUs per node, the type for the memory table."""
    nodes = [
        RayNode("10.0.0.1", 8.0, 64.0, {"accelerator_type:H100": 1.0, "memory": 1e12}),
        RayNode("10.0.0.2", 8.0, 64.0, {"accelerator_type:H100": 1.0}),
        RayNode("10.0.0.3", 0.0, 32.0, {"cpu_node": 1.0}),
    ]
    offer = ray_offer(nodes, "the Ray cluster at auto")
    assert [(n.gpus, n.gpu_type) for n in offer.nodes] == [(8, "H100"), (8, "H100"), (0, None)]
    cluster, notes = with_offer(ClusterConfig(device="auto", num_nodes=2), offer)
    assert (cluster.device, cluster.gpus_per_node, cluster.gpu_type) == ("cuda", 8, "H100")
    assert "the Ray cluster at auto has 2 node(s) with 8 GPU(s) (H100)" in notes[0]
    cpu_only, notes = with_offer(ClusterConfig(device="auto"), ray_offer(nodes[2:], "ray"))
    assert cpu_only.device == "cpu" and "no GPU" in notes[0]


def test_ray_says_it_does_not_choose_the_nodes_an_engine_asks_for():
    """cpu, memory and image are each plan node's bundle's and actor's; nodes are Ray's pick."""
    from launcher.runners import ray

    ask = EngineAsk(cpu=1, nodelist="gpu01", exclude="gpu07", key="actor.resources")
    request = dataclasses.replace(
        request_for(RUN, [proc("actor-0", "trainer", 0)]), asks={"actor": ask}
    )
    assert ray.Runner(ray.Config()).notes(request) == [
        "actor.resources: nodelist, exclude not honoured by the ray runner (Ray picks the nodes "
        "of the placement group)"
    ]


# ----------------------------------------------------------------------------- a CPU-only head
CPU_HEAD = [
    RayNode("10.0.0.1", 0.0, 16.0, {HEAD: 1.0}, head=True),  # `ray start --head --num-gpus=0`
    RayNode("10.0.0.2", 8.0, 64.0, {"accelerator_type:H100": 1.0}),
    RayNode("10.0.0.3", 8.0, 64.0, {"accelerator_type:H100": 1.0}),
]
GPU_RUN = [
    "launcher=ray",
    "launcher.address=127.0.0.2:9",  # never asked: the described cluster stands for Ray's answer
    "cluster.num_nodes=2",
    "rollout.backend=sglang:d8",
    "actor.backend=fsdp:d8",
]


def test_a_cpu_only_head_runs_the_driver_and_the_engines_go_on_the_gpu_nodes():
    """AReaL 2.0 accepts a Ray head without GPUs (#1575): here cluster.device=auto plans for
    the GPU nodes' GPUs, the plan's two GPU nodes fit the two GPU Ray nodes (the head has
    none), and the plan's notes say the head runs the driver and no engine."""
    cluster, notes = with_offer(
        ClusterConfig(device="auto", num_nodes=2), ray_offer(CPU_HEAD, "the Ray cluster at auto")
    )
    assert (cluster.device, cluster.gpus_per_node, cluster.gpu_type) == ("cuda", 8, "H100")
    assert "has 2 node(s) with 8 GPU(s) (H100)" in notes[0]
    prep = prepare([*GPU_RUN, "cluster.device=cuda", "cluster.gpus_per_node=8"], to_run=False)
    _, request = counted_request(prep)
    job = prep.runner.job(request)
    assert [b["GPU"] for b in job.bundles] == [8.0, 8.0]
    assert fit_problem(job, CPU_HEAD, "auto") is None
    assert not any("head" in n for n in prep.runner.notes(request))  # no cluster read yet
    prep.runner.nodes = CPU_HEAD  # what offer() (device=auto) or check() read from Ray
    (note,) = [n for n in prep.runner.notes(request) if "head" in n]
    assert note == (
        "the Ray cluster's head 10.0.0.1 has no GPU: it runs the driver if this command runs "
        "there; the 2 plan node(s) with GPUs go on its 2 GPU node(s) (10.0.0.2, 10.0.0.3) only"
    )
    prep.runner.nodes = [dataclasses.replace(CPU_HEAD[0], gpus=8.0), *CPU_HEAD[1:]]
    assert not any("head" in n for n in prep.runner.notes(request))  # a GPU head: nothing said


def test_a_gpu_plan_counts_the_gpu_nodes_apart_from_a_cpu_only_head():
    """Three plan nodes with GPUs on the head and two GPU nodes: refused naming the GPU nodes
    and the head; a third plan node without GPUs (a CPU-only node group) may take the head."""
    three = job_of([proc(f"a{k}", "trainer", k, (0,)) for k in range(3)], num_nodes=3)
    problem = fit_problem(three, CPU_HEAD, "launcher.address=10.0.0.1:6379")
    assert problem is not None
    assert "3 plan node(s) ask GPUs" in problem and "has 2 node(s) with GPUs" in problem
    assert "its head 10.0.0.1 has none: it runs the driver" in problem
    assert "cluster.num_nodes=2" in problem
    mixed = job_of(
        [proc("a0", "trainer", 0, (0,)), proc("a1", "trainer", 1, (0,)), proc("r", "worker", 2)],
        num_nodes=3,
    )
    assert [b.get("GPU", 0) for b in mixed.bundles] == [1.0, 1.0, 0]
    assert fit_problem(mixed, CPU_HEAD, "auto") is None
    note = head_note(mixed.request, CPU_HEAD, detach=True)
    assert note is not None and "it runs the driver (the run's Ray job)" in note
    assert note.endswith("only, the 1 without may land on the head")
    no_gpus = fit_problem(three, CPU_HEAD[:1], "auto")
    assert no_gpus is not None and "run on cpu (cluster.device=cpu)" in no_gpus
    cpu_plan = job_of([proc(f"a{k}", "trainer", k, (0,)) for k in range(3)], "cpu", num_nodes=3)
    assert fit_problem(cpu_plan, CPU_HEAD, "auto") is None  # virtual slots: the head takes one
    assert head_note(cpu_plan.request, CPU_HEAD, detach=False) is None
