"""RLinf's worlds as written (docs/architecture.md §15): its three example configs from the
execution-modes document as YAML in a user folder, its components (inference, env, reward,
agent), placement forms (process maps, node groups, the dict form) and world sizes taken from
the placement. All at the plan level: each case costs milliseconds; the real runs are in
tests/test_rlinf_runs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.backends.context import LaunchContext
from launcher.backends.plan_processes import build_processes
from launcher.config.compose import Composer, ConfigSource
from launcher.config.run import run_spec
from launcher.planning.build import build_plan
from launcher.spec.errors import ConfigError, PlacementError
from tests.areal_launch import one_error_line, run

GPU2x8 = "cluster: {num_nodes: 2, gpus_per_node: 8, device: cuda, component_placement: "
EXAMPLES = {  # the document's three configs, as a user writes them over our defaults
    "collocated": GPU2x8 + '{"actor,rollout": all}}\n',
    "disaggregated": GPU2x8 + "{rollout: 0-9, inference: 10-11, actor: 12-15}}\n",
    "hybrid": (
        "cluster: {num_nodes: 1, gpus_per_node: 8, device: cuda, component_placement: "
        "{actor: 0-7, env: 0-3, rollout: 4-7}}\n"
        "env: {enable_offload: true}\n"
        "rollout: {enable_offload: true, pipeline_stage_num: 2}\n"
        "actor: {enable_offload: true}\n"
    ),
}


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rlinf")
    for name, body in EXAMPLES.items():
        (folder / f"{name}.yaml").write_text("defaults: [config, _self_]\n" + body)
    return folder


def typed(overrides=(), source=ConfigSource()):
    """The typed config of `overrides` (the peers' keys translated), as a launch reads it."""
    composer = Composer(source)
    return run_spec(composer, composer.compose(list(overrides), with_hydra=True)).config


def plan_of(overrides=(), source=ConfigSource()):
    return build_plan(typed(overrides, source), local_gpus=0).plan


def layout(plan):
    return {n: (str(c.alloc), c.gpus) for n, c in plan.components.items()}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_documents_example_configs_plan_from_a_user_folder(user_folder, name):
    out = run("plan", "--json", "-cd", str(user_folder), "-cn", name)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    got = {n: (c["spec"], c["gpus"]) for n, c in plan["components"].items()}
    if name == "collocated":
        assert (
            got
            == {"rollout": ("vllm:d16", list(range(16))), "actor": ("fsdp:d16", list(range(16)))}
            and plan["mode"] == "collocated"
        )
    elif name == "disaggregated":
        assert got == {
            "rollout": ("vllm:d10", list(range(10))),
            "actor": ("fsdp:d4", list(range(12, 16))),
            "inference": ("fsdp:d2", [10, 11]),
        }
        assert plan["components"]["inference"]["inherited_from"] == "actor"
        assert plan["mode"] == "disaggregated"
    else:
        assert got == {
            "rollout": ("vllm:d4", [4, 5, 6, 7]),
            "actor": ("fsdp:d8", list(range(8))),
            "env": ("process:d4", [0, 1, 2, 3]),
        }
        assert plan["mode"] == "hybrid"
        options = plan["engine_options"]
        assert options["actor"]["offload"]["weight"] and options["actor"]["offload"]["optimizer"]
        assert options["rollout"]["offload"] is True
        assert not any("compete for GPU memory" in w for w in plan["warnings"])


def test_inference_is_a_forward_only_training_engine():
    plan = plan_of(
        [
            "cluster.device=cuda",
            "cluster.gpus_per_node=8",
            "cluster.component_placement.rollout=0-3",
            "cluster.component_placement.inference=4-5",
            "cluster.component_placement.actor=6-7",
        ]
    )
    inference = plan.components["inference"]
    assert (inference.kind, inference.inherited_from, str(inference.alloc)) == (
        "train",
        "actor",
        "fsdp:d2",
    )


def test_rlinf_tp_keys_size_a_bare_placed_backend():
    plan = plan_of(
        [
            "cluster.device=cuda",
            "cluster.gpus_per_node=8",
            "actor.backend=megatron",
            "cluster.component_placement.rollout=0-3",
            "cluster.component_placement.actor=4-7",
            "rollout.tensor_parallel_size=2",
            "actor.model.tensor_model_parallel_size=2",
            "actor.model.pipeline_model_parallel_size=2",
        ]
    )
    assert str(plan.components["rollout"].alloc) == "vllm:d2t2"
    assert str(plan.components["actor"].alloc) == "megatron:p2t2"


def test_a_serving_process_map_gives_each_instance_its_gpus():
    plan = plan_of(
        [
            "cluster.device=cuda",
            "cluster.gpus_per_node=8",
            "cluster.component_placement.rollout='0-3:0-1'",
            "cluster.component_placement.actor=4-7",
        ]
    )
    assert layout(plan)["rollout"] == ("vllm:d2t2", (0, 1, 2, 3))


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["rollout.tensor_parallel_size=3"], "3 GPUs per copy do not divide the 4 GPU(s)"),
        (["rollout.backend=vllm:d4", "rollout.tensor_parallel_size=2"], "say it once"),
        (["actor.backend=fsdp:d4"], None),
    ],
)
def test_tp_keys_and_dims_agree_or_one_error(overrides, needle):
    base = [
        "cluster.device=cuda",
        "cluster.gpus_per_node=8",
        "cluster.component_placement.rollout=0-3",
        "cluster.component_placement.actor=4-7",
    ]
    if needle is None:
        assert layout(plan_of(base + overrides))["actor"] == ("fsdp:d4", (4, 5, 6, 7))
        return
    with pytest.raises(ConfigError) as err:
        plan_of(base + overrides)
    assert needle in str(err.value)


