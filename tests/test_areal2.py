"""AReaL 2.0 as written (issue 32): the served teacher, AWEX and grouped colocation, the named
hybrid form, Slurm's reservation and exclusive, post_exit_hook, and the engines' new keys,
planned from configs written the way AReaL 2.0 writes them (ours: none is copied from AReaL).

Plan level, in this process; one real local run (module-scoped, seconds) of the stand-in for
AReaL (tests/stand_in_areal.py) with AReaL 2.0's teacher keys: its servers serve the rollout
and the teacher, its entry trains, and AReaL's post_exit_hook runs once at the end.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from launcher.cli.launch import build_request, prepare
from launcher.node.ports import counted_ports
from launcher.spec.alloc import AllocationError, parse_backend
from launcher.spec.errors import ConfigError, PlacementError
from launcher.spec.process import host_placeholder
from tests.areal_launch import one_error_line, prepared_in, run
from tests.stand_in_areal import assert_ran_under, seen_by

# AReaL 2.0's distillation with a served teacher: its engine keys and its trainer's in one file
DISTILL = """\
experiment_name: tiny-distill
trial_name: t0
seed: 3
tokenizer_path: ${actor.path}
post_exit_hook: 'echo "hook $LOG_DIR $AREAL_EXIT_STATUS" >> "$AREAL_RUN_DIR/hook-ran.txt"'
cluster:
  n_nodes: 1
  n_gpus_per_node: 8
  fileroot: /tmp/areal2-vocab/files
  name_resolve: {type: nfs, nfs_record_root: /tmp/areal2-vocab/names}
scheduler: {type: null}
rollout:
  backend: "vllm:d1p1t1"
  scheduling_spec: ${actor.scheduling_spec}
  deterministic_sampling: true
  lora_name: tiny-lora
  workers_ready_timeout: 40.0
gconfig: {n_samples: 2, max_new_tokens: 8}
actor:
  backend: "fsdp:d1p1t1"
  path: /models/student
  weight_update_mode: xccl
  enable_delta_weight_update: true
  weight_update_delta_method: adamw
  weight_update_anchor_interval: 4
  workers_ready_timeout: 45.0
  optimizer_dtype: float32
  optimizer: {type: adam, lr: 1.0e-5}
  scheduling_spec:
    - {task_type: worker, gpu: 1, cpu: 2, mem: 16, env_vars: {}}
teacher:
  engine_type: rollout
  path: /models/teacher
  rollout:
    backend: "vllm:d1p1t2"
    scheduling_spec: ${actor.scheduling_spec}
  rl_loss_weight: 1.0
  distill_loss_weight: 5e-3
ref:
  backend: ${actor.backend}
  path: ${actor.path}
  scheduling_strategy: {type: colocation, target: actor}
  scheduling_spec: ${actor.scheduling_spec}
vllm:
  model: ${actor.path}
  max_model_len: 512
  gpu_memory_utilization: 0.5
train_dataset: {batch_size: 4, path: gsm8k, type: rl}
"""
# AReaL 2.0's AWEX colocation: the weight update mode alone puts rollout on the actor's GPUs
AWEX = """\
experiment_name: tiny-awex
trial_name: t0
cluster: {n_nodes: 1, n_gpus_per_node: 2}
rollout:
  backend: "sglang:d1t2p1"
  scheduling_spec: ${actor.scheduling_spec}
actor:
  backend: "megatron:d2"
  path: /models/tiny
  weight_update_mode: awex
  scheduling_spec:
    - {gpu: 1, mem: 32, env_vars: {TMS_INIT_ENABLE: "0"}}
ref:
  backend: ${actor.backend}
  scheduling_strategy: {type: colocation, target: actor}
  scheduling_spec: ${actor.scheduling_spec}
