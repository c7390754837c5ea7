"""The sbatch script renderer: pure text from a launch request and the Slurm runner's options.

Quoting is checked by real bash (`bash -n`, and words evaluated by bash); running the script on
a real cluster is tests/test_slurm.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.runners import slurm
from launcher.runners.sbatch import render_sbatch, shell_word
from launcher.spec.errors import ConfigError, LaunchError
from launcher.spec.process import ProcessSpec
from launcher.spec.request import EngineAsk
from tests.hand_requests import request_for

RUN = "/runs/exp/trial"
PY = "/venv/bin/python"


def server(node=0, gpus=(0, 1), name="rollout-0", **kw) -> ProcessSpec:
    return ProcessSpec(
        name=name,
        component="rollout",
        role="server",
        node=node,
        argv=("python", "-m", "sglang.launch_server"),
        gpus=tuple(gpus),
        **kw,
    )


def trainer(node=1, gpus=(0, 1, 2, 3), name="actor-0", env=None) -> ProcessSpec:
    return ProcessSpec(
        name=name,
        component="actor",
        role="trainer",
        node=node,
        argv=("torchrun", "train.py"),
        env=dict(env or {}),
        gpus=tuple(gpus),
    )


def render(processes, opts=None, run_dir=RUN, **request_kw) -> str:
    request = request_for(run_dir, processes, **request_kw)
    return render_sbatch(request, opts or slurm.Config(), PY, ["/src/launcher"])


def directives(script: str) -> list[str]:
    return [ln[len("#SBATCH ") :] for ln in script.splitlines() if ln.startswith("#SBATCH ")]


def srun_line(script: str) -> str:
    (line,) = [ln for ln in script.splitlines() if ln.startswith("srun ")]
    return line


def command_words(script: str) -> list[str]:
    """The words bash makes of the command after the srun line."""
    after = script.split(srun_line(script) + "\n", 1)[1]
    command = after.split("\nrc=$?", 1)[0]
    out = subprocess.run(
        ["bash", "-c", f'RUN_DIR=x; printf "%s\\0" {command}'], capture_output=True, timeout=10
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().split("\0")[:-1]


# ----------------------------------------------------------------------------- allocation
def test_one_task_per_node_runs_that_nodes_supervisor_on_the_request():
    script = render([server(node=0), trainer(node=1)])
    d = directives(script)
    assert "--nodes=2" in d and "--ntasks-per-node=1" in d and "--no-requeue" in d
    assert f"--output={RUN}/slurm-%j.out" in d
    line = srun_line(script)
    for flag in ("--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--export=ALL"):
        assert flag in line
    assert command_words(script) == [
        PY,
        "-m",
        "launcher.node.agent",
        f"{RUN}/request.json",
        "--peers",
    ]
    assert 'AREAL_HOSTS=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)' in script


def test_each_node_asks_for_gpus_up_to_the_highest_position_a_process_uses():
    script = render([server(node=0, gpus=(0, 1)), trainer(node=1, gpus=(0, 1, 2))])
    assert "--gpus-per-node=3" in directives(script)
    assert "--gpus-per-node=3" in srun_line(script)


def test_a_two_gpu_plan_does_not_take_whole_eight_gpu_nodes():
    """Only a job that takes every GPU of its nodes takes the nodes (--exclusive, all CPUs)."""
    small = render([trainer(node=0, gpus=(0, 1))], num_nodes=1)
    assert "--gpus-per-node=2" in directives(small) and "--exclusive" not in directives(small)
    full = render([trainer(node=0, gpus=tuple(range(8)))], num_nodes=1)
    assert "--exclusive" in directives(full)
    assert "--cpus-per-task=$SLURM_CPUS_ON_NODE" in srun_line(full)


def test_a_plan_needing_more_nodes_than_the_cluster_has_is_refused():
    with pytest.raises(LaunchError, match=r"needs 2 nodes but cluster.num_nodes=1"):
        render([server(node=0), trainer(node=1)], num_nodes=1)


def test_a_process_with_more_gpus_than_a_node_has_is_refused():
    with pytest.raises(LaunchError, match="gpus_per_node=2"):
        render([trainer(node=0, gpus=(0, 1, 2))], gpus_per_node=2, num_nodes=1)


def test_a_plan_without_processes_is_refused():
    with pytest.raises(LaunchError, match="no processes"):
        render([])


def test_a_cpu_plan_asks_for_no_gpus():
    script = render([server(gpus=(0,))], device="cpu", num_nodes=1)
    assert "--gres=none" in srun_line(script)
    assert not any(d.startswith("--gpus-per-node") for d in directives(script))


def test_options_become_sbatch_lines_only_when_set():
    opts = slurm.Config(
        partition="gpu",
        account="proj",
        qos="high",
        time_limit="04:00:00",
        cpus_per_gpu=8,
        mem_per_gpu="64G",
        sbatch_extra=["--constraint=h100"],
    )
    d = directives(render([server()], opts))
    for line in (
        "--partition=gpu",
        "--account=proj",
        "--qos=high",
        "--time=04:00:00",
        "--cpus-per-gpu=8",
        "--mem-per-gpu=64G",
        "--constraint=h100",
    ):
        assert line in d
    assert "--cpus-per-gpu=8" in srun_line(render([server()], opts))
    bare = " ".join(directives(render([server()])))
    for flag in ("--partition", "--account", "--qos", "--time", "--cpus-per-gpu", "--mem"):
        assert flag not in bare


def test_requeue_asks_slurm_for_a_warning_and_a_requeue_and_appends_to_the_job_log(tmp_path):
    opts = slurm.Config(requeue=True, requeue_signal_s=120, time_limit="1:00:00")
    script = render([trainer(node=0)], opts, num_nodes=1)
    d = directives(script)
    assert {"--requeue", "--signal=B:USR1@120", "--open-mode=append"} <= set(d)
    assert "--no-requeue" not in d
    assert "trap requeue_job USR1" in script and "-m launcher.node.requeue" in script
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    plain = directives(render([trainer(node=0)], num_nodes=1))
    assert "--no-requeue" in plain and not any(x.startswith("--signal") for x in plain)


# Stand-ins for srun and scontrol (named as such): they let the test send USR1 at the moment
# each case needs, which the real cluster's 30-s timer cannot be made to hit (tests/
# test_slurm_requeue.py runs the real thing). The srun stand-in plays the trainers: it waits
# for the checkpoint request, answers as $MODE says and exits or waits to be cancelled.
FAKE_SRUN = """#!/bin/bash
echo $$ > "$FAKE/srun.pid"; touch "$FAKE/started"
until [ -s "$CONTROL/checkpoint" ]; do sleep 0.1; done
read -r id bound < "$CONTROL/checkpoint"  # the request's id, then the stop's bound
[ "$bound" = 60 ] || exit 3  # launcher.requeue_signal_s: the trainers hold at most that long
case "$MODE" in
  final) echo "$id final" > "$CONTROL/checkpoint.done"; sleep 0.5; exit 0 ;;
  saved) echo "$id" > "$CONTROL/checkpoint.done"; exec sleep 60 ;;
  ended) exit 0 ;;