def test_process_maps_place_several_workers_a_gpu_or_one_on_several():
    plan = plan_of(
        [
            "cluster.device=cuda",
            "cluster.gpus_per_node=8",
            "cluster.component_placement.actor=0-7",
            "cluster.component_placement.rollout=0-7",
            "cluster.component_placement.env='0-3:0-7'",
            "cluster.component_placement.reward='4-5:0'",
            "reward.entry=score.py",
        ]
    )
    env = plan.components["env"]
    assert [(i.index, i.gpus) for i in env.instances][:3] == [(0, (0,)), (1, (0,)), (2, (1,))]
    assert len(env.instances) == 8
    assert [(i.index, i.gpus) for i in plan.components["reward"].instances] == [(0, (4, 5))]


NODE_GROUPS = [
    "cluster.device=cuda",
    "cluster.gpus_per_node=8",
    "cluster.num_nodes=3",
    "cluster.node_groups=[{label: h100, node_ranks: 0-1, env_configs: [{node_ranks: 0-1, "
    "python_interpreter_path: /opt/py/bin/python, env_vars: [{NCCL_IB_HCA: mlx5}]}]}, "
    "{label: cpu, node_ranks: 2, gpus_per_node: 0, env: {REWARD_THREADS: '4'}}]",
    "cluster.component_placement.rollout={node_group: h100, placement: 0-7}",
    "cluster.component_placement.actor={node_group: h100, placement: 8-15}",
    "cluster.component_placement.reward={node_group: cpu, placement: '0:0-3'}",
    "cluster.component_placement.agent={node_group: node, placement: '0-2:0-299'}",
    "agent.entry=agent.py",
]


def test_node_groups_place_by_group_and_cpu_only_groups_run_workers(tmp_path):
    planned_plan = plan_of(NODE_GROUPS)
    assert planned_plan.cluster.cpu_nodes == 1 and planned_plan.cluster.total_gpus == 16
    assert layout(planned_plan)["actor"] == ("fsdp:d8", tuple(range(8, 16)))
    reward = planned_plan.components["reward"]
    assert reward.gpus == () and {i.nodes for i in reward.instances} == {(2,)}
    assert len(reward.instances) == 4
    agent = planned_plan.components["agent"]
    assert [sum(1 for i in agent.instances if i.nodes == (n,)) for n in range(3)] == [100] * 3