sglang: {mem_fraction_static: 0.3, enable_memory_saver: true}
"""
ENTRY = "examples/tiny/train.py"  # another trainer's script: plan does not need it to exist
CUDA = ["cluster.device=cuda", f"trainer.entry={ENTRY}"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("areal2")
    (d / "distill.yaml").write_text(DISTILL)
    (d / "awex.yaml").write_text(AWEX)
    train = DISTILL.replace(
        """  engine_type: rollout
  path: /models/teacher
  rollout:
    backend: "vllm:d1p1t2"
    scheduling_spec: ${actor.scheduling_spec}""",
        """  engine_type: train
  train:
    backend: "fsdp:d1p1t4"
    path: /models/teacher
    dtype: float32
    mb_spec: {max_tokens_per_mb: 2048}
    scheduling_spec: ${actor.scheduling_spec}""",
    )
    (d / "train_teacher.yaml").write_text(train)
    old = DISTILL.split("teacher:\n")[0] + "teacher:\n  backend: 'fsdp:d1p1t4'\n  path: /m\n"
    (d / "teacher_1x.yaml").write_text(old)
    return d


def layout(prep):
    return {n: (str(c.alloc), c.kind, c.gpus) for n, c in prep.plan.components.items()}


def processes(prep, run_dir="/runs/r1"):
    return build_request(prep, Path(run_dir), counted_ports(30000))


# ----------------------------------------------------------------------------- the teacher
def test_areal2s_rollout_teacher_is_a_serving_component_as_areal_places_it(folder):
    """AReaL runs the teacher as one vLLM server with tensor parallel 2 on GPUs 2-3: after the
    rollout (0) and the actor with its colocated ref (1)."""
    prep = prepared_in(folder, "distill", CUDA)
    assert layout(prep) == {
        "rollout": ("vllm:d1", "serve", (0,)),
        "actor": ("fsdp:d1", "train", (1,)),
        "ref": ("fsdp:d1", "train", (1,)),
        "teacher": ("vllm:t2", "serve", (2, 3)),
    }
    teacher = prep.plan.components["teacher"]
    assert [i.gpus for i in teacher.instances] == [(2, 3)]
    # frozen: no weight sync reaches it; the actor feeds the rollout only
    assert [(w.src, w.dst) for w in prep.plan.weight_sync] == [("actor", "rollout")]
    plan, request = processes(prep)
    (server,) = [p for p in plan.processes if p.component == "teacher"]
    argv = list(server.argv)
    assert argv[argv.index("--model") + 1] == "/models/teacher"  # teacher.path, its own model
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    # AReaL's vllm: section reaches the teacher's servers too, as AReaL's trainer starts them
    assert argv[argv.index("--max-model-len") + 1] == "512"
    (trainer,) = [p for p in plan.processes if p.role == "trainer"]
    port = server.ports[0]
    assert trainer.env["AREAL_TEACHER_ADDRS"] == f"{host_placeholder(0)}:{port}"
    rollout_port = next(p for p in plan.processes if p.component == "rollout").ports[0]
    # the rollout's servers are not the teacher's
    assert trainer.env["AREAL_LLM_SERVER_ADDRS"] == f"{host_placeholder(0)}:{rollout_port}"
    assert "teacher" in request.asks  # its scheduling_spec (the actor's, interpolated)


def test_a_served_teachers_memory_is_its_own_models_with_its_kv_cache(tiny_model, tmp_path):
    """Our keys: the served teacher's GPUs hold its own model's weights (an 8B teacher beside
    the tiny student), split by its tp, and its KV cache in what its memory fraction leaves."""
    from tests.model_configs import MODELS

    teacher = tmp_path / "llama-3-8b"
    teacher.mkdir()
    (teacher / "config.json").write_text(json.dumps(MODELS["Llama-3-8B"]["config"]))
    prep = prepare(
        [
            "cluster.device=cuda",
            "cluster.gpus_per_node=4",
            "cluster.gpu_memory_gib=80",
            "rollout.backend=vllm:d1",
            "actor.backend=fsdp:d1",
            "teacher.backend=vllm:d1t2",
            f"teacher.model_path={teacher}",
            f"model_path={tiny_model}",
        ],
        to_run=False,
    )
    engines = prep.plan.meta["memory"]["engines"]
    assert engines["rollout"]["parts"]["weights"] < 0.1  # the tiny student
    weights = engines["teacher"]["parts"]["weights"]
    assert 7.0 < weights < 8.0, engines["teacher"]  # 8.03B params in bf16, tp 2: ~7.5 GiB
    assert engines["teacher"]["parts"]["kv_cache"] > 0 and engines["teacher"]["phase"] == "rollout"
    assert prep.plan.meta["memory"]["fits"] is True


def test_areal2s_train_teacher_and_areal1s_teacher_backend_are_todays_teacher(folder):
    for name in ("train_teacher", "teacher_1x"):
        prep = prepared_in(folder, name, CUDA)
        assert layout(prep)["teacher"] == ("fsdp:t4", "train", (2, 3, 4, 5)), name
        assert prep.planned.engines["teacher"].model_path in ("/models/teacher", "/m")
    trained = prepared_in(folder, "train_teacher", CUDA).planned.engines["teacher"]
    assert trained.training is not None and trained.training.dtype == "float32"
    assert trained.training.max_tokens_per_mb == 2048 and not trained.training.trainable


def test_both_teacher_spellings_are_one_error_line(folder, tmp_path):
    both = DISTILL.replace(
        "  engine_type: rollout\n", "  engine_type: rollout\n  backend: fsdp:d2\n"
    )
    (tmp_path / "both.yaml").write_text(both)
    out = run("plan", "-cd", str(tmp_path), "-cn", "both", *CUDA)
    assert one_error_line(out) == (
        "error: teacher.backend=fsdp:d2 (AReaL 1.x's teacher) and teacher.rollout.backend="
        "vllm:d1p1t2 (AReaL 2.0's) are both set: keep one"
    )
    # the command line's teacher.backend wins over the file's, said in the plan
    prep = prepared_in(folder, "distill", [*CUDA, "teacher.backend=vllm:d2"])
    assert layout(prep)["teacher"][:2] == ("vllm:d2", "serve")
    assert any("wins over teacher.rollout.backend" in w for w in prep.plan.warnings)
    with pytest.raises(ConfigError, match=r"teacher.engine_type='judge': choose rollout or train"):
        prepared_in(folder, "distill", [*CUDA, "teacher.engine_type=judge"])


def test_our_teacher_on_a_serving_backend_plans_servers_for_our_recipe():
    prep = prepare(
        [
            "cluster.device=cuda",
            "cluster.gpus_per_node=4",
            "teacher.backend=vllm:d1",
            "recipe.distill_loss_weight=0.01",
        ],
        to_run=False,
    )
    assert layout(prep)["teacher"] == ("vllm:d1", "serve", (3,))  # after rollout and actor
    assert prep.plan.meta["recipe"]["distill_loss_weight"] == 0.01
    wanted = (
        r"teacher needs a training or inference backend \(fsdp, megatron, archon, sglang, vllm\)"
    )
    with pytest.raises(ConfigError, match=wanted):
        prepare(["teacher.backend=process:d1"], to_run=False)


def test_areals_teacher_loss_weights_are_our_recipes_options(folder, tmp_path):
    (tmp_path / "ours.yaml").write_text(
        "defaults: [config, _self_]\nteacher: {engine_type: rollout, rollout: {backend: "
        "'vllm:d1'}, distill_loss_weight: 0.02, rl_loss_weight: 0.5}\n"
    )
    prep = prepared_in(tmp_path, "ours", ["cluster.device=cpu"])
    assert prep.plan.meta["recipe"]["distill_loss_weight"] == 0.02
    assert prep.plan.meta["recipe"]["rl_loss_weight"] == 0.5
    assert layout(prep)["teacher"][:2] == ("vllm:d1", "serve")


def test_the_teachers_and_engines_new_keys_reach_the_entry_as_written(folder):
    """AReaL 2.0's teacher section and the engines' new keys are the trainer's: its --config
    file has them as the file wrote them."""
    handed = prepared_in(folder, "distill", CUDA).run.handoff
    assert handed is not None
    config = handed.config
    assert config["teacher"]["engine_type"] == "rollout"
    assert config["teacher"]["rollout"]["backend"] == "vllm:d1p1t2"
    assert config["teacher"]["path"] == "/models/teacher"
    assert config["teacher"]["distill_loss_weight"] == 5e-3
    actor = config["actor"]
    assert (actor["weight_update_mode"], actor["enable_delta_weight_update"]) == ("xccl", True)
    assert actor["weight_update_delta_method"] == "adamw"
    assert actor["weight_update_anchor_interval"] == 4
    assert actor["workers_ready_timeout"] == 45.0 and actor["optimizer_dtype"] == "float32"
    rollout = config["rollout"]
    assert rollout["deterministic_sampling"] is True and rollout["lora_name"] == "tiny-lora"
    assert rollout["workers_ready_timeout"] == 40.0
    assert config["post_exit_hook"].startswith("echo")
    assert config["ref"]["scheduling_spec"] == config["actor"]["scheduling_spec"]


# ----------------------------------------------------------------------------- placement
def test_an_engines_scheduling_spec_interpolating_anothers_keeps_its_value(folder):
    """`ref.scheduling_spec: ${actor.scheduling_spec}` (every AReaL example writes it): read
    after the actor's was taken, it still has the actor's value."""
    prep = prepared_in(folder, "distill", [*CUDA, "launcher=slurm"])
    _, request = processes(prep)
    assert request.asks["ref"].cpu == request.asks["actor"].cpu == 2
    assert request.asks["teacher"].mem_gib == 16


def test_an_engine_the_file_sets_null_is_off(tmp_path):
    (tmp_path / "noref.yaml").write_text(DISTILL.split("ref:\n")[0] + "ref: null\n")
    prep = prepared_in(tmp_path, "noref", CUDA)
    assert "ref" not in prep.plan.components
    assert prep.run.handoff is not None and prep.run.handoff.config["ref"] is None


def test_awex_puts_rollout_on_the_actors_gpus_releasing_between_phases(folder):
    prep = prepared_in(folder, "awex", CUDA)
    assert layout(prep) == {
        "rollout": ("sglang:t2", "serve", (0, 1)),
        "actor": ("megatron:d2", "train", (0, 1)),
        "ref": ("megatron:d2", "train", (0, 1)),
    }
    assert prep.plan.mode == "collocated"
    engines = prep.planned.engines
    assert engines["rollout"].offload and engines["actor"].offload
    assert any(
        n.startswith("actor.weight_update_mode=awex: actor and rollout take turns")
        for n in prep.planned.notes
    )
    # a rollout colocated or placed otherwise keeps its placement; xccl is no AWEX
    apart = prepared_in(
        folder, "awex", [*CUDA, "cluster.n_gpus_per_node=4", "actor.weight_update_mode=xccl"]
    )
    assert layout(apart)["rollout"][2] == (0, 1) and layout(apart)["actor"][2] == (2, 3)
    v2 = prepared_in(folder, "awex", [*CUDA, "cluster.n_gpus_per_node=4", "+actor._version=v2"])
    assert layout(v2)["actor"][2] == (2, 3)  # controller v2: AWEX is a transport, no colocation


def test_a_colocated_role_of_another_replica_count_whose_gpus_add_up(tmp_path):
    """#1575: 16 SGLang servers of 4 GPUs over 64 one-GPU actor ranks, as AReaL's Ray
    scheduler groups them: each server's GPUs on one node, among its actor ranks."""
    (tmp_path / "grouped.yaml").write_text(
        "experiment_name: g\ntrial_name: t\ncluster: {n_nodes: 8, n_gpus_per_node: 8}\n"
        "scheduler: {type: ray}\n"
        "rollout: {backend: 'sglang:d16t4', scheduling_strategy: {type: colocation, "
        "target: actor}}\nactor: {backend: 'fsdp:d64', path: /m}\n"
    )
    prep = prepared_in(tmp_path, "grouped", CUDA)
    rollout, actor = prep.plan.components["rollout"], prep.plan.components["actor"]
    assert rollout.gpus == actor.gpus == tuple(range(64)) and len(rollout.instances) == 16
    assert all(len(i.nodes) == 1 and len(i.gpus) == 4 for i in rollout.instances)
    assert len(prep.plan.weight_sync[0].pairs) == 64
    with pytest.raises(PlacementError, match=r"needs rollout's world size .* to equal actor's"):
        prepared_in(tmp_path, "grouped", [*CUDA, "rollout.backend=sglang:d8t4"])


