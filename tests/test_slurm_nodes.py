"""launcher=slurm, cluster.device=auto: the plan is for the partition's nodes (sinfo's gres),
never for the login node (issue 19). At the plan level, on sinfo's text as Slurm prints it
(`sinfo -h -N -o '%N|%P|%G'`); tests/test_slurm.py asks the real test cluster.
"""

from __future__ import annotations

import pytest

from launcher.cli.launch import gpu_capacity
from launcher.memory.capacity import Capacity, resolve_capacity
from launcher.node.hostinfo import gpu_names
from launcher.planning.build import build_plan
from launcher.runners.slurmnodes import gpus_of, job_partition, parse_sinfo
from launcher.spec.errors import ConfigError, UserError
from tests.areal_launch import one_error_line, run
from tests.plans import config

# the local test cluster (scripts/slurm/start-slurm.sh, GPUs untyped), as its sinfo prints it
TEST_CLUSTER = "node1|debug*|gpu:8\nnode2|debug*|gpu:8\nnode3|cpu|(null)\n"
# a site's: typed gres with socket affinity, a node in two partitions, a mixed partition
SITE = """gpu-a001|gpu*|gpu:h100:8(S:0-1)
gpu-a002|gpu*|gpu:h100:8(S:0-1)
gpu-a001|all|gpu:h100:8(S:0-1)
gpu-b001|all|gpu:a100:4(S:0)
gpu-b002|all|gpu:a100:4(S:0),shard:a100:16(S:0)
cpu-001|cpu|(null)
"""


def plan_on(sinfo: str, partition=None, **dotted):
    """The plan for `dotted` (device auto, no GPU here) on the partition sinfo describes."""
    return build_plan(config(**dotted), local_gpus=0, offer=parse_sinfo(sinfo, partition))


@pytest.mark.parametrize(
    "gres, gpus",
    [
        ("gpu:8", (8, None)),
        ("gpu:h100:8(S:0-1)", (8, "h100")),
        ("(null)", (0, None)),
        ("gpu:a100:4(S:0),shard:a100:16(S:0)", (4, "a100")),
        ("gpu:a100:2,gpu:v100:2", (4, None)),
        ("gpu:nvidia_h100_80gb_hbm3:4(S:0,1)", (4, "nvidia_h100_80gb_hbm3")),
        ("mps:100", (0, None)),
    ],
)
def test_a_nodes_gres_says_its_gpus_and_their_type(gres, gpus):
    assert gpus_of(gres) == gpus


def test_the_default_partition_is_the_one_sinfo_marks_and_a_node_counts_once():
    assert [(n.name, n.gpus) for n in parse_sinfo(TEST_CLUSTER, None).nodes] == [
        ("node1", 8),
        ("node2", 8),
    ]
    offer = parse_sinfo(SITE, "all,gpu")
    assert offer.where == "Slurm partition all,gpu"
    assert [(n.name, n.gpus, n.gpu_type) for n in offer.nodes] == [
        ("gpu-a001", 8, "h100"),
        ("gpu-a002", 8, "h100"),
        ("gpu-b001", 4, "a100"),
        ("gpu-b002", 4, "a100"),
    ]
    with pytest.raises(UserError, match="lists no node in partition nope"):
        parse_sinfo(TEST_CLUSTER, "nope")


def test_a_login_node_without_gpus_plans_for_the_partitions_gpus():
    """The issue's case: num_nodes=2 gpus_per_node=8, device auto, no GPU here: cuda."""
    planned = plan_on(TEST_CLUSTER, **{"cluster.num_nodes": 2, "cluster.gpus_per_node": 8})
    assert planned.plan.cluster.to_dict() == {"num_nodes": 2, "gpus_per_node": 8, "device": "cuda"}
    assert planned.notes[0] == (
        "cluster.device=auto: Slurm partition debug has 2 node(s) with "
        "8 GPU(s): planning for cuda, 8 GPU(s) per node"
    )
    unset = plan_on(TEST_CLUSTER)  # GPUs per node from the partition too
    assert unset.plan.cluster.to_dict() == {"num_nodes": 1, "gpus_per_node": 8, "device": "cuda"}


def test_a_partition_without_gpus_plans_for_cpu():
    planned = plan_on(TEST_CLUSTER, "cpu")
    assert planned.plan.cluster.device == "cpu"
    assert "Slurm partition cpu has no GPU" in planned.notes[0]
    with pytest.raises(
        ConfigError, match="gpus_per_node=8: the nodes of Slurm partition cpu have no GPU"
    ):
        plan_on(TEST_CLUSTER, "cpu", **{"cluster.gpus_per_node": 8})


