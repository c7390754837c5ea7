"""Engines: plan entries -> the processes a runner starts (argv, env, GPUs, ports)."""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Callable

import pytest

from launcher.backends import plan_processes
from launcher.backends.context import LaunchContext
from launcher.config.schema import LaunchConfig
from launcher.planning import resolve
from launcher.planning.build import Planned, model_path
from launcher.planning.resolve import check_unused_options
from launcher.spec import request
from launcher.spec.alloc import ModelAllocation
from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import ConfigError, LaunchError
from launcher.spec.plan import ComponentPlan, Instance, Plan, Rank
from launcher.spec.process import ProcessSpec
from tests import plans


# ----------------------------------------------------------------------------- plans by hand
def component(
    name: str, alloc: ModelAllocation, gpus, cluster: ClusterSpec, inherited_from=None
) -> ComponentPlan:
    """Instances (blocks of t*p GPUs) or ranks (GPU order), as placement and ranks.py give."""
    gpus = tuple(gpus)
    if alloc.backend in ("sglang", "vllm"):
        size = alloc.tp * alloc.pp
        blocks = [gpus[i : i + size] for i in range(0, len(gpus), size)]
        insts = tuple(
            Instance(i, b, tuple(sorted({cluster.node_of(g) for g in b})))
            for i, b in enumerate(blocks)
        )
        return ComponentPlan(name, alloc, inherited_from, gpus, instances=insts)
    ranks = tuple(
        Rank(r, g, cluster.node_of(g), cluster.local_of(g), r, 0, 0, 0) for r, g in enumerate(gpus)
    )
    return ComponentPlan(name, alloc, inherited_from, gpus, ranks=ranks)


def make_plan(cluster: ClusterSpec, mode: str = "collocated", **parts) -> Plan:
    """parts: name=(alloc, gpus) or (alloc, gpus, inherited_from)."""
    comps = {
        name: component(name, alloc, gpus, cluster, *inherited)
        for name, (alloc, gpus, *inherited) in parts.items()
    }
    return Plan(cluster, mode, comps)


@dataclasses.dataclass
class Context:
    """A LaunchContext and the address each node will have (the supervisor fills hosts in)."""

    ctx: LaunchContext
    host: Callable[[int], str]


def context(hosts=None, cpus=(), extra_env=None) -> Context:
    ports = itertools.count(20000)
    return Context(
        LaunchContext(
            run_dir="/runs/r1",
            plan_path="/runs/r1/plan.json",
            python="/venv/bin/python",
            next_port=lambda: next(ports),
            cpus=tuple(cpus),
            extra_env=dict(extra_env or {}),
        ),
        hosts or (lambda node: "127.0.0.1"),
    )


def config(**dotted) -> LaunchConfig:
    """The typed config; `rollout__backend=...` stands for `rollout.backend=...`."""
    return plans.config(**{k.replace("__", "."): v for k, v in dotted.items()})


def plan_with_processes(plan: Plan, spec: LaunchConfig, c: Context) -> Plan:
    """What the launcher does: typed engines for the plan's components, then the backends."""
    allocs = {n: comp.alloc for n, comp in plan.components.items()}
    inherited = {
        n: comp.inherited_from for n, comp in plan.components.items() if comp.inherited_from
    }
    engines = resolve.engines(spec, allocs, inherited, model_path(spec))
    return plan_processes.build_processes(
        Planned(plan, engines, spec), spec.trainer.entry, spec.trainer.args, c.ctx
    )


def build_processes(plan: Plan, spec: LaunchConfig, c: Context) -> tuple[ProcessSpec, ...]:
    """The processes, as their nodes' supervisors exec them (hosts and GPUs filled in)."""
    hosts = [c.host(k) for k in range(plan.cluster.num_nodes)]
    out = []
    for p in plan_with_processes(plan, spec, c).processes:
        m = request.materialize(p, hosts, None, plan.cluster.device, "run")
        env = {k: v for k, v in m.env.items() if k != "AREAL_LAUNCH_RUN"}
        out.append(dataclasses.replace(p, argv=m.argv, env=env, health_url=m.health_url))
    return tuple(out)


def flag(argv, name):
    """The value after `name` in argv (None if absent)."""
    argv = list(argv)
    return argv[argv.index(name) + 1] if name in argv else None