def test_areals_single_controller_on_slurm_is_not_bounded_by_n_nodes(tmp_path):
    """AReaL's Slurm scheduler asks each engine's nodes in a job of its own and never reads
    cluster.n_nodes (examples/swe: engines of 4 + 4 nodes beside n_nodes: 4): planned for what
    the engines ask, with a note. AReaL's SPMD launchers check n_nodes, and a size given on
    the command line is the user's: there, too few nodes is the planner's error line."""
    (tmp_path / "swe.yaml").write_text(
        "experiment_name: s\ntrial_name: t\ncluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        "scheduler: {type: slurm}\nrollout: {backend: 'sglang:d2t4p1'}\n"
        "actor: {backend: 'megatron:(attn:d2t4|ffn:d2e4)', path: /m}\n"
        "ref: {backend: '${actor.backend}', scheduling_strategy: {type: colocation, "
        "target: actor}}\n"
    )
    prep = prepared_in(tmp_path, "swe", CUDA)
    assert prep.plan.cluster.num_nodes == 2
    assert layout(prep)["rollout"][2] == tuple(range(8))
    assert layout(prep)["actor"][2] == layout(prep)["ref"][2] == tuple(range(8, 16))
    assert (
        "cluster.n_nodes=1: AReaL's single controller on slurm (scheduler.type=slurm) asks "
        "each engine's nodes apart and does not read n_nodes (areal/infra/scheduler/slurm.py): "
        "planned for the 2 nodes its engines ask (rollout 1, actor 1, 8 GPUs a node)"
    ) in prep.planned.notes
    for given in ("scheduler.type=null", "cluster.n_nodes=1"):
        with pytest.raises(PlacementError, match=r"16 in all, but the cluster has 8 \(1 node"):
            prepared_in(tmp_path, "swe", [*CUDA, given])
    # a ref of its own (AReaL's default strategy) counts where AReaL starts it: kl_ctl > 0
    apart = ["ref.scheduling_strategy=null", "scheduler.type=ray"]
    assert prepared_in(tmp_path, "swe", [*CUDA, *apart]).plan.cluster.num_nodes == 3
    kl0 = prepared_in(tmp_path, "swe", [*CUDA, *apart, "+actor.kl_ctl=0"])
    assert kl0.plan.cluster.num_nodes == 2
    assert any("(rollout 1, actor 1, 8 GPUs a node)" in n for n in kl0.planned.notes)
    with pytest.raises(ConfigError, match=r"^actor.kl_ctl='abc': a number \(AReaL's KL"):
        prepared_in(tmp_path, "swe", [*CUDA, *apart, "+actor.kl_ctl=abc"])


