"""AReaL's vocabulary as AReaL means it (launcher/config/areal.py): an experiment YAML written
the way AReaL writes them (no defaults list; cluster.n_nodes, scheduler.type,
scheduling_strategy, scheduling_spec beside the trainer's own keys), planned from a user
folder with -cd/-cn and its own entry script. Plan level, in this process (milliseconds each),
plus one real local run that shows the entry gets its config (--config FILE and the overrides).
The configs are ours, written in AReaL's vocabulary; none is copied from AReaL."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.cli.launch import build_request, prepare
from launcher.node.ports import counted_ports
from launcher.spec.errors import ConfigError, PlacementError, UserError
from launcher.spec.request import Folders
from launcher.spec.runfolder import ENTRY_CONFIG
from tests.areal_launch import one_error_line, prepared_in, run

# an AReaL-style GRPO experiment: the launcher's keys and the trainer's, in one file
GRPO = """\
experiment_name: tiny-grpo
trial_name: t0
seed: 7
total_train_epochs: 2
tokenizer_path: ${actor.path}
cluster:
  n_nodes: 1
  n_gpus_per_node: 4
  fileroot: /tmp/areal-vocab/files
  name_resolve: {type: nfs, nfs_record_root: /tmp/areal-vocab/names}
scheduler: {type: null}
rollout:
  backend: "vllm:d2"
  consumer_batch_size: ${train_dataset.batch_size}
  scheduling_spec: ${actor.scheduling_spec}
gconfig: {n_samples: 4, max_new_tokens: 64}
actor:
  backend: "fsdp:d2"
  path: /models/tiny-qwen
  optimizer: {type: adam, lr: 1.0e-5}
  mb_spec: {max_tokens_per_mb: 4096, packing_algorithm: ffd}
  scheduling_spec:
    - {gpu: 1, cpu: 4, mem: 16, cmd: python3 -m rpc, env_vars: {TOKENIZERS_PARALLELISM: "false"}}
ref:
  backend: ${actor.backend}
  path: ${actor.path}
  scheduling_strategy: {type: colocation, target: actor}