def by_name(procs) -> dict[str, ProcessSpec]:
    return {p.name: p for p in procs}


CUDA8 = ClusterSpec(1, 8, "cuda")
CUDA2x8 = ClusterSpec(2, 8, "cuda")
CPU = ClusterSpec(1, 3, "cpu")
SG = lambda **k: ModelAllocation("sglang", **k)  # noqa: E731
VL = lambda **k: ModelAllocation("vllm", **k)  # noqa: E731
FS = lambda **k: ModelAllocation("fsdp", **k)  # noqa: E731
MG = lambda **k: ModelAllocation("megatron", **k)  # noqa: E731


# ----------------------------------------------------------------------------- sglang
def test_sglang_runs_one_server_per_instance_on_its_own_gpus():
    plan = make_plan(CUDA8, rollout=(SG(dp=4, tp=2), range(8)))
    procs = build_processes(plan, config(rollout__backend="sglang:d4t2"), context())
    assert [p.name for p in procs] == ["rollout-0", "rollout-1", "rollout-2", "rollout-3"]
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in procs] == ["0,1", "2,3", "4,5", "6,7"]
    for p in procs:
        assert p.argv[1:3] == ("-m", "sglang.launch_server")
        assert flag(p.argv, "--tp-size") == "2"
        assert "--dp-size" not in p.argv and "--pp-size" not in p.argv
        assert (
            p.role == "server"
            and p.health_url == f"http://127.0.0.1:{flag(p.argv, '--port')}/health"
        )


def test_sglang_options_become_flags_and_unset_ones_are_not_passed():
    cfg = config(
        rollout__backend="sglang:d1",
        rollout__sglang__mem_fraction_static=0.7,
        rollout__sglang__context_length=4096,
        rollout__sglang__skip_server_warmup=True,
    )
    (proc,) = build_processes(make_plan(CUDA8, rollout=(SG(), [0])), cfg, context())
    assert flag(proc.argv, "--mem-fraction-static") == "0.7"
    assert flag(proc.argv, "--context-length") == "4096"
    assert "--skip-server-warmup" in proc.argv
    for unset in ("--dtype", "--watchdog-timeout", "--log-level", "--enable-memory-saver"):
        assert unset not in proc.argv


def test_sglang_offload_turns_on_memory_saver():
    cfg = config(rollout__backend="sglang:d1", rollout__offload=True)
    (proc,) = build_processes(make_plan(CUDA8, rollout=(SG(), [0])), cfg, context())
    assert "--enable-memory-saver" in proc.argv


def test_sglang_multi_node_instance_runs_one_process_per_node():
    hosts = lambda node: f"node{node}"  # noqa: E731
    plan = make_plan(CUDA2x8, rollout=(SG(tp=16), range(16)))
    procs = build_processes(plan, config(rollout__backend="sglang:t16"), context(hosts))
    first, second = procs
    assert (first.name, second.name) == ("rollout-0-node0", "rollout-0-node1")
    assert (first.node, second.node) == (0, 1)
    assert [flag(p.argv, "--node-rank") for p in procs] == ["0", "1"]
    assert {flag(p.argv, "--nnodes") for p in procs} == {"2"}
    addr = flag(first.argv, "--dist-init-addr")
    assert addr.startswith("node0:") and flag(second.argv, "--dist-init-addr") == addr
    assert flag(first.argv, "--port") == flag(second.argv, "--port")
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in procs] == ["0,1,2,3,4,5,6,7"] * 2
    assert {flag(p.argv, "--host") for p in procs} == {"0.0.0.0"}  # reachable from other nodes


def test_sglang_dp_attention_and_ep_stay_inside_each_instance():
    cfg = config(
        rollout__backend="sglang:d4t4",
        rollout__sglang__enable_dp_attention=True,
        rollout__sglang__ep_size=4,
    )
    plan = make_plan(CUDA2x8, rollout=(SG(dp=4, tp=4), range(16)))
    procs = build_processes(plan, cfg, context())
    assert len(procs) == 4 and all(len(p.gpus) == 4 for p in procs)
    for p in procs:
        assert flag(p.argv, "--attn-dp-size") == "4" and flag(p.argv, "--ep-size") == "4"
        assert "--enable-dp-attention" in p.argv and "--dp-size" not in p.argv