# ----------------------------------------------------------------------------- the grammar
def test_the_named_hybrid_form_in_allocation_mode_and_in_a_backend_field():
    text = "megatron[actor]:(attn:d1p2t4|ffn:d1p2e4)"
    given = ["cluster.device=cuda", "cluster.gpus_per_node=8", "rollout=none"]
    field = prepare([*given, f"actor.backend='{text}'"], to_run=False)
    mode = prepare([*given, f"+allocation_mode='{text}'"], to_run=False)
    bare = prepare([*given, "actor.backend='megatron:attn:d1p2t4|ffn:d1p2e4'"], to_run=False)
    for prep in (field, mode, bare):
        actor = prep.plan.components["actor"].alloc
        assert (actor.tp, actor.pp, actor.ep, actor.hybrid) == (4, 2, 4, True)
        assert str(actor) == "megatron:(attn:p2t4|ffn:p2e4)"
    assert parse_backend(text, engine="actor") == parse_backend("megatron:(attn:d1p2t4|ffn:d1p2e4)")
    with pytest.raises(
        AllocationError, match=r"column 9: 'critic' names another engine than actor"
    ):
        parse_backend("megatron[critic]:(attn:d1p2t4|ffn:d1p2e4)", engine="actor")
    with pytest.raises(AllocationError, match=r"engine names like '\[actor\]' are allocation_mode"):
        parse_backend(text)