def test_node_groups_give_their_processes_python_env_and_every_workers_address(tmp_path):
    spec = typed(
        NODE_GROUPS[:-3]
        + ["cluster.component_placement.reward={node_group: cpu, placement: '0:0-1'}"]
    )
    planned = build_plan(spec, local_gpus=0)
    ports = iter(range(32000, 32100))
    ctx = LaunchContext(
        run_dir=str(tmp_path),
        plan_path=str(tmp_path / "plan.json"),
        python="PY",
        next_port=lambda: next(ports),
    )
    procs = build_processes(planned, "recipes/grpo/train.py", [], ctx).processes
    trainer = next(p for p in procs if p.role == "trainer")
    reward = [p for p in procs if p.component == "reward"]
    assert trainer.argv[0] == "/opt/py/bin/python" and trainer.env["NCCL_IB_HCA"] == "mlx5"
    assert reward[0].argv[0] == "PY" and reward[0].env["REWARD_THREADS"] == "4"
    assert reward[0].node == 2 and reward[0].gpus == ()
    addrs = trainer.env["AREAL_REWARD_ADDRS"].split(",")
    assert len(addrs) == 2 and addrs[0].startswith("@@AREAL_NODE_2@@:")


@pytest.mark.parametrize(
    "extra, needle",
    [
        (
            ["cluster.component_placement.env=['0-1:0-3', '2-3:2-5']"],
            "processes 2-3 are placed twice",
        ),
        (["cluster.component_placement.env=['0-1:0-3', '1-2:4-7']"], "GPU 1 is placed twice"),
        (
            ["cluster.component_placement.reward={node_group: cpu, placement: '0-3:0-7'}"],
            "not a node range of node group 'cpu', which has 1 node(s)",
        ),
        (
            ["cluster.component_placement.reward={node_group: a100, placement: 0}"],
            "unknown node group 'a100'",
        ),
        (["cluster.component_placement.agent=2"], "agent.entry is not set"),
        (
            ["cluster.component_placement.actor={node_group: cpu, placement: 0}"],
            "actor runs on GPUs, but this is a CPU-only placement",
        ),
        (["cluster.component_placement.env='0-3:0-6'"], "7 processes do not divide evenly over 4"),
        (["cluster.component_placement.env='0-15:0'"], "a process's GPUs sit on one node"),
    ],
)
def test_wrong_forms_are_one_clear_error(extra, needle):
    base = NODE_GROUPS[:6]
    with pytest.raises((ConfigError, PlacementError)) as err:
        plan_of(base + extra)
    assert needle in str(err.value)


def test_a_wrong_form_on_the_command_line_is_one_error_line():
    line = one_error_line(
        run(
            "plan",
            *NODE_GROUPS[:6],
            "cluster.component_placement.reward={node_group: gpu, placement: 0}",
        )
    )
    assert "unknown node group 'gpu'" in line and "cluster.node_groups" in line


def test_rlinf_keys_of_a_worker_reach_its_entry_as_options():
    plan = plan_of(
        [
            "env.processes=1",
            "env.enable_offload=true",
            "env.simulator_type=textworld",
            "env.train.max_steps=3",
        ]
    )
    assert "env" in plan.components and plan.components["env"].gpus == ()
    assert plan.meta["engine_options"]["env"] == {
        "options": {"simulator_type": "textworld", "train": {"max_steps": 3}},
        "offload": True,
        "mem_gib": None,
    }


TWO_POLICIES = [
    "cluster.device=cpu",
    "rollout.backend=vllm:d1",
    "actor.backend=fsdp:d2",
    "+components.rollout2={kind: serve, backend: 'vllm:d1'}",
    "+components.actor2={kind: train, backend: 'fsdp:d2', feeds: rollout2, dtype: bfloat16}",
]


def test_a_second_policy_is_declared_and_pushes_to_its_own_servers(tmp_path):
    planned = build_plan(typed(TWO_POLICIES), local_gpus=0)
    plan = planned.plan
    assert {(w.src, w.dst) for w in plan.weight_sync} == {
        ("actor", "rollout"),
        ("actor2", "rollout2"),
    }
    assert plan.components["actor2"].kind == "train"
    assert planned.engines["actor2"].training.dtype == "bfloat16"
    ports = iter(range(33000, 33100))
    ctx = LaunchContext(
        run_dir=str(tmp_path),
        plan_path=str(tmp_path / "plan.json"),
        python="PY",
        next_port=lambda: next(ports),
    )
    procs = build_processes(planned, "recipes/grpo/train.py", [], ctx).processes
    servers = {p.component: p for p in procs if p.role == "server"}
    trainers = {p.component: p for p in procs if p.role == "trainer"}
    port_of = {name: str(p.ports[0]) for name, p in servers.items()}
    assert trainers["actor2"].env["AREAL_LLM_SERVER_ADDRS"].endswith(port_of["rollout2"])
    assert trainers["actor"].env["AREAL_LLM_SERVER_ADDRS"].endswith(port_of["rollout"])
    assert trainers["actor"].env["AREAL_ROLLOUT2_ADDRS"].endswith(port_of["rollout2"])


