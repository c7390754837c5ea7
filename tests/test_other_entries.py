"""Other people's entry points (docs/architecture.md §17): an interpreter per component, the
preflight reading the entry's own imports with it, a server module and its flags per serving
component, AReaL's trainer environment and folders.

One real run (module-scoped, ~6 s): a stand-in for AReaL in a venv of its own
(tests/stand_in_areal.py) serves as the rollout server (`rollout.server_module`) and trains
as the trainer entry, each under its own interpreter, beside a worker under a third setting.
The runners' command lines and the preflight's errors are checked at the plan level.
"""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest

from launcher.backends.torchrun import entry_in
from launcher.cli.launch import counted_request, prepare
from launcher.node.runs import make_folders
from launcher.spec.entry import server_flags
from launcher.spec.errors import ConfigError, UserError
from launcher.spec.request import USER, Folders, LaunchRequest
from tests.areal_launch import one_error_line, run
from tests.stand_in_areal import assert_ran_under, seen_by

CPU = ["cluster.device=cpu", "recipe=custom", "launcher.tracking=[]", "actor.backend=fsdp:d2"]


@pytest.fixture(scope="module")
def areal_run(stand_in, tmp_path_factory) -> Path:
    """areal-launch on this machine: the stand-in's server and trainer, and a worker, each
    run by the stand-in venv's interpreter; the run folder."""
    where = tmp_path_factory.mktemp("areal-run")
    (where / "model").mkdir()
    py = stand_in.python
    out = run(
        *CPU,
        "rollout.backend=vllm:d1",
        f"model_path={where / 'model'}",
        f"trainer.entry={stand_in.entry}",
        f"trainer.python={py}",
        "trainer.args=[--config,gsm8k.yaml,'actor.lr=1e-5']",
        f"rollout.python={py}",
        "rollout.server_module=areal_stand_in.server",
        "rollout.server_args={max_num_seqs: 4, enable_prefix_caching: true}",
        "+components.sim.entry=-m areal_stand_in.worker",
        f"+components.sim.python={py}",
        f"hydra.run.dir={where}/run",
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return where / "run"


def seen(run_dir: Path, name: str) -> dict:
    return json.loads((run_dir / name).read_text())


# ----------------------------------------------------------------------------- the real run
@pytest.mark.torch  # torchrun runs in the stand-in venv (torch through its .pth)
def test_the_trainers_run_under_trainer_python_with_areals_environment(areal_run, stand_in):
    server = json.loads((areal_run / "request.json").read_text())["processes"][0]
    port = server["ports"][0]
    for rank in (0, 1):
        got = seen(areal_run, f"entry-seen-{rank}.json")
        assert got["executable"] == str(stand_in.python) and got["prefix"] == str(stand_in.venv)
        assert got["spmd"] == "1"  # AReaL's SPMD mode: a launcher started it under torchrun
        assert got["addrs"] == f"127.0.0.1:{port}" and got["health"] == [200]
        assert got["folders"] == {"": True, "name_resolve": True}  # fileroot, name_resolve
        assert got["argv"] == ["--config", "gsm8k.yaml", "actor.lr=1e-5"]


@pytest.mark.torch
def test_the_server_runs_its_module_with_rollout_python_and_server_args(areal_run, stand_in):
    got = seen(areal_run, "server-seen.json")
    assert got["executable"] == str(stand_in.python)
    argv = got["argv"]
    assert argv[argv.index("--port") + 1].isdigit() and "--host" in argv
    assert argv[-3:] == ["--max-num-seqs", "4", "--enable-prefix-caching"]


@pytest.mark.torch
def test_a_worker_runs_under_its_own_python(areal_run, stand_in):
    assert seen(areal_run, "worker-seen.json")["prefix"] == str(stand_in.venv)


@pytest.mark.torch
def test_the_stand_ins_start_up_hook_saw_each_process_it_ran(areal_run, stand_in):
    """The hook the Slurm and Ray runs read (python-seen): torchrun, both ranks, the server
    and the worker, as the files each wrote themselves say."""
    assert_ran_under(
        stand_in, seen_by(areal_run), server_module="areal_stand_in.server", also=frozenset({"sim"})
    )


# ----------------------------------------------------------------------------- preflight
@pytest.mark.torch
def test_an_entry_importing_what_its_interpreter_lacks_is_one_line(stand_in, tmp_path):
    line = one_error_line(
        run(
            *CPU, "rollout=none", f"trainer.entry={stand_in.entry}", f"hydra.run.dir={tmp_path}/run"
        )
    )
    assert line.startswith("error: not ready to run: actor-node0: ")
    assert (
        f"cannot import 'areal_stand_in', which {stand_in.entry} imports (line 8): install it "
        "for that interpreter or set trainer.python to one that has it"
    ) in line
    assert not (tmp_path / "run").exists()


def test_a_missing_interpreter_is_one_line(stand_in, tmp_path):
    line = one_error_line(
        run(
            *CPU,
            "rollout=none",
            f"trainer.entry={stand_in.entry}",
            "trainer.python=/nope/bin/python",
            f"hydra.run.dir={tmp_path}/r",
        )
    )
    assert line == (
        "error: not ready to run: actor-node0: the interpreter /nope/bin/python does "
        "not exist: set trainer.python to a Python that has what it runs"
    )
    assert not (tmp_path / "r").exists()


def test_a_module_entrys_imports_are_read_from_the_file_its_interpreter_finds(stand_in, tmp_path):
    line = one_error_line(
        run(
            *CPU,
            "rollout=none",
            "actor=none",
            "+components.sim.entry=-m areal_stand_in.needs_more",
            f"+components.sim.python={stand_in.python}",
            f"hydra.run.dir={tmp_path}/r",
        )
    )
    module = next(stand_in.venv.glob("lib/python3*/site-packages/areal_stand_in/needs_more.py"))
    assert line == (
        f"error: not ready to run: sim-0: {stand_in.python} cannot import "
        f"'not_installed_anywhere', which {module} imports (line 1): install it for "
        "that interpreter or set components.sim.python to one that has it"
    )


def test_a_server_module_its_interpreter_lacks_names_the_key_to_set(tmp_path):
    line = one_error_line(
        run(
            *CPU,
            "rollout.server_module=areal.engine.vllm_ext.areal_vllm_server",
            f"hydra.run.dir={tmp_path}/r",
        )
    )
    assert "rollout-0 needs 'areal', which " in line and "set rollout.python" in line


# ----------------------------------------------------------------------------- plans
AREAL = [
    "trainer.entry=/opt/areal/examples/math/gsm8k_rl.py",
    "trainer.python=/opt/areal/bin/python",
    "rollout.python=/opt/vllm/bin/python",
    "rollout.server_module=areal.engine.vllm_ext.areal_vllm_server",
    "rollout.server_args={max_num_seqs: 8}",
    "+components.sim.entry=sim.py",
    "cluster.device=cpu",
    "cluster.gpus_per_node=4",
    "recipe=custom",
    "hydra.run.dir=/runs/r",
]


def request_of(*overrides: str) -> tuple[LaunchRequest, str]:
    """The request and the dry run of `overrides`, in this process (no launch)."""
    prep = prepare(list(overrides), to_run=False)
    _, request = counted_request(prep)
    return request, prep.runner.dryrun(request)


def argv0(request: LaunchRequest) -> dict[str, str]:
    return {p.name: p.argv[0] for p in request.processes}


def test_under_slurm_each_component_keeps_its_interpreter_inside_the_container():
    request, text = request_of("launcher=slurm", "launcher.container_image=areal.sqsh", *AREAL)
    assert argv0(request) == {
        "rollout-0": "/opt/vllm/bin/python",
        "actor-node0": "/opt/areal/bin/python",
        "sim-0": "python3",
    }  # none of its own: the container's
    server = request.processes[0].argv
    assert server[1:3] == ("-m", "areal.engine.vllm_ext.areal_vllm_server")
    assert server[-2:] == ("--max-num-seqs", "8")
    assert "python3 -m launcher.node.agent" in text  # the supervisor: the container's python
    assert request.folders == Folders(
        make=("/runs/r", "/runs/r/name_resolve"), clear=("/runs/r/name_resolve/{user}/areal/run",)
    )
    assert '"folders": {' in text and '"/runs/r/name_resolve"' in text  # what the nodes read
    env = next(p.env for p in request.processes if p.role == "trainer")
    assert env["AREAL_SPMD_MODE"] == "1" and env["AREAL_LLM_SERVER_ADDRS"]


def test_under_ray_a_component_interpreter_wins_over_the_node_group_and_launcher_python():
    request, text = request_of(
        "launcher=ray",
        "launcher.python=/ray/bin/python",
        *AREAL,
        "cluster.node_groups=[{label: all, node_ranks: 0, python: /group/bin/python}]",
    )
    assert argv0(request) == {
        "rollout-0": "/opt/vllm/bin/python",
        "actor-node0": "/opt/areal/bin/python",
        "sim-0": "/group/bin/python",
    }
    assert "/ray/bin/python -m launcher.node.agent" in text
    request, _ = request_of("launcher=ray", "launcher.python=/ray/bin/python", *AREAL[4:])
    assert set(argv0(request).values()) == {"/ray/bin/python"}  # nothing of their own


def test_sglangs_server_module_is_chosen_the_same_way():
    module = "areal.experimental.inference_service.sglang.launch_server"
    request, _ = request_of(
        "rollout.backend=sglang:d1",
        f"rollout.server_module={module}",
        "rollout.server_args.max_running_requests=8",
        *AREAL[5:],
    )
    argv = request.processes[0].argv
    assert argv[1:4] == ("-m", module, "--model-path")
    assert argv[-2:] == ("--max-running-requests", "8")


def test_our_recipe_gets_no_areal_environment_or_folders():
    request, _ = request_of("cluster.device=cpu", "hydra.run.dir=/runs/r")
    assert request.folders is None
    assert not any("AREAL_SPMD_MODE" in p.env for p in request.processes)


def test_server_args_are_flags_as_areal_writes_them_and_bounded():
    assert server_flags(
        "k",
        {
            "max_num_seqs": 8,
            "enable_lora": True,
            "off": False,
            "none": None,
            "empty": "",
            "no_list": [],
            "lora_modules": ["a=/x", "b=/y"],
        },
    ) == ("--max-num-seqs", "8", "--enable-lora", "--lora-modules", "a=/x", "b=/y")
    for bad, needle in (
        ({"--port": 1}, "a flag name without its dashes"),
        ({"x": {"y": 1}}, "a number, a string"),
        ({f"f{i}": 1 for i in range(65)}, "at most 64"),
    ):
        with pytest.raises(ConfigError, match=needle):
            server_flags("rollout.server_args", bad)


@pytest.mark.parametrize(
    "override, needle",
    [
        ("rollout.server_args.port=1", "rollout.server_args: '--port' is set by the launcher"),
        ("rollout.server_module='not a module'", "rollout.server_module='not a module': a module"),
        ("trainer.python=' '", "trainer.python=' ': the path of a Python interpreter"),
    ],
)
def test_bad_entry_settings_are_one_error(override, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        request_of("cluster.device=cpu", override)


def test_the_entry_of_a_trainers_argv_is_after_torchruns_flags():
    argv = [
        "py",
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--log-dir",
        "/d",
        "-m",
        "areal.x",
        "--config",
        "c.yaml",
    ]
    assert entry_in(argv) == ("-m", "areal.x")
    assert entry_in(["py", "-m", "torch.distributed.run", "--nnodes", "1", "t.py"]) == ("t.py",)
    assert entry_in(["py", "w.py", "--x"]) == ("w.py",)


def test_areals_folders_are_made_and_this_trials_old_records_cleared(tmp_path):
    root = tmp_path / "nr"
    old = root / getpass.getuser() / "exp" / "trial" / "gen_servers" / "0"
    other = root / getpass.getuser() / "exp" / "other"
    old.mkdir(parents=True)
    other.mkdir(parents=True)
    make_folders(Folders((str(tmp_path / "fr"), str(root)), (f"{root}/{USER}/exp/trial",)), True)
    assert (tmp_path / "fr").is_dir() and not old.parent.parent.exists() and other.is_dir()


def test_the_first_node_clears_name_resolve_before_any_other_node_starts(tmp_path):
    """Several nodes (Slurm): a node that is ready first waits for the first node's clearing,
    so what its processes register is never cleared by the first node arriving later."""
    import threading

    from launcher.node.runs import prepare_folders
    from launcher.spec.errors import LaunchError

    root = tmp_path / "names"
    folders = Folders((str(tmp_path / "fr"), str(root)), (f"{root}/{USER}/exp/trial",))
    old = root / getpass.getuser() / "exp" / "trial" / "server" / "ENTRY"
    old.parent.mkdir(parents=True)
    old.write_text("an earlier run's address")
    done = threading.Event()
    other = threading.Thread(
        target=lambda: (
            prepare_folders(folders, str(tmp_path / "run"), False, "slurm-7-0", 30, poll_s=0.01),
            done.set(),
        )
    )
    other.start()
    assert not done.wait(0.3) and old.exists()  # node 1 waits; nothing cleared yet
    prepare_folders(folders, str(tmp_path / "run"), True, "slurm-7-0", 30)
    other.join(10)
    assert done.is_set() and not old.exists()
    with pytest.raises(
        LaunchError,
        match=f"did not clear .*/names/{getpass.getuser()}/exp/trial within 0 s",
    ):
        prepare_folders(folders, str(tmp_path / "run"), False, "slurm-7-1", 0.05)