# ----------------------------------------------------------------------------- Slurm
def test_reservation_and_exclusive_are_the_slurm_jobs_options(folder):
    spec = (
        "+actor.scheduling_spec.0.reservation=maint",
        "+actor.scheduling_spec.0.exclusive=true",
        "cluster.n_gpus_per_node=16",  # the job takes part of each node: --exclusive is asked
    )
    prep = prepared_in(folder, "distill", [*CUDA, "launcher=slurm", *spec])
    _, request = processes(prep)
    lines = prep.runner.job(request).script.splitlines()
    assert "#SBATCH --reservation=maint" in lines and "#SBATCH --exclusive" in lines, lines
    assert prep.runner.notes(request) == []  # Slurm honours both
    mine = prepared_in(
        folder, "distill", [*CUDA, "launcher=slurm", *spec, "launcher.reservation=own"]
    )
    _, request = processes(mine)
    assert "#SBATCH --reservation=own" in mine.runner.job(request).script.splitlines()
    assert any("launcher.reservation=own is used" in n for n in mine.runner.notes(request))
    local = prepared_in(folder, "distill", [*CUDA, *spec[:2]])
    _, request = processes(local)
    assert any(
        "reservation, exclusive not honoured by the local runner" in n
        for n in local.runner.notes(request)
    )