def test_feeds_must_name_a_serving_component():
    with pytest.raises(ConfigError, match="components.actor2.feeds='actor': not a serving"):
        plan_of(
            TWO_POLICIES[:4]
            + ["+components.actor2={kind: train, backend: 'fsdp:d2', feeds: actor}"]
        )


def test_rlinf_offload_spellings_turn_on_what_they_name():
    planned = build_plan(
        typed(["cluster.device=cpu", "actor.offload_weight=true", "actor.offload_grad=true"]),
        local_gpus=0,
    )
    parts = planned.engines["actor"].offload_parts
    assert (parts.weight, parts.optimizer, parts.grad) == (True, False, True)
    served = build_plan(typed(["rollout.enable_offload=true"]), local_gpus=0)
    assert served.engines["rollout"].offload


def test_rlinf_auto_scheduler_is_one_line_naming_what_to_write():
    line = one_error_line(run("plan", "cluster.auto_scheduler=true"))
    assert "not supported" in line and "cluster.component_placement" in line


def test_the_gpu_map_shows_cpu_only_nodes_and_their_processes():
    import io

    from rich.console import Console

    from launcher.cli.render import render_gpu_map

    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(render_gpu_map(plan_of(NODE_GROUPS)))
    text = console.file.getvalue()
    assert "2 nodes x 8 GPUs + 1 CPU-only node" in text
    assert "nodes 0-1 (CPU processes): G agent x100" in text
    assert "node 2 (no GPUs): E reward x4, G agent x100" in text


WORKER_MEMORY = [
    "cluster.device=cuda",
    "cluster.gpus_per_node=8",
    "cluster.gpu_memory_gib=16",
    "cluster.component_placement.rollout=4-7",
    "cluster.component_placement.actor=0-7",
    "cluster.component_placement.env='0-3:0-7'",
    "rollout.offload=true",
    "rollout.vllm.gpu_memory_utilization=0.5",
    "actor.offload.weight=true",
    "actor.offload.optimizer=true",
    "actor.offload.grad=true",
    "launcher.check_memory=warn",
]


@pytest.mark.parametrize(
    "extra, fits, fix",
    [
        (["env.mem_gib=4"], True, None),  # 2 processes x 4 GiB beside the actor
        # 12 GiB + the training actor: too much even at the estimate's low end (5.5 GiB: it
        # may not fit, the actor's overhead 1-2 GiB decides)
        (["env.mem_gib=6"], False, "env.offload=true"),
        (["env.mem_gib=6", "env.offload=true"], True, None),  # released while the actor trains
    ],
)
def test_a_workers_memory_counts_on_its_gpus_and_its_offload_is_the_fix(extra, fits, fix):
    out = run("plan", "--json", *WORKER_MEMORY, *extra)
    memory = json.loads(out.stdout)["memory"]
    assert memory["fits"] is fits, memory.get("problems")
    assert [p["fix"] for p in memory.get("problems", [])] == ([fix] if fix else [])


def test_the_plan_carries_the_pipeline_stages_and_each_workers_offload_for_the_recipe():
    plan = plan_of(
        [
            "cluster.device=cpu",
            "cluster.component_placement.actor=0-1",
            "cluster.component_placement.env=0",
            "cluster.component_placement.rollout=1",
            "rollout.pipeline_stage_num=2",
            "env.enable_offload=true",
            "reward.processes=2",
        ]
    )
    options = plan.meta["engine_options"]
    assert options["rollout"]["pipeline_stage_num"] == 2
    assert options["env"]["offload"] is True and options["reward"]["offload"] is False


def test_a_pipeline_stage_count_out_of_bounds_is_one_error_line():
    line = one_error_line(run("plan", "rollout.pipeline_stage_num=0"))
    assert "rollout.pipeline_stage_num=0: choose 1 to 1024" in line


def test_rlinf_model_keys_of_an_engine_reach_its_entry():
    plan = plan_of(["actor.model.precision=bf16", "actor.model.tensor_model_parallel_size=1"])
    assert plan.meta["engine_options"]["actor"]["model"] == {"precision": "bf16"}
