"""Node groups under the schedulers, at the plan level (milliseconds each): Slurm's
heterogeneous job (a component per node set, CPU-only nodes asking for no GPU, a group's own
#SBATCH options) and Ray's bundles (a group's custom resources, CPU-only nodes asking only for
CPUs). The real runs on the test clusters' CPU-only nodes are the end-to-end tests of
tests/test_slurm.py and tests/test_ray.py.
"""

from __future__ import annotations

import subprocess

import pytest

from launcher.runners import slurm
from launcher.runners.rayjob import RayNode, fit_problem, group_warnings, ray_job
from launcher.runners.sbatch import cpu_warning, node_sets, render_sbatch
from launcher.spec.cluster import NodeGroup
from launcher.spec.errors import UserError
from launcher.spec.process import ProcessSpec
from tests.areal_launch import ROOT, one_error_line, run
from tests.hand_requests import request_for

RUN = "/runs/exp/trial"
PY = "/venv/bin/python"
GROUPS = (NodeGroup("h100", (0, 1)), NodeGroup("cpu", (2,), gpus=False, env={"GROUP_X": "1"}))


def proc(name: str, role: str, node: int, gpus: tuple[int, ...] = ()) -> ProcessSpec:
    return ProcessSpec(
        name,
        {"server": "rollout", "trainer": "actor"}.get(role, "reward"),
        role,
        node,
        ("sleep", "1"),
        gpus=gpus,
    )


PROCS = [
    proc("rollout-0", "server", 0, (0, 1)),
    proc("actor-0", "trainer", 1, tuple(range(8))),
    proc("reward-0", "worker", 2),
    proc("reward-1", "worker", 2),
]


def request(procs=PROCS, groups=GROUPS, cpu_nodes=1, device="cuda"):
    return request_for(
        RUN, procs, num_nodes=3, device=device, node_groups=groups, cpu_nodes=cpu_nodes
    )


def script(opts=None, **kw) -> str:
    return render_sbatch(request(**kw), opts or slurm.Config(), PY, ["/src/launcher"])


def components(text: str) -> list[list[str]]:
    """The #SBATCH options of each component of the job, in order."""
    out: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("#SBATCH hetjob"):
            out.append([])
        elif line.startswith("#SBATCH "):
            out[-1].append(line[len("#SBATCH ") :])
    return out


# ----------------------------------------------------------------------------- Slurm
def test_a_cpu_only_group_is_a_component_of_its_own_that_asks_for_no_gpu():
    opts = slurm.Config(
        partition="gpu",
        time_limit="01:00:00",
        group_sbatch={"cpu": ["--partition=cpu", "--constraint=epyc"]},
    )
    text = script(opts)
    gpu, cpu = components(text)
    assert {
        "--nodes=2",
        "--gpus-per-node=8",
        "--exclusive",
        "--partition=gpu",
        "--time=01:00:00",
    } <= set(gpu)
    assert cpu == [
        "--nodes=1",
        "--ntasks-per-node=1",
        "--exclusive",
        "--partition=cpu",
        "--constraint=epyc",
    ]  # no GPU, not the GPU partition; time carries over
    step = text.split("srun ", 1)[1].split("\nrc=$?", 1)[0]
    first, second = step.split(" : \\\n")
    assert "--het-group=0 --nodes=2" in first and "--gpus-per-node=8" in first
    assert "--het-group=1 --nodes=1" in second and "--gres=none" in second
    assert "env -u CUDA_VISIBLE_DEVICES /venv/bin/python -m launcher.node.agent" in second
    assert "SLURM_JOB_NODELIST_HET_GROUP_$k" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_the_het_jobs_hosts_are_every_components_nodes_in_plan_order(tmp_path):
    """The hosts line, run by bash with a stand-in scontrol: plan node k is the k-th host."""
    text = script()
    line = next(ln for ln in text.splitlines() if ln.startswith("AREAL_HOSTS="))
    (tmp_path / "scontrol").write_text('#!/bin/sh\necho "$3" | tr , "\\n"\n')
    (tmp_path / "scontrol").chmod(0o755)
    out = subprocess.run(
        ["bash", "-c", f"{line}; echo $AREAL_HOSTS"],
        capture_output=True,
        text=True,
        env={
            "PATH": f"{tmp_path}:/usr/bin:/bin",
            "SLURM_JOB_NODELIST_HET_GROUP_0": "g1,g2",
            "SLURM_JOB_NODELIST_HET_GROUP_1": "c1",
        },
    )
    assert out.stdout.strip() == "g1,g2,c1", out.stderr