def test_sglang_dp_attention_reserves_the_ports_it_derives_from_the_dist_init_port():
    cfg = config(rollout__backend="sglang:t4", rollout__sglang__attn_dp_size=2)
    (proc,) = build_processes(make_plan(CUDA8, rollout=(SG(tp=4), range(4))), cfg, context())
    dist = int(flag(proc.argv, "--dist-init-addr").rpartition(":")[2])
    assert set(range(dist, dist + 7)) <= set(proc.ports)  # SGLang uses dist+1..dist+6


@pytest.mark.parametrize(
    "dotted,message",
    [
        ({"rollout__sglang__mem_fraction_static": 1.5}, "mem_fraction_static=1.5: a fraction"),
        ({"rollout__sglang__attn_dp_size": 3}, "attn_dp_size=3 must divide .* t=4"),
    ],
)
def test_sglang_options_it_would_accept_or_assert_on_are_refused_clearly(dotted, message):
    cfg = config(rollout__backend="sglang:t4", **dotted)
    with pytest.raises(ConfigError, match=message):
        build_processes(make_plan(CUDA8, rollout=(SG(tp=4), range(4))), cfg, context())


@pytest.mark.parametrize(
    "backend,alloc,arg",
    [
        ("sglang:d1", SG(), "--dp-size"),
        ("sglang:d1", SG(), "--dp-size=2"),
        ("sglang:d1", SG(), "--tp_size"),
        ("sglang:d1", SG(), "--data-parallel-size"),
        ("vllm:d1", VL(), "-tp"),
        ("vllm:d1", VL(), "--data-parallel-size"),
        ("vllm:d1", VL(), "--pipeline-parallel-size=2"),
    ],
)
def test_gpu_count_flags_in_extra_args_are_refused_with_the_backend_fix(backend, alloc, arg):
    cfg = config(rollout__backend=backend, rollout__extra_args=[arg, "2"])
    with pytest.raises(LaunchError, match=r"rollout\.extra_args.*backend string's d"):
        build_processes(make_plan(CUDA8, rollout=(alloc, [0])), cfg, context())


def test_flags_the_launcher_sets_are_refused_in_extra_args():
    cfg = config(rollout__backend="vllm:d1", rollout__extra_args=["--port", "9000"])
    with pytest.raises(LaunchError, match="'--port' is set by the launcher"):
        build_processes(make_plan(CUDA8, rollout=(VL(), [0])), cfg, context())


# ----------------------------------------------------------------------------- vllm
def test_vllm_cpu_server_gets_the_cpu_build_environment_and_flags():
    cfg = config(rollout__vllm__cpu_kvcache_space_gb=3)
    (proc,) = build_processes(make_plan(CPU, rollout=(VL(), [0])), cfg, context())
    assert proc.argv[1:3] == ("-m", "vllm.entrypoints.openai.api_server")
    assert flag(proc.argv, "--dtype") == "float32" and "--enforce-eager" in proc.argv
    assert flag(proc.argv, "--distributed-executor-backend") == "mp"
    assert proc.env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert proc.env["HF_HUB_OFFLINE"] == "1" and proc.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert proc.env["CUDA_VISIBLE_DEVICES"] == ""
    assert "VLLM_CPU_OMP_THREADS_BIND" not in proc.env  # tp 1: vLLM's own binding works


def test_vllm_cpu_user_dtype_wins():
    cfg = config(rollout__vllm__dtype="bfloat16")
    (proc,) = build_processes(make_plan(CPU, rollout=(VL(), [0])), cfg, context())
    assert flag(proc.argv, "--dtype") == "bfloat16"


def test_vllm_cpu_tensor_parallel_binds_one_cpu_set_per_rank():
    cpu4 = ClusterSpec(1, 4, "cpu")
    plan = make_plan(cpu4, rollout=(VL(tp=2), [2, 3]))
    (proc,) = build_processes(plan, config(), context())
    assert proc.env["VLLM_CPU_OMP_THREADS_BIND"] == "2|3"
    (proc,) = build_processes(plan, config(), context(cpus=range(8)))
    assert proc.env["VLLM_CPU_OMP_THREADS_BIND"] == "4-5|6-7"