def test_two_engines_asking_different_reservations_or_exclusive_are_one_error_line(
    folder, tmp_path
):
    for key, a, b, says in (
        ("reservation", "r1", "r2", "asks Slurm for the reservation r2 but"),
        ("exclusive", "true", "false", ".exclusive=false but"),
    ):
        out = run(
            "plan",
            "-cd",
            str(folder),
            "-cn",
            "distill",
            *CUDA,
            "launcher=slurm",
            f"+actor.scheduling_spec.0.{key}={a}",
            f"rollout.scheduling_spec=[{{{key}: {b}}}]",
            f"hydra.run.dir={tmp_path}/{key}",
        )
        line = one_error_line(out)
        assert says in line and "give both the same" in line, line


# ----------------------------------------------------------------------------- exit hook
def test_post_exit_hook_is_areals_and_ours_under_every_runner(folder):
    ours = prepared_in(folder, "distill", CUDA)
    _, request = processes(ours)
    assert request.post_exit_hook is not None and request.post_exit_hook.startswith("echo")
    slurm = prepared_in(folder, "distill", [*CUDA, "launcher=slurm"])
    _, request = processes(slurm)
    script = slurm.runner.job(request).script
    assert re.search(
        r'^\S+ -m launcher.node.exithook --run-dir "\$RUN_DIR" --status "\$rc"\nexit "\$rc"$',
        script,
        re.M,
    ), script
    ray = prepared_in(folder, "distill", [*CUDA, "launcher=ray"])
    _, request = processes(ray)
    assert "post_exit_hook" in ray.runner.dryrun(request)
    with pytest.raises(ConfigError, match=r"post_exit_hook and launcher.post_exit_hook are both"):
        prepared_in(folder, "distill", [*CUDA, "launcher.post_exit_hook=true"])
    with pytest.raises(ConfigError, match=r"launcher.post_exit_hook: 70000 characters"):
        prepare([f"launcher.post_exit_hook={'x' * 70000}"], to_run=False)