def test_nodes_split_where_their_groups_options_or_gpus_change_and_only_there():
    groups = (
        NodeGroup("h100", (0,)),
        NodeGroup("h20", (1, 2)),
        NodeGroup("a", (3,)),
        NodeGroup("b", (4,)),
        NodeGroup("cpu", (5, 6), False),
    )
    procs = [
        proc("actor-0", "trainer", 0, (0,)),
        proc("rollout-0", "server", 2, (0, 1)),
        proc("actor-1", "trainer", 4, (0,)),
        proc("reward-0", "worker", 6),
    ]
    req = request_for(RUN, procs, num_nodes=7, node_groups=groups, cpu_nodes=2)
    sets = node_sets(req, slurm.Config(group_sbatch={"h20": ["--partition=h20"]}))
    assert [(s.labels, list(s.nodes), s.gpus, s.cpu_only) for s in sets] == [
        (("h100",), [0], 1, False),
        (("h20",), [1, 2], 2, False),
        (("a", "b"), [3, 4], 1, False),  # no options of their own: Slurm gives them alike
        (("cpu",), [5, 6], 0, True),
    ]
    assert sets[1].options == ("--partition=h20",) and sets[2].options == ()


def test_a_plan_without_groups_is_one_component_as_before():
    text = render_sbatch(request_for(RUN, PROCS[:2]), slurm.Config(), PY)
    assert "hetjob" not in text and "--het-group" not in text and "env -u" not in text
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text


def test_unknown_group_options_are_refused_and_a_bare_cpu_group_is_warned():
    with pytest.raises(
        UserError,
        match=r"launcher.group_sbatch.cpux: the plan has no node "
        r"group 'cpux' \(its groups: cpu, h100\)",
    ):
        script(slurm.Config(group_sbatch={"cpux": ["--partition=cpu"]}))
    said = cpu_warning(request(), slurm.Config())
    assert any(
        "node group 'cpu' is CPU-only" in w and "launcher.group_sbatch.cpu" in w for w in said
    )
    assert not cpu_warning(request(), slurm.Config(group_sbatch={"cpu": ["-p", "cpu"]}))


def test_the_dry_run_shows_the_heterogeneous_job_from_the_command_line():
    out = run(
        "launcher=slurm",
        "launcher.dry_run=true",
        "rollout.backend=vllm:d1",
        "actor.backend=fsdp:d2",
        "cluster.device=cpu",
        "cluster.num_nodes=3",
        "cluster.gpus_per_node=2",
        "cluster.node_groups=[{label: gpu, node_ranks: 0-1}, "
        "{label: cpu, node_ranks: 2, gpus_per_node: 0, env: {GROUP_ROLE: reward}}]",
        "cluster.component_placement.rollout=0",
        "cluster.component_placement.actor=2-3",
        "cluster.component_placement.reward={node_group: cpu, placement: '0:0-1'}",
        "reward.entry=tests/node_report_worker.py",
        "+launcher.group_sbatch.cpu=['--partition=cpu']",
        "hydra.run.dir=/tmp/x",
    )
    assert out.returncode == 0, out.stderr
    assert "#SBATCH hetjob  # plan node(s) 2: node group(s) cpu\n#SBATCH --nodes=1" in out.stdout
    assert '"cpu_nodes": 1' in out.stdout and '"GROUP_ROLE": "reward"' in out.stdout
    line = one_error_line(
        run(
            "launcher=slurm",
            "launcher.dry_run=true",
            "cluster.device=cpu",
            "+launcher.group_sbatch.gpu=['--partition=gpu']",
        )
    )
    assert "launcher.group_sbatch.gpu: the plan has no node group 'gpu'" in line