def test_vllm_cuda_instances_get_their_gpus_and_parallel_sizes():
    plan = make_plan(CUDA8, rollout=(VL(dp=2, tp=2), range(4)))
    procs = build_processes(plan, config(rollout__backend="vllm:d2t2"), context())
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in procs] == ["0,1", "2,3"]
    for p in procs:
        assert flag(p.argv, "--tensor-parallel-size") == "2"
        assert flag(p.argv, "--pipeline-parallel-size") == "1"
        assert "--data-parallel-size" not in p.argv and "--dtype" not in p.argv
        assert "HF_HUB_OFFLINE" not in p.env


def test_vllm_memory_fraction_above_one_is_refused():
    cfg = config(rollout__vllm__gpu_memory_utilization=2.0)
    with pytest.raises(ConfigError, match="gpu_memory_utilization=2.0"):
        build_processes(make_plan(CUDA8, rollout=(VL(), [0])), cfg, context())


def test_vllm_offload_on_cuda_enables_sleep_mode():
    (proc,) = build_processes(
        make_plan(CUDA8, rollout=(VL(), [0])), config(rollout__offload=True), context()
    )
    assert "--enable-sleep-mode" in proc.argv


def test_vllm_offload_on_cpu_is_not_passed_and_the_plan_says_so():
    plan = plan_with_processes(
        make_plan(CPU, rollout=(VL(), [0])), config(rollout__offload=True), context()
    )
    assert "--enable-sleep-mode" not in plan.processes[0].argv
    assert any("sleep mode" in w for w in plan.warnings)


def test_vllm_multi_node_instance_has_headless_followers():
    hosts = lambda node: f"node{node}"  # noqa: E731
    plan = make_plan(CUDA2x8, rollout=(VL(tp=8, pp=2), range(16)))
    leader, follower = build_processes(plan, config(), context(hosts))
    assert flag(leader.argv, "--master-addr") == flag(follower.argv, "--master-addr") == "node0"
    assert "--headless" in follower.argv and "--headless" not in leader.argv
    assert leader.health_url.startswith("http://node0:") and follower.health_url is None


# ----------------------------------------------------------------------------- trainers
def test_actor_and_ref_on_the_same_gpus_share_one_torchrun_job():
    plan = make_plan(CUDA8, actor=(FS(dp=8), range(8)), ref=(FS(dp=8), range(8), "actor"))
    (job,) = build_processes(plan, config(ref__backend=""), context())
    assert job.name == "actor+ref-node0" and job.env["AREAL_COMPONENT"] == "actor,ref"
    assert job.argv[1:3] == ("-m", "torch.distributed.run")
    assert flag(job.argv, "--nproc-per-node") == "8"
    assert job.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_an_engine_on_gpus_of_its_own_gets_its_own_job():
    plan = make_plan(
        CUDA8, "disaggregated", actor=(FS(dp=4), range(4)), critic=(FS(dp=4), range(4, 8))
    )
    actor, critic = build_processes(plan, config(critic__backend="fsdp:d4"), context())
    assert (actor.name, critic.name) == ("actor-node0", "critic-node0")
    assert critic.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert flag(actor.argv, "--master-port") != flag(critic.argv, "--master-port")


def test_multi_node_trainer_runs_torchrun_per_node_with_a_static_rendezvous():
    hosts = lambda node: f"node{node}"  # noqa: E731
    plan = make_plan(CUDA2x8, actor=(FS(dp=16), range(16)))
    first, second = build_processes(plan, config(), context(hosts))
    assert (first.name, second.name) == ("actor-node0", "actor-node1")
    assert [flag(p.argv, "--node-rank") for p in (first, second)] == ["0", "1"]
    for p in (first, second):
        assert flag(p.argv, "--nnodes") == "2" and flag(p.argv, "--rdzv-backend") == "static"
        assert flag(p.argv, "--master-addr") == "node0"
    assert flag(first.argv, "--master-port") == flag(second.argv, "--master-port")
    assert first.ports and not second.ports  # only the master binds it