@pytest.mark.parametrize(
    "dotted, says",
    [
        (
            {"cluster.num_nodes": 3, "cluster.gpus_per_node": 8},
            "cluster.num_nodes=3: the plan needs 3 node(s) but Slurm partition debug has 2 with 8 "
            "GPU(s); set cluster.num_nodes=2 or less",
        ),
        (
            {"cluster.gpus_per_node": 16},
            "cluster.gpus_per_node=16: the nodes of Slurm partition debug have at most 8 GPU(s) "
            "each",
        ),
    ],
)
def test_a_plan_the_partition_cannot_hold_is_one_error(dotted, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        plan_on(TEST_CLUSTER, **dotted)


def test_the_gpu_type_in_the_gres_sizes_the_memory_check():
    planned = plan_on(SITE, "gpu")
    assert planned.config.cluster.gpu_type == "h100"
    assert gpu_capacity(planned, here=False) == Capacity(79.11, "table: h100")


def test_the_users_own_values_win_and_a_note_says_where_they_differ():
    planned = plan_on(SITE, "gpu", **{"cluster.gpus_per_node": 4, "cluster.gpu_type": "h800"})
    assert planned.plan.cluster.gpus_per_node == 4 and planned.config.cluster.gpu_type == "h800"
    assert planned.notes[1:3] == (
        "cluster.gpus_per_node=4 as given: the nodes of Slurm partition gpu have 8",
        "cluster.gpu_type=h800 as given: Slurm partition gpu's gres says h100",
    )
    explicit = build_plan(
        config(**{"cluster.device": "cpu"}), 0, offer=parse_sinfo(SITE, "gpu")
    )  # device given: Slurm is not asked
    assert explicit.plan.cluster.device == "cpu"
    assert not any(n.startswith("cluster.device=auto") for n in explicit.notes)


def test_a_partition_of_several_kinds_plans_for_the_nodes_it_has_enough_of():
    one = plan_on(SITE, "all")
    assert one.plan.cluster.gpus_per_node == 8 and one.config.cluster.gpu_type == "h100"
    three = plan_on(SITE, "all", **{"cluster.num_nodes": 3})  # 3 nodes have 4 GPUs or more
    assert three.plan.cluster.gpus_per_node == 4 and three.config.cluster.gpu_type is None
    assert any("several types (a100, h100): set cluster.gpu_type" in n for n in three.notes)


def test_the_jobs_partition_is_the_one_sbatch_will_use():
    assert job_partition("gpu", ["-p", "other"], {"SBATCH_PARTITION": "x"}) == "gpu"
    for extra in (
        ["--partition=big"],
        ["-pbig"],
        ["--exclusive", "-p", "big"],
        ["--partition", "big"],
    ):
        assert job_partition(None, extra, {}) == "big", extra
    assert job_partition(None, [], {"SBATCH_PARTITION": "env"}) == "env"
    assert job_partition(None, ["--constraint=h100"], {}) is None


def test_without_sinfo_an_auto_device_is_one_error_line_and_a_given_one_plans(tmp_path):
    """A machine without Slurm's commands: device auto cannot be read from Slurm; cuda or cpu,
    given, plans without asking."""
    env = {"PATH": str(tmp_path)}
    line = one_error_line(run("plan", "launcher=slurm", env=env))
    assert "sinfo, which is not on PATH here" in line and "cluster.device=cuda" in line
    out = run("plan", "launcher=slurm", "cluster.device=cuda", "cluster.gpus_per_node=8", env=env)
    assert out.returncode == 0, out.stderr


# ----------------------------------------------------------------------------- GPU names
NVIDIA_SMI_L = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-4a3b2c1d-0000-1111-2222-333344445555)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-5b4c3d2e-0000-1111-2222-333344445555)
  MIG 3g.20gb     Device  0: (UUID: MIG-6c5d4e3f-0000-1111-2222-333344445555)
"""


def test_gpu_names_come_from_nvidia_smi_l_without_its_mig_lines():
    assert gpu_names(NVIDIA_SMI_L) == ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")


def test_without_nvml_the_gpus_names_give_their_memory(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py absent
    names = gpu_names(NVIDIA_SMI_L)
    assert resolve_capacity("cuda", local_names=lambda: names[:1]) == Capacity(
        79.11, "nvidia-smi: NVIDIA H100 80GB HBM3"
    )
    assert resolve_capacity("cuda", local_names=lambda: names) == Capacity(
        39.39, "nvidia-smi: NVIDIA A100-SXM4-40GB"
    )  # the smallest card
    unknown = resolve_capacity(
        "cuda",
        gpu_name="h200",  # a name the table lacks: the type's
        local_names=lambda: ("NVIDIA Quadro X", *names),
    )
    assert unknown == Capacity(139.81, "table: h200")
    assert resolve_capacity("cuda", detect=False, local_names=lambda: names).gib is None


def test_no_nvidia_smi_here_is_no_gpu_name(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    from launcher.node.hostinfo import local_gpu_names

    assert local_gpu_names() == ()