# ----------------------------------------------------------------------------- a real run
@pytest.fixture(scope="module")
def distill_run(stand_in, tmp_path_factory) -> Path:
    """AReaL 2.0's distillation config on this machine's CPU: the stand-in's server as the
    rollout's and the teacher's, its entry as the trainer, each in the stand-in's venv."""
    where = tmp_path_factory.mktemp("areal2-run")
    for name in ("student", "teacher"):
        (where / name).mkdir()
    py = stand_in.python
    d = where / "conf"
    d.mkdir()
    (d / "cpu.yaml").write_text(
        DISTILL.replace("/tmp/areal2-vocab", str(where))
        .replace("n_gpus_per_node: 8", "n_gpus_per_node: 0")
        .replace("/models/", f"{where}/")
        .replace('"vllm:d1p1t2"', '"vllm:d1"')
        .replace(DISTILL[DISTILL.index("ref:\n") : DISTILL.index("vllm:\n")], "")  # no ref here
    )
    out = run(
        "-cd",
        str(d),
        "-cn",
        "cpu",
        f"trainer.entry={stand_in.entry}",
        f"trainer.python={py}",
        "actor.backend=fsdp:d2",
        f"rollout.python={py}",
        "rollout.server_module=areal_stand_in.server",
        f"teacher.python={py}",
        "teacher.server_module=areal_stand_in.server",
        "launcher.tracking=[]",
        f"hydra.run.dir={where}/run",
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return where / "run"


@pytest.mark.torch  # torchrun runs in the stand-in venv (torch through its .pth)
def test_a_real_run_serves_the_teacher_to_the_entry_and_runs_the_hook_once(distill_run, stand_in):
    request = json.loads((distill_run / "request.json").read_text())
    teacher = next(p for p in request["processes"] if p["component"] == "teacher")
    for rank in (0, 1):
        got = json.loads((distill_run / f"entry-seen-{rank}.json").read_text())
        assert got["teacher"] == f"127.0.0.1:{teacher['ports'][0]}"
        assert got["teacher_health"] == [200] and got["health"] == [200]
    served = json.loads((distill_run / "server-seen-teacher.json").read_text())["argv"]
    assert served[served.index("--model") + 1].endswith("/teacher")
    config = (distill_run / "entry_config.yaml").read_text()
    assert "engine_type: rollout" in config and "distill_loss_weight" in config
    ran = (distill_run / "hook-ran.txt").read_text().splitlines()
    assert ran == [f"hook {distill_run}/logs 0"]  # once, with LOG_DIR and the exit status
    assert_ran_under(
        stand_in,
        seen_by(distill_run),
        server_module="areal_stand_in.server",
        also=frozenset({"teacher"}),
    )


def test_the_hook_of_a_failed_run_is_told_its_exit_code_and_changes_nothing(tmp_path):
    """A local run through the whole tree (tests/launch_driver.py) whose trainer exits 5: the
    hook runs once after it, is told the run's exit code (1: a process failed), fails itself,
    and the run still exits 1; its line is the console's last."""
    import subprocess
    import sys

    specs = tmp_path / "specs.json"
    specs.write_text(
        json.dumps(
            [
                {
                    "name": "actor",
                    "component": "actor",
                    "role": "trainer",
                    "node": 0,
                    "argv": [sys.executable, "-c", "import sys; sys.exit(5)"],
                }
            ]
        )
    )
    hook = 'echo "$AREAL_EXIT_STATUS $LOG_DIR" >> "$AREAL_RUN_DIR/hook.txt"; exit 7'
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parent / "launch_driver.py"),
            str(specs),
            str(tmp_path / "run"),
            "--post-exit-hook",
            hook,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert (tmp_path / "run" / "hook.txt").read_text() == f"1 {tmp_path / 'run'}/logs\n"
    last = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"post_exit_hook: exit 7 \(the run's exit code stands\) after [\d.]+ s; its output: "
        rf"{tmp_path / 'run'}/logs/post_exit_hook.log",
        last,
    ), out.stdout