def test_megatron_entry_gets_its_parallel_sizes():
    plan = make_plan(CUDA8, actor=(MG(dp=2, tp=2, pp=2), range(8)))
    (job,) = build_processes(plan, config(actor__backend="megatron:d2p2t2"), context())
    tail = list(job.argv[job.argv.index("recipes/grpo/train.py") :])
    assert flag(tail, "--tensor-model-parallel-size") == "2"
    assert flag(tail, "--pipeline-model-parallel-size") == "2"
    assert flag(tail, "--context-parallel-size") == "1"
    assert flag(tail, "--expert-model-parallel-size") == "1"
    assert flag(tail, "--expert-tensor-parallel-size") == "1"
    assert job.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_trainer_entry_args_and_extra_args_follow_the_entry():
    cfg = config(
        trainer__entry="-m recipes.grpo.train",
        trainer__args=["--steps", "3"],
        actor__extra_args=["--lr", "1e-5"],
    )
    (job,) = build_processes(make_plan(CUDA8, actor=(FS(dp=2), [0, 1])), cfg, context())
    assert list(job.argv[-6:]) == ["-m", "recipes.grpo.train", "--steps", "3", "--lr", "1e-5"]


def test_megatron_parallel_flags_in_extra_args_are_refused():
    cfg = config(actor__backend="megatron:d2", actor__extra_args=["--tensor-model-parallel-size=2"])
    with pytest.raises(LaunchError, match=r"actor\.extra_args.*backend string's t"):
        build_processes(make_plan(CUDA8, actor=(MG(dp=2), [0, 1])), cfg, context())


def test_cpu_trainers_default_to_one_omp_thread_unless_the_user_sets_it():
    plan = make_plan(CPU, actor=(FS(dp=2), [0, 1]))
    (job,) = build_processes(plan, config(), context())
    assert job.env["OMP_NUM_THREADS"] == "1" and job.env["CUDA_VISIBLE_DEVICES"] == ""
    (job,) = build_processes(plan, config(), context(extra_env={"OMP_NUM_THREADS": "4"}))
    assert job.env["OMP_NUM_THREADS"] == "4"


# ----------------------------------------------------------------------------- together
def collocated_1x8() -> Plan:
    return make_plan(
        CUDA8,
        rollout=(SG(dp=4, tp=2), range(8)),
        actor=(FS(dp=8), range(8)),
        ref=(FS(dp=8), range(8), "actor"),
    )


def test_trainers_learn_every_server_address_in_instance_order():
    hosts = lambda node: f"node{node}"  # noqa: E731
    plan = make_plan(
        CUDA2x8, "disaggregated", rollout=(SG(dp=2, tp=4), range(8)), actor=(FS(dp=8), range(8, 16))
    )
    procs = build_processes(plan, config(rollout__backend="sglang:d2t4"), context(hosts))
    servers = [p for p in procs if p.role == "server"]
    (trainer,) = [p for p in procs if p.role == "trainer"]
    expected = [f"node0:{flag(s.argv, '--port')}" for s in servers]
    assert trainer.env["AREAL_LLM_SERVER_ADDRS"] == ",".join(expected)
    assert trainer.env["AREAL_SERVED_MODEL_NAME"] == "policy"
    assert [flag(s.argv, "--served-model-name") for s in servers] == ["policy", "policy"]


def test_multi_node_instance_is_one_server_address():
    hosts = lambda node: f"node{node}"  # noqa: E731
    plan = make_plan(CUDA2x8, rollout=(SG(tp=16), range(16)), actor=(FS(dp=16), range(16)))
    procs = build_processes(plan, config(rollout__backend="sglang:t16"), context(hosts))
    trainer = next(p for p in procs if p.role == "trainer")
    assert trainer.env["AREAL_LLM_SERVER_ADDRS"] == f"node0:{flag(procs[0].argv, '--port')}"


def test_servers_come_first_then_trainers():
    roles = [
        p.role
        for p in build_processes(
            collocated_1x8(), config(rollout__backend="sglang:d4t2", ref__backend=""), context()
        )
    ]
    assert roles == ["server"] * 4 + ["trainer"]


def test_no_port_is_given_to_two_processes_on_one_node():
    hosts = lambda node: f"node{node}"  # noqa: E731
    plan = make_plan(
        CUDA2x8,
        "hybrid",
        rollout=(SG(dp=2, tp=8), range(16)),
        actor=(FS(dp=8), range(8)),
        critic=(FS(dp=8), range(8, 16)),
    )
    cfg = config(
        rollout__backend="sglang:d2t8", rollout__sglang__attn_dp_size=8, critic__backend="fsdp:d8"
    )
    procs = build_processes(plan, cfg, context(hosts))
    for node in (0, 1):
        ports = [port for p in procs if p.node == node for port in p.ports]
        assert len(ports) == len(set(ports))
    for p in procs:  # every port a process is told to bind is one of its reserved ports
        for name in ("--port", "--nccl-port", "--master-port"):
            if flag(p.argv, name) and p.ports:
                assert int(flag(p.argv, name)) in p.ports