# ----------------------------------------------------------------------------- Ray
def test_a_groups_plan_nodes_ask_for_its_custom_resources_and_cpu_nodes_for_no_gpu():
    job = ray_job(request(), PY, 1.0, "/work", 60.0, {"cpu": {"cpu_node": 1}})
    assert job.bundles == (
        {"CPU": 1.0, "GPU": 2.0},
        {"CPU": 1.0, "GPU": 8.0},
        {"CPU": 1.0, "cpu_node": 1.0},
    )
    assert group_warnings(request(), {"cpu": {"cpu_node": 1}}) == []
    assert "node group 'cpu' is CPU-only" in group_warnings(request(), {})[0]


@pytest.mark.parametrize(
    "given, needle",
    [
        ({"cpux": {"cpu_node": 1}}, "launcher.group_resources.cpux: the plan has no node group"),
        ({"cpu": {"GPU": 1}}, "launcher.group_resources.cpu.GPU=1: a custom Ray resource"),
        ({"cpu": {"cpu_node": 0}}, "launcher.group_resources.cpu.cpu_node=0"),
    ],
)
def test_wrong_group_resources_are_refused(given, needle):
    with pytest.raises(UserError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        ray_job(request(), PY, 1.0, "/work", 60.0, given)


def test_the_fit_counts_the_nodes_that_hold_a_groups_resource():
    job = ray_job(request(), PY, 1.0, "/work", 60.0, {"cpu": {"cpu_node": 1}})
    gpu = [RayNode("10.0.0.1", 8, 4), RayNode("10.0.0.2", 8, 4)]
    said = fit_problem(job, gpu + [RayNode("10.0.0.3", 0, 4)], "x")
    assert said is not None and "1 plan node(s) ask for the custom resource 'cpu_node'" in said
    assert "has 0 node(s) with it" in said and "--resources='{\"cpu_node\": 1}'" in said
    assert fit_problem(job, gpu + [RayNode("10.0.0.3", 0, 4, {"cpu_node": 1})], "x") is None


# ----------------------------------------------------------------------------- local
@pytest.mark.torch
def test_a_cpu_only_groups_workers_run_here_as_a_virtual_node_and_answer_the_trainer(tmp_path):
    """launcher=local: plan node 1 (CPU-only) is this machine too; its reward workers get the
    group's environment and no GPU, and the trainer reaches them at AREAL_REWARD_ADDRS."""
    from tests.node_groups import group_overrides, node_reports

    groups, python = group_overrides(tmp_path, "launcher.grace_period_s=3")
    groups = [
        "cluster.num_nodes=2"
        if g.startswith("cluster.num_nodes")
        else g.replace("node_ranks: 0-1", "node_ranks: 0").replace("node_ranks: 2", "node_ranks: 1")
        for g in groups
    ]
    out = run(
        "rollout=none",
        "actor.backend=fsdp:d1",
        "cluster.device=cpu",
        "cluster.gpus_per_node=1",
        *groups,
        f"trainer.entry={ROOT / 'tests' / 'reward_client_trainer.py'}",
        f"hydra.run.dir={tmp_path}/run",
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = (tmp_path / "run" / "logs" / "actor-node0.log").read_text()
    assert "trainer reached 2 reward worker(s)" in log, log
    reports = node_reports(tmp_path / "run")
    assert sorted(reports) == ["reward-0", "reward-1"]
    for r in reports.values():
        assert r["cuda_visible_devices"] == "" and r["group_env"] == {"GROUP_ROLE": "reward"}
        assert r["python"] == str(python)