train_dataset: {batch_size: 8, path: gsm8k, type: rl}
"""
ENTRY = "examples/tiny/train.py"  # another trainer's script: plan does not need it to exist
CUDA = ["cluster.device=cuda", f"trainer.entry={ENTRY}"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("areal")
    (d / "grpo.yaml").write_text(GRPO)
    (d / "sft.yaml").write_text(
        "experiment_name: sft\ntrial_name: t\nseed: 1\n"
        "cluster: {n_nodes: 1, n_gpus_per_node: 2}\n"
        "actor: {backend: 'fsdp:d2', path: /m, optimizer: {lr: 1},\n"
        "        max_new_tokens: '${gconfig.max_new_tokens}'}\n"
    )
    (d / "ours.yaml").write_text("defaults: [config, _self_]\nseed: 1\n")
    (d / "theirs.yaml").write_text(
        f"defaults: [config, _self_]\nseed: 1\ntrainer: {{entry: {ENTRY}}}\n"
    )
    return d


def prepared(folder: Path, overrides=(), name="grpo"):
    return prepared_in(folder, name, overrides)


def processes(prep, run_dir="/runs/r1"):
    plan, request = build_request(prep, Path(run_dir), counted_ports(30000))
    return plan, request


def layout(prep):
    return {n: (str(c.alloc), c.gpus) for n, c in prep.plan.components.items()}


def test_an_areal_config_plans_as_written_with_its_own_entry(folder):
    prep = prepared(folder, CUDA)
    assert layout(prep) == {
        "rollout": ("vllm:d2", (0, 1)),
        "actor": ("fsdp:d2", (2, 3)),
        "ref": ("fsdp:d2", (2, 3)),
    }  # ref colocated with its target
    cluster = prep.plan.cluster
    assert (cluster.num_nodes, cluster.gpus_per_node) == (1, 4)
    meta = prep.plan.meta
    assert meta["model_path"] == "/models/tiny-qwen"  # AReaL's actor.path
    assert "fileroot" not in meta and "name_resolve" not in meta  # AReaL's, not the plan's
    _, request = processes(prep)  # the folders each node makes are the file's
    assert request.folders == Folders(
        make=("/tmp/areal-vocab/files", "/tmp/areal-vocab/names"),
        clear=("/tmp/areal-vocab/names/{user}/tiny-grpo/t0",),  # this trial's records
    )


def test_the_entry_gets_the_whole_config_and_the_users_overrides(folder):
    prep = prepared(
        folder,
        [*CUDA, "gconfig.n_samples=8", "+actor.optimizer.beta1=0.8", "launcher.base_port=31000"],
    )
    handed = prep.run.handoff
    assert handed is not None
    config = handed.config
    assert config["seed"] == 7 and config["total_train_epochs"] == 2
    assert config["gconfig"] == {"n_samples": 8, "max_new_tokens": 64}
    assert config["actor"]["optimizer"] == {"type": "adam", "lr": 1.0e-5, "beta1": 0.8}
    assert config["tokenizer_path"] == "/models/tiny-qwen"  # resolved
    assert config["cluster"] == {
        "n_nodes": 1,
        "n_gpus_per_node": 4,
        "fileroot": "/tmp/areal-vocab/files",
        "name_resolve": {"type": "nfs", "nfs_record_root": "/tmp/areal-vocab/names"},
    }
    assert "launcher" not in config and "recipe" not in config and "model_path" not in config
    assert "device" not in config["cluster"]  # ours, not the file's: AReaL's schema lacks it
    assert OmegaConf.to_container(OmegaConf.create(handed.text())) == config
    plan, _ = processes(prep)
    trainer = next(p for p in plan.processes if p.component.startswith("actor"))
    at = trainer.argv.index("--config")
    assert trainer.argv[at:] == (
        "--config",
        f"/runs/r1/{ENTRY_CONFIG}",
        "gconfig.n_samples=8",
        "++actor.optimizer.beta1=0.8",
    )


def test_a_top_level_interpolation_follows_an_override_of_what_it_names(folder):
    """`tokenizer_path: ${actor.path}` at the top of the file, actor.path given on the command
    line: the entry's file has the override's path for both (a top-level value of the file was
    resolved against the file's own actor.path before the command line applied)."""
    handed = prepared(folder, [*CUDA, "actor.path=/models/other"]).run.handoff
    assert handed is not None
    assert handed.config["tokenizer_path"] == handed.config["actor"]["path"] == "/models/other"


def test_a_file_without_fileroot_gets_the_run_folders_as_overrides_its_entry_reads(tmp_path):
    """AReaL's defaults are folders under /tmp that every run shares: a file that sets neither
    fileroot nor a record root gets the run's own, in the request and on the entry's argv."""
    (tmp_path / "bare.yaml").write_text(
        GRPO.replace("  fileroot: /tmp/areal-vocab/files\n", "").replace(
            ", nfs_record_root: /tmp/areal-vocab/names", ""
        )
    )
    plan, request = processes(prepared(tmp_path, CUDA, name="bare"))
    assert request.folders == Folders(
        make=("/runs/r1", "/runs/r1/name_resolve"),
        clear=("/runs/r1/name_resolve/{user}/tiny-grpo/t0",),
    )
    trainer = next(p for p in plan.processes if p.component.startswith("actor"))
    assert trainer.argv[-2:] == (
        "++cluster.fileroot=/runs/r1",
        "++cluster.name_resolve.nfs_record_root=/runs/r1/name_resolve",
    )


def test_a_peer_file_named_config_is_read_not_shadowed_by_ours(folder, tmp_path):
    (tmp_path / "config.yaml").write_text(GRPO)
    prep = prepared(tmp_path, CUDA, name="config")
    assert prep.plan.meta["experiment_name"] == "tiny-grpo"
    assert prep.run.handoff.config["seed"] == 7
    out = run("plan", "-cp", str(tmp_path), "-cn", "config", f"trainer.entry={ENTRY}")
    assert "give its folder with --config-dir/-cd instead" in one_error_line(out)


def test_an_engine_the_file_does_not_name_is_off(folder):
    prep = prepared(folder, ["cluster.device=cuda", f"trainer.entry={ENTRY}"], name="sft")
    assert layout(prep) == {"actor": ("fsdp:d2", (0, 1))}
    assert prep.run.handoff.config["actor"]["optimizer"] == {"lr": 1}
    # a key only AReaL's schema has (its gconfig defaults): handed as written, it resolves it
    assert prep.run.handoff.config["actor"]["max_new_tokens"] == "${gconfig.max_new_tokens}"


def test_our_recipe_refuses_an_areal_key_naming_the_entry_to_give(folder):
    with pytest.raises(ConfigError) as err:
        prepared(folder, ["cluster.device=cuda"])
    assert "unknown config key" in str(err.value) and "'grpo'" in str(err.value)
    assert "trainer.entry=SCRIPT" in str(err.value)
    with pytest.raises(
        ConfigError,
        match=r"unknown config key 'rollout.backnd'.*did you mean "
        r"'rollout.backend'",
    ):
        prepared(folder, ["+rollout.backnd=x"], name="ours")


def test_a_whole_config_of_ours_hands_unknown_keys_to_an_entry_not_ours(folder):
    with pytest.raises(ConfigError, match="unknown config key 'seed'"):
        prepared(folder, name="ours")
    prep = prepared(folder, name="theirs")
    assert prep.run.handoff.config == {"seed": 1}
    assert prepared(folder, name="config").run.handoff is None  # nothing of the entry's


def test_a_plus_key_on_the_command_line_is_the_entrys_own_only_for_its_entry():
    prep = prepare([f"trainer.entry={ENTRY}", "+seed=3", "+gconfig.n_samples=2"], to_run=False)
    assert prep.run.handoff.config == {"seed": 3, "gconfig": {"n_samples": 2}}
    assert prep.run.handoff.overrides == ("++seed=3", "++gconfig.n_samples=2")
    with pytest.raises(ConfigError, match="unknown config key 'seed'"):
        prepare(["+seed=3"], to_run=False)


def test_areal_node_and_gpu_counts_are_ours_one_value_each(folder):
    prep = prepared(folder, [*CUDA, "cluster.n_nodes=2", "cluster.n_gpus_per_node=2"])
    assert (prep.plan.cluster.num_nodes, prep.plan.cluster.gpus_per_node) == (2, 2)
    with pytest.raises(
        ConfigError,
        match=r"cluster.n_nodes=2 and cluster.num_nodes=3 .*write "
        r"one of them",
    ):
        prepared(folder, [*CUDA, "cluster.n_nodes=2", "cluster.num_nodes=3"])
    cpu = prepare(["cluster.n_gpus_per_node=0"], to_run=False)  # AReaL's CPU template
    assert cpu.plan.cluster.device == "cpu"


def test_scheduler_type_chooses_the_runner_and_conflicts_with_launcher(folder):
    prep = prepared(folder, [*CUDA, "scheduler.type=slurm"])
    assert type(prep.run.config.launcher).__module__ == "launcher.runners.slurm"
    assert (
        type(prepare(["scheduler.type=ray"], to_run=False).run.config.launcher).__module__
        == "launcher.runners.ray"
    )
    with pytest.raises(
        ConfigError, match="scheduler.type=slurm and launcher=ray choose different runners"
    ):
        prepared(folder, [*CUDA, "scheduler.type=slurm", "launcher=ray"])
    with pytest.raises(ConfigError, match="scheduler.type=k8s: areal-launch runs on"):
        prepare(["scheduler.type=k8s"], to_run=False)


def test_scheduling_strategy_colocation_and_separation(folder):
    apart = prepared(
        folder, [*CUDA, "cluster.n_gpus_per_node=6", "ref.scheduling_strategy.type=separation"]
    )
    assert layout(apart)["ref"] == ("fsdp:d2", (4, 5))
    with pytest.raises(
        PlacementError,
        match=r"ref.scheduling_strategy: colocation with actor "
        r"needs ref's world size",
    ):
        prepared(folder, [*CUDA, "ref.backend=fsdp:d1"])
    with pytest.raises(ConfigError, match="scheduling_strategy.type='near': choose"):
        prepared(folder, [*CUDA, "ref.scheduling_strategy.type=near"])
    onto = prepare(
        [
            "rollout.backend=vllm:d2",
            "actor.backend=fsdp:d2",
            "cluster.device=cuda",
            "cluster.gpus_per_node=2",
            "rollout.scheduling_strategy.type=colocation",
            "rollout.scheduling_strategy.target=actor",
        ],
        to_run=False,
    )
    assert layout(onto) == {"rollout": ("vllm:d2", (0, 1)), "actor": ("fsdp:d2", (0, 1))}


def test_scheduling_spec_locally_env_vars_and_a_note_for_the_rest(folder, monkeypatch):
    """env_vars reach the engine's processes; cpu is their thread count (OMP_NUM_THREADS and
    kin, as AReaL's local launcher sets them), unless the launcher's environment or env_vars
    set one already."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    prep = prepared(folder, CUDA)
    plan, _ = processes(prep)
    for p in plan.processes:  # rollout's spec is actor's (an interpolation), ref shares actor's
        assert p.env["TOKENIZERS_PARALLELISM"] == "false", p.name
        assert p.env["OMP_NUM_THREADS"] == "4" and "MKL_NUM_THREADS" not in p.env, p.name
    notes = [n for n in prep.planned.notes if "scheduling_spec" in n]  # no runner honours
    assert len(notes) == 2 and all("gpu, cmd not honoured" in n for n in notes)
    actor = next(n for n in notes if n.startswith("actor."))
    assert "env_vars" not in actor and "cpu" not in actor and "mem" not in actor
    _, request = processes(prep)  # the engine's asks: the local runner says what it cannot give
    assert prep.runner.notes(request) == [
        f"{name}.scheduling_spec: memory not honoured by the local runner (nothing is reserved "
        "on this machine, and nothing runs in a container)"
        for name in ("rollout", "actor")
    ]


def test_scheduling_spec_on_slurm_is_the_jobs_options(folder):
    spec = (
        "+actor.scheduling_spec.0.nodelist=gpu01",
        "+actor.scheduling_spec.0.exclude=gpu07",
        "+actor.scheduling_spec.0.image=img.sqsh",
    )
    prep = prepared(folder, [*CUDA, "launcher=slurm", *spec])
    _, request = processes(prep)
    script = prep.runner.job(request).script
    for line in (
        "#SBATCH --cpus-per-gpu=4",
        "#SBATCH --mem-per-gpu=16G",
        "#SBATCH --nodelist=gpu01",
        "#SBATCH --exclude=gpu07",
    ):
        assert line in script.splitlines(), script
    assert "--container-image=img.sqsh" in script
    notes = [n for n in prep.planned.notes if n.startswith("actor.scheduling_spec")]
    assert notes and "cpu" not in notes[0].split(" not ")[0] and "cmd" in notes[0]
    assert prep.runner.notes(request) == []  # Slurm honours every ask
    two = prepared(
        folder, [*CUDA, "launcher=slurm", *spec, "rollout.scheduling_spec=[{image: b.sqsh}]"]
    )
    with pytest.raises(
        ConfigError,
        match="rollout.scheduling_spec asks Slurm for the image b.sqsh but "
        "actor.scheduling_spec for img.sqsh: the job has one image",
    ):
        two.runner.check(processes(two)[1])


def test_engines_asking_slurm_different_cpus_get_the_most_for_every_gpu(folder):
    """One job step per node runs every engine, so the job asks the largest per-GPU ask."""
    prep = prepared(folder, [*CUDA, "launcher=slurm", "rollout.scheduling_spec=[{cpu: 8, mem: 4}]"])
    _, request = processes(prep)
    script = prep.runner.job(request).script.splitlines()
    assert "#SBATCH --cpus-per-gpu=8" in script and "#SBATCH --mem-per-gpu=16G" in script
    assert prep.runner.notes(request) == [
        "the engines ask for different CPUs per GPU (rollout.scheduling_spec 8, "
        "actor.scheduling_spec 4): the job asks 8 for every GPU (one job step per node runs "
        "every engine)",
        "the engines ask for different memory per GPU (rollout.scheduling_spec 4G, "
        "actor.scheduling_spec 16G): the job asks 16G for every GPU (one job step per node "
        "runs every engine)",
    ]
    own = prepared(folder, [*CUDA, "launcher=slurm", "launcher.cpus_per_gpu=2"])
    _, request = processes(own)  # the user's own value wins, said once
    assert "#SBATCH --cpus-per-gpu=2" in own.runner.job(request).script.splitlines()
    assert own.runner.notes(request) == [
        "rollout.scheduling_spec, actor.scheduling_spec ask for launcher.cpus_per_gpu=4; "
        "launcher.cpus_per_gpu=2 is used"
    ]


def test_on_ray_each_engines_cpu_mem_and_image_are_its_plan_nodes_asks(folder):
    """Ray reserves per plan node: the node actor's bundle asks the runner's CPUs plus each
    process's engines' asks per GPU; memory in bytes; the image is the actor's runtime_env."""
    from launcher.runners.rayjob import GIB, dry_run_text

    prep = prepared(
        folder,
        [
            *CUDA,
            "launcher=ray",
            "cluster.n_nodes=2",
            "rollout.scheduling_spec=[{cpu: 2, image: img:1}]",
            "cluster.component_placement={rollout: '0-1', actor: '4-5'}",
            "+actor.scheduling_spec.0.image=img:1",
        ],
    )
    _, request = processes(prep)
    assert prep.runner.notes(request) == []  # cpu, mem and image: each bundle's and actor's
    assert request.asks["actor"].cpu == 4 and request.asks["actor"].mem_gib == 16
    assert request.asks["rollout"].cpu == 2 and "ref" not in request.asks  # ref: none of its own
    job = prep.runner.job(request)  # node 0: two servers on a GPU each; node 1: actor+ref on 2
    assert job.bundles == (
        {"CPU": 1 + 2 * 2, "GPU": 2.0},
        {"CPU": 1 + 2 * 4, "GPU": 2.0, "memory": 2 * 16 * GIB},
    )
    assert job.image(0) == "img:1" and job.runtime_env(0, {}) == {"image_uri": "img:1"}
    assert "node actor 0 runs in the image img:1" in dry_run_text(job, "auto", None)
    with pytest.raises(UserError, match="different images \\(img:2, img:1\\)"):
        prep.runner.job(
            processes(
                prepared(
                    folder,
                    [
                        *CUDA,
                        "launcher=ray",
                        "rollout.scheduling_spec=[{image: img:2}]",
                        "+actor.scheduling_spec.0.image=img:1",
                    ],
                )
            )[1]
        )


@pytest.mark.parametrize(
    "item, says",
    [
        (
            "{cpu: -1}",
            "rollout.scheduling_spec.cpu=-1: CPU cores per GPU, a whole number from 0 to 1024",
        ),
        ("{mem: 10000000}", "rollout.scheduling_spec.mem=10000000: GiB of memory per GPU"),
        ("{image: 'a b'}", "rollout.scheduling_spec.image='a b': a container image name"),
    ],
)
def test_bad_ray_asks_are_one_line(folder, item, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        prepared(folder, [*CUDA, "launcher=ray", f"rollout.scheduling_spec=[{item}]"])


def test_scheduling_spec_values_are_checked_alike_for_every_runner(folder):
    """An engine's asks are checked before any runner reads them: a negative CPU count or a
    size past the bound is one line naming where it came from, on Slurm as on Ray."""
    for item, said in (
        ("{cpu: -3}", "cpu=-3: CPU cores per GPU"),
        ("{mem: 100000000000000000000}", "mem=100000000000000000000: GiB of memory per GPU"),
        ("{nodelist: 'a b'}", "nodelist='a b': Slurm's node names without spaces"),
    ):
        # rollout's scheduling_spec is actor's (an interpolation), and read first
        with pytest.raises(ConfigError, match=re.escape(f"rollout.scheduling_spec.{said}")):
            prepared(folder, [*CUDA, "launcher=slurm", f"actor.scheduling_spec=[{item}]"])


def test_a_strategy_that_shares_a_process_is_said_not_honoured(folder):
    prep = prepared(folder, [*CUDA, "ref.scheduling_strategy.fork=false"])
    assert (
        "ref.scheduling_strategy.fork=false not honoured: every engine runs processes of "
        "its own" in prep.planned.notes
    )


def test_a_bad_areal_value_is_one_error_line(folder):
    out = run(
        "plan",
        "-cd",
        str(folder),
        "-cn",
        "grpo",
        f"trainer.entry={ENTRY}",
        "cluster.name_resolve.type=zookeeper",
    )
    assert "cluster.name_resolve.type='zookeeper': choose nfs, etcd3, ray" in one_error_line(out)
    (folder / "old.yaml").write_text(GRPO + "launcher: {trainer_cpus_per_gpu: 4}\n")
    out = run("plan", "-cd", str(folder), "-cn", "old", f"trainer.entry={ENTRY}")
    assert one_error_line(out).startswith(
        "error: launcher.trainer_cpus_per_gpu in config "
        "'old': AReaL's former launcher section is not read"
    )


@pytest.mark.torch
def test_a_real_local_run_hands_the_entry_its_config(tmp_path):
    """One CPU run through the local runner: a stdlib-only entry reads --config and checks a
    trainer key and an override arrived, and AReaL's folders were made for the run."""
    entry = tmp_path / "areal_entry.py"
    entry.write_text(
        textwrap.dedent("""\
        import json, os, sys
        args = sys.argv[1:]
        path = args[args.index("--config") + 1]
        text = open(path).read()
        overrides = args[args.index("--config") + 2:]
        out = {"config": path, "has_seed": "seed: 7" in text, "overrides": overrides,
               "fileroot": os.path.isdir(os.environ["AREAL_RUN_DIR"] + "/../files")}
        if os.environ.get("RANK", "0") == "0":
            json.dump(out, open(os.environ["AREAL_RUN_DIR"] + "/entry.json", "w"))
        """)
    )
    d = tmp_path / "conf"
    d.mkdir()
    root = tmp_path / "runs"
    (d / "cpu.yaml").write_text(
        GRPO.replace("/tmp/areal-vocab", str(root))
        .replace('backend: "vllm:d2"', "backend: null")
        .replace('"fsdp:d2"', '"fsdp:d1"')
    )
    out = run(
        "-cd",
        str(d),
        "-cn",
        "cpu",
        f"trainer.entry={entry}",
        "cluster.device=cpu",
        "cluster.n_gpus_per_node=1",
        f"hydra.run.dir={root}/run",
        "gconfig.n_samples=9",
        "launcher.tracking=[]",
        env={"OMP_NUM_THREADS": "1"},
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    got = json.loads((root / "run" / "entry.json").read_text())
    assert got["config"] == f"{root}/run/{ENTRY_CONFIG}" and got["has_seed"]
    assert got["overrides"] == ["cluster.n_gpus_per_node=1", "gconfig.n_samples=9"]  # theirs
    assert (root / "names").is_dir() and (root / "files").is_dir() and got["fileroot"]
    assert os.path.getsize(root / "run" / ENTRY_CONFIG) > 0


def test_areals_local_scheduler_hands_gpus_out_in_turn_when_the_engines_ask_more():
    """scheduler.type: local is AReaL's single-controller scheduler, which gives each worker
    the next GPU and wraps around (AReaL's online-rollout example: sglang:d1 and fsdp:d1 on
    one GPU); without it too few GPUs stay an error, in the spelling the config used."""
    given = [
        "rollout.backend=sglang:d1",
        "actor.backend=fsdp:d1",
        "cluster.device=cuda",
        "cluster.n_gpus_per_node=1",
    ]
    prep = prepare([*given, "scheduler.type=local"], to_run=False)
    assert layout(prep) == {"rollout": ("sglang:d1", (0,)), "actor": ("fsdp:d1", (0,))}
    assert any(
        w.startswith(
            "scheduler.type=local: the engines ask more than the 1 GPU(s) "
            "here, so they are handed out in turn and wrap around: rollout 0, actor 0"
        )
        for w in prep.plan.warnings
    ), prep.plan.warnings
    wider = prepare(
        [
            "rollout.backend=sglang:d2",
            "actor.backend=fsdp:d4",
            "cluster.device=cuda",
            "cluster.n_gpus_per_node=4",
            "scheduler.type=local",
        ],
        to_run=False,
    )
    assert layout(wider) == {"rollout": ("sglang:d2", (0, 1)), "actor": ("fsdp:d4", (2, 3, 0, 1))}
    with pytest.raises(
        PlacementError,
        match=r"the cluster has 1 \(1 node x 1\) \(on 1 GPU\(s\) "
        r"with the local runner: use smaller backends, or let engines share the "
        r"GPUs, each releasing memory between phases: "
        r"cluster.component_placement.rollout=all",
    ):
        prepare(given, to_run=False)
    with pytest.raises(PlacementError, match=r"raise cluster.n_gpus_per_node or leave it unset"):
        prepare([*given[:2], "cluster.device=cpu", "cluster.n_gpus_per_node=1"], to_run=False)