def test_ports_in_a_row_skips_past_a_gap():
    given = iter([100, 101, 103, 104, 105])
    ctx = LaunchContext("/r", "/r/plan.json", "python", next_port=lambda: next(given))
    assert ctx.ports_in_a_row(3) == 103


def test_extra_env_reaches_every_process_but_cannot_override_the_contract():
    ctx = context(
        extra_env={"WANDB_API_KEY": "k", "AREAL_COMPONENT": "oops", "CUDA_VISIBLE_DEVICES": "7"}
    )
    procs = build_processes(
        collocated_1x8(), config(rollout__backend="sglang:d4t2", ref__backend=""), ctx
    )
    assert all(p.env["WANDB_API_KEY"] == "k" for p in procs)
    assert procs[0].env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert procs[-1].env["AREAL_COMPONENT"] == "actor,ref"
    assert {p.env["AREAL_LAUNCH_PLAN"] for p in procs} == {"/runs/r1/plan.json"}


def test_model_path_is_rollout_model_path_else_model_path_with_home_expanded():
    plan = make_plan(CPU, rollout=(VL(), [0]))
    (proc,) = build_processes(plan, config(model_path="~/m"), context())
    assert flag(proc.argv, "--model") == os.path.expanduser("~/m")
    (proc,) = build_processes(plan, config(model_path="~/m", rollout__model_path="/x"), context())
    assert flag(proc.argv, "--model") == "/x"


def test_dataclass_config_works_like_the_composed_one():
    cfg = LaunchConfig()
    cfg.rollout.backend = "sglang:d4t2"
    cfg.ref.backend = ""
    a = build_processes(collocated_1x8(), cfg, context())
    b = build_processes(
        collocated_1x8(), config(rollout__backend="sglang:d4t2", ref__backend=""), context()
    )
    assert a == b


# ----------------------------------------------------------------------------- unused options
def test_an_option_of_an_engine_the_backend_does_not_select_is_an_error():
    cfg = config(rollout__backend="vllm:d1", rollout__sglang__mem_fraction_static=0.8)
    with pytest.raises(ConfigError) as err:
        check_unused_options(cfg)
    assert str(err.value) == (
        "rollout.sglang.mem_fraction_static is set but rollout.backend is "
        "vllm:d1; remove it or use rollout.backend=sglang:d1"
    )


def test_options_of_the_selected_engine_are_fine():
    check_unused_options(
        config(
            rollout__backend="sglang:d2",
            rollout__sglang__mem_fraction_static=0.8,
            actor__megatron__sequence_parallel=True,
            actor__backend="megatron:d2t2",
        )
    )
    check_unused_options(LaunchConfig())


def test_an_inheriting_engine_is_checked_against_the_actors_backend():
    cfg = config(ref__backend="", ref__megatron__sequence_parallel=True)
    with pytest.raises(ConfigError, match=r"ref\.backend is fsdp:d2 \(the actor's\)"):
        check_unused_options(cfg)


def test_options_of_an_engine_that_is_off_are_an_error():
    with pytest.raises(ConfigError, match=r"critic is off"):
        check_unused_options(config(critic__fsdp__mixed_precision="bf16"))


def test_resolved_backends_win_over_the_config_fields():
    cfg = config(rollout__sglang__mem_fraction_static=0.8)  # rollout.backend still vllm:d1
    check_unused_options(cfg, {"rollout": "sglang:d4t2", "actor": "fsdp:d8"})


def test_servers_listen_on_their_node_address_only_when_it_is_loopback():
    """Nodes on one machine (127.0.0.2, 127.0.0.3: the Ray test cluster) stay on loopback; a
    real node's server listens on every interface, so other nodes reach it by any name."""
    from launcher.spec.process import bind_placeholder, fill_hosts

    assert fill_hosts(bind_placeholder(1), ["127.0.0.2", "127.0.0.3"]) == "127.0.0.3"
    assert fill_hosts(bind_placeholder(0), ["::1"]) == "::1"
    assert fill_hosts(bind_placeholder(0), ["node1"]) == "0.0.0.0"
    assert fill_hosts(bind_placeholder(0), ["10.0.0.2"]) == "0.0.0.0"