esac
"""
FAKE_SCONTROL = """#!/bin/bash
echo "$*" >> "$FAKE/scontrol.log"
case "$1" in
  show) echo node1 ;;
  requeue) kill "$(cat "$FAKE/srun.pid")" ;;  # as Slurm cancels the step of a requeued job
esac
"""


@pytest.mark.parametrize(
    "mode, said, requeued, rc",
    [
        ("saved", "the trainers saved their checkpoint\n", True, 143),
        (
            "final",
            "the trainers saved their checkpoint at their last step: the job ends, no requeue",
            False,
            0,
        ),
        ("ended", "the run ended before the time limit: no requeue", False, 0),
    ],
)
def test_the_warning_requeues_only_a_run_that_has_steps_left(tmp_path, mode, said, requeued, rc):
    """USR1 while the step runs: the batch shell asks for a checkpoint and requeues after it,
    unless the trainers say that checkpoint was their last step or the run ends meanwhile
    (then the job finishes with the step's exit code, and nothing is started again)."""
    import os
    import signal
    import time

    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    run_dir = tmp_path / "run"
    opts = slurm.Config(requeue=True, requeue_signal_s=60, time_limit="10")
    script = tmp_path / "job.sbatch"
    script.write_text(render([trainer(node=0)], opts, run_dir=str(run_dir), num_nodes=1))
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "FAKE": str(fake),
        "MODE": mode,
        "CONTROL": str(run_dir / "control"),
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_RESTART_COUNT": "0",
    }
    job = subprocess.Popen(
        ["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while not (fake / "started").exists():
            assert time.monotonic() < deadline and job.poll() is None
            time.sleep(0.05)
        job.send_signal(signal.SIGUSR1)  # as Slurm warns the batch shell
        out, _ = job.communicate(timeout=30)
    finally:
        job.kill()
    assert said in out, out
    calls = (fake / "scontrol.log").read_text()
    assert ("requeue 7" in calls) == requeued, calls
    assert [json.loads(p.read_text())["kind"] for p in (run_dir / "restarts").glob("*.json")] == (
        ["requeue"] if requeued else []
    ), out
    assert job.returncode == rc, out


@pytest.mark.parametrize(
    "kw, needle",
    [
        (
            dict(requeue=True, time_limit="5", requeue_signal_s=300),
            "launcher.requeue_signal_s=300 is not below launcher.time_limit=5 (300 s)",
        ),
        (
            dict(requeue=True, requeue_signal_s=10),
            "launcher.requeue_signal_s=10: choose 30 to 65535",
        ),
        (dict(requeue_signal_s=10**12), "choose 30 to 65535"),
    ],
)
def test_a_warning_that_cannot_come_before_the_limit_is_refused(kw, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        slurm.Config(**kw)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30", 1800),
        ("5:30", 330),
        ("1:00:00", 3600),
        ("2-0", 172800),
        ("1-2:3", 93780),
        ("1-02:03:04", 93784),
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_time_limits_are_read_as_slurm_reads_them(text, seconds):
    assert slurm.time_limit_s(text) == seconds


# ----------------------------------------------------------------------------- containers
def test_a_container_runs_each_node_with_its_python_and_the_run_model_and_launcher_mounted():
    opts = slurm.Config(
        container_image="nvcr.io/x:1", container_mounts="/data:/data", srun_extra=["--mpi=pmix"]
    )
    request = request_for(RUN, [server(), trainer()])
    request = type(request)(**{**request.__dict__, "paths": ("/models/Qwen",)})
    runner = slurm.Runner(opts)
    script = runner.job(request).script
    line = srun_line(script)
    mounts = shlex.split(line.split("--container-mounts=")[1].split()[0])[0].split(",")
    assert "--container-image=nvcr.io/x:1" in line and "--mpi=pmix" in line
    assert f"{RUN}:{RUN}" in mounts and "/models/Qwen:/models/Qwen:ro" in mounts
    assert "/data:/data" in mounts
    assert all(f"{d}:{d}:ro" in mounts for d in slurm.package_dirs())
    assert runner.python() == "python3"  # the interpreter inside the image, not the host's
    words = command_words(script)
    assert words[0] == "bash" and words[-5:-3] == ["python3", "-m"]
    assert "export PYTHONPATH=" in words[2]  # the mounted launcher, for the node supervisor


def test_setup_commands_run_as_given_before_each_nodes_supervisor():
    opts = slurm.Config(setup=["source /opt/env/bin/activate", "module load cuda"])
    words = command_words(render([server(), trainer()], opts))
    assert words[:2] == ["bash", "-c"]
    assert words[2] == 'set -e\nsource /opt/env/bin/activate\nmodule load cuda\nexec "$@"'
    assert words[4:6] == [PY, "-m"]


def test_dry_run_masks_secrets_but_the_submitted_request_keeps_them(tmp_path):
    request = request_for(str(tmp_path), [trainer(env={"HF_TOKEN": "hf_abc"})])
    runner = slurm.Runner(slurm.Config())
    shown = runner.dryrun(request)
    assert "hf_abc" not in shown and '"HF_TOKEN": "***"' in shown
    assert json.loads(request.to_json())["processes"][0]["env"]["HF_TOKEN"] == "hf_abc"


# ----------------------------------------------------------------------------- safety
PAYLOAD = 'a\'b "c" $(touch /tmp/pwned) `touch /tmp/pwned` ; \\ $HOME #x\nrm -rf /tmp/pwned'


def test_rendered_script_with_hostile_values_is_valid_bash(tmp_path):
    one_line = PAYLOAD.replace("\n", " ")
    opts = slurm.Config(
        partition=one_line,
        sbatch_extra=[f"--comment={one_line}"],
        srun_extra=[f"--comment={PAYLOAD}"],
        container_image=PAYLOAD,
        container_python=PAYLOAD,
        setup=["true"],
    )
    path = tmp_path / "job.sbatch"
    path.write_text(
        render([trainer(node=0)], opts, run_dir=f"/tmp/{one_line}", num_nodes=1, job_name=one_line)
    )
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


@pytest.mark.parametrize("key", ["job_name", "partition", "sbatch_extra", "run_dir"])
def test_a_line_break_in_an_sbatch_value_is_refused(key):
    opts = slurm.Config()
    kw = {}
    if key == "job_name":
        kw["job_name"] = "x\ntouch /tmp/pwned"
    elif key == "run_dir":
        kw["run_dir"] = "/tmp/x\ntouch /tmp/pwned"
    else:
        setattr(opts, key, ["x\ntouch /tmp/pwned"] if key == "sbatch_extra" else "x\ny")
    with pytest.raises(LaunchError, match="line breaks"):
        render([server()], opts, **kw)


def test_sbatch_values_survive_sbatch_own_parsing_of_quotes_and_backslashes():
    d = directives(render([server()], job_name="it's a \\ job"))
    assert d[0] == "--job-name='it'\"'\"'s a \\\\ job'"


def test_a_percent_in_the_run_folder_is_not_taken_for_a_slurm_pattern():
    assert "--output=/runs/100%%/slurm-%j.out" in directives(
        render([server()], run_dir="/runs/100%")
    )


@settings(max_examples=150, deadline=None)
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40
    )
)
def test_every_value_reaches_bash_as_written(value):
    out = subprocess.run(
        ["bash", "-c", f'printf "%s\\0" {shell_word(value)}'], capture_output=True, timeout=10
    )
    assert out.stdout.decode().split("\0")[:-1] == [value]


# ----------------------------------------------------------------------------- engines' asks
def asking(request, **asks):
    return dataclasses.replace(request, asks=asks)


def test_per_gpu_asks_of_a_job_without_gpus_are_a_note_not_a_refused_job():
    """sbatch refuses per-GPU options on a job that asks for no GPU: the asks are said, not
    written (the user's own launcher.cpus_per_gpu there stays an error: test_bad_input.py)."""
    ask = EngineAsk(cpu=4, mem_gib=8, key="actor.resources")
    request = asking(request_for(RUN, [trainer(node=0, gpus=())], device="cpu"), actor=ask)
    runner = slurm.Runner(slurm.Config())
    assert runner.check(request) == []
    assert not any("per-gpu" in d for d in directives(runner.job(request).script))
    assert runner.notes(request) == [
        f"actor.resources: the {what} per GPU asked are not honoured: the plan asks Slurm for "
        "no GPU (cluster.device=cpu)"
        for what in ("CPUs", "memory")
    ]


def test_engines_asking_for_different_nodes_are_one_error_and_one_list_is_the_jobs():
    one = EngineAsk(nodelist="gpu[01-02]", exclude="gpu07", key="actor.resources")
    request = asking(request_for(RUN, [server(), trainer()]), actor=one)
    runner = slurm.Runner(slurm.Config(sbatch_extra=["--constraint=h100"]))
    d = directives(runner.job(request).script)
    # after the user's options; quoted as every value is (sbatch reads #SBATCH lines' quotes)
    assert d[-3:] == ["--constraint=h100", "'--nodelist=gpu[01-02]'", "--exclude=gpu07"]
    other = dataclasses.replace(one, nodelist="gpu03", key="rollout.resources")
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "actor.resources asks Slurm for the nodelist gpu[01-02] but rollout.resources for "
            "gpu03: the job has one nodelist for every engine"
        ),
    ):
        runner.check(asking(request, actor=one, rollout=other))


def test_an_image_an_engine_asks_for_runs_the_nodes_in_that_container():
    ask = EngineAsk(image="img.sqsh", key="actor.resources")
    request = asking(request_for(RUN, [trainer(node=0)], num_nodes=1), actor=ask)
    runner = slurm.Runner(slurm.Config())
    assert runner.python(request.asks) == "python3"  # the container's interpreter
    assert "--container-image=img.sqsh" in srun_line(runner.job(request).script)
    own = slurm.Runner(slurm.Config(container_image="mine.sqsh"))
    assert "--container-image=mine.sqsh" in srun_line(own.job(request).script)
    assert own.notes(request) == [
        "actor.resources asks for launcher.container_image=img.sqsh; "
        "launcher.container_image=mine.sqsh is used"
    ]