def test_a_hook_past_its_bound_is_killed_with_everything_it_started(tmp_path):
    """The bound (600 s in a run) is the hook's: at it the hook and what it started in the
    background are killed, and the line says so; a hook that ends takes its leftovers too."""
    from launcher.node.exithook import run_hook
    from tests.processes import wait_until

    def gone(pid_file: Path) -> bool:
        stat = Path(f"/proc/{int(pid_file.read_text())}/stat")
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except OSError:
            return True

    child = tmp_path / "child.pid"
    got = run_hook(f"sleep 60 & echo $! > {child}; sleep 60", str(tmp_path), 0, timeout_s=1.0)
    assert got.code is None and got.seconds < 5.0  # the bound, with a 5x margin
    assert got.line() == (
        f"post_exit_hook: killed after 1 s (its bound); its output: {tmp_path}/logs/"
        "post_exit_hook.log"
    )
    assert wait_until(lambda: gone(child), within_s=10)
    left = tmp_path / "left.pid"
    done = run_hook(f"sleep 60 & echo $! > {left}", str(tmp_path), 3)
    assert done.code == 0 and done.line().startswith("post_exit_hook: ok after ")
    assert wait_until(lambda: gone(left), within_s=10)


def test_a_file_built_on_another_of_its_own_and_an_escaped_hook_read_as_areal_reads_them(
    folder, tmp_path
):
    """AReaL's `defaults: [../math/base@_global_, _self_]` (examples/dte): its own file under
    it, merged as Hydra merges them for AReaL; its escaped shell variables (`\\${A:-\\${B:-x}}`,
    examples/swe) are the hook's shell's, not interpolations."""
    (tmp_path / "math").mkdir()
    (tmp_path / "math" / "base.yaml").write_text(DISTILL)
    (tmp_path / "dte").mkdir()
    (tmp_path / "dte" / "big.yaml").write_text(
        "defaults:\n  - ../math/base@_global_\n  - _self_\nexperiment_name: dte\n"
        "actor: {backend: 'fsdp:d2'}\n"
        "post_exit_hook: 'R=\\${A_ROOT:-\\${B_ROOT:-/x}}; echo $R'\n"
    )
    prep = prepared_in(tmp_path / "dte", "big", CUDA)
    assert layout(prep)["actor"][:2] == ("fsdp:d2", "train")
    assert layout(prep)["teacher"][:2] == ("vllm:t2", "serve")  # the base file's
    _, request = processes(prep)
    assert request.post_exit_hook == "R=${A_ROOT:-${B_ROOT:-/x}}; echo $R"
    assert prep.run.handoff.config["experiment_name"] == "dte"


def test_a_skypilot_task_or_a_reference_file_is_said_not_to_be_an_experiment(tmp_path):
    """AReaL's examples hold SkyPilot tasks (examples/skypilot) and a file of keys to paste
    into an experiment (examples/environ_ref.yaml): one line says what each is."""
    (tmp_path / "task.sky.yaml").write_text(
        "name: t\nresources: {accelerators: A100:8}\nnum_nodes: 1\nrun: |\n  python -m x\n"
    )
    (tmp_path / "ref.yaml").write_text("env_vars: {NCCL_DEBUG: WARN}\n")
    out = run("plan", "-cd", str(tmp_path), "-cn", "task.sky", *CUDA)
    assert one_error_line(out).startswith("error: this file is a SkyPilot task (resources, run:")
    out = run("plan", "-cd", str(tmp_path), "-cn", "ref", *CUDA)
    assert one_error_line(out) == (
        "error: this file sets env_vars but no experiment (none of experiment_name, cluster, "
        "actor, rollout, allocation_mode): a file like this (AReaL's reference of keys, a group "
        "file of RLinf's) is part of an experiment config, not one to run"
    )
