"""The sbatch script renderer: pure text from a plan, its processes and the launcher options.

Quoting is checked by real bash (`bash -n`, and words evaluated by bash); running the script on
a real cluster is tests/test_slurm.py.
"""
from __future__ import annotations

import re
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from launcher.alloc import ModelAllocation
from launcher.cluster import ClusterSpec
from launcher.config import LauncherConfig
from launcher.errors import LaunchError
from launcher.plan import ComponentPlan, Plan, ProcessSpec
from launcher.runners.sbatch import (nodes_needed, render_sbatch, shell_word,
                                     slurm_host_placeholder as node_host)

RUN = "/runs/exp/trial"


def plan_of(processes, num_nodes=2, gpus_per_node=8, components=None) -> Plan:
    return Plan(ClusterSpec(num_nodes, gpus_per_node, "cuda"), "disaggregated",
                components or {}, processes=tuple(processes))


def server(node=0, gpus=(0, 1), name="rollout-0", **kw) -> ProcessSpec:
    argv = ("python", "-m", "sglang.launch_server", "--host", node_host(node),
            "--dist-init-addr", f"{node_host(node)}:20000")
    return ProcessSpec(name=name, component="rollout", role="server", node=node, argv=argv,
                       gpus=tuple(gpus), **kw)


def trainer(node=1, gpus=(0, 1, 2, 3), name="actor-0", env=None) -> ProcessSpec:
    argv = ("torchrun", "--nnodes=1", "--node-rank=0", f"--master-addr={node_host(node)}",
            "--master-port=29500", "train.py")
    env = {"AREAL_LLM_SERVER_ADDRS": f"{node_host(0)}:30000", **(env or {})}
    return ProcessSpec(name=name, component="actor", role="trainer", node=node, argv=argv,
                       env=env, gpus=tuple(gpus))


def render(processes, opts=None, **plan_kw) -> str:
    plan = plan_of(processes, **plan_kw)
    return render_sbatch(plan, plan.processes, opts or LauncherConfig(type="slurm"), RUN, "job")


def directives(script: str) -> list[str]:
    return [ln[len("#SBATCH "):] for ln in script.splitlines() if ln.startswith("#SBATCH ")]


def srun_lines(script: str) -> list[str]:
    return [ln for ln in script.splitlines() if ln.startswith("srun ")]


def bash_words(words: str) -> list[str]:
    """What bash makes of `words`, with node k named n<k>."""
    out = subprocess.run(["bash", "-c", f'AREAL_NODES=(n0 n1 n2); printf "%s\\0" {words}'],
                         capture_output=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().split("\0")[:-1]


# ----------------------------------------------------------------------------- allocation
def test_job_asks_for_the_nodes_the_plan_uses_and_every_gpu_of_them():
    d = directives(render([server(node=0), trainer(node=1)]))
    assert "--nodes=2" in d and "--gpus-per-node=8" in d and "--no-requeue" in d
    assert f"--output={RUN}/slurm-%j.out" in d


def test_node_count_is_the_highest_node_used_plus_one_never_zero():
    assert nodes_needed(plan_of([server(node=0)]), [server(node=0)]) == 1
    assert nodes_needed(plan_of([]), []) == 1
    # a process on node 1 only still needs node 0 to exist: node k is the k-th allocated node
    assert nodes_needed(plan_of([trainer(node=1)]), [trainer(node=1)]) == 2
    comps = {"actor": ComponentPlan("actor", ModelAllocation("fsdp", dp=2), gpus=(16, 17))}
    plan = plan_of([server(node=0)], num_nodes=3, components=comps)
    assert nodes_needed(plan, plan.processes) == 3


def test_a_plan_needing_more_nodes_than_the_cluster_has_is_refused():
    with pytest.raises(LaunchError, match=r"needs 2 nodes but cluster.num_nodes=1"):
        render([server(node=0), trainer(node=1)], num_nodes=1)


def test_a_step_with_more_gpus_than_a_node_has_is_refused():
    with pytest.raises(LaunchError, match="gpus_per_node=2"):
        render([trainer(node=0, gpus=(0, 1, 2))], gpus_per_node=2, num_nodes=1)


def test_a_plan_without_processes_is_refused():
    with pytest.raises(LaunchError, match="no processes"):
        render([])


def test_task_slots_per_node_fit_every_step_on_the_busiest_node():
    procs = [server(0, (0,), "rollout-0"), server(0, (1,), "rollout-1"), trainer(0, (2, 3))]
    assert "--ntasks-per-node=3" in directives(render(procs, num_nodes=1))


def test_options_become_sbatch_lines_only_when_set():
    opts = LauncherConfig(type="slurm", partition="gpu", account="proj", qos="high",
                          time_limit="04:00:00", cpus_per_gpu=8, mem_per_gpu="64G",
                          sbatch_extra=["--exclusive", "--constraint=h100"])
    d = directives(render([server()], opts))
    for line in ("--partition=gpu", "--account=proj", "--qos=high", "--time=04:00:00",
                 "--cpus-per-gpu=8", "--mem-per-gpu=64G", "--exclusive", "--constraint=h100"):
        assert line in d
    bare = " ".join(directives(render([server()])))
    for flag in ("--partition", "--account", "--qos", "--time", "--cpus-per-gpu", "--mem"):
        assert flag not in bare


# ----------------------------------------------------------------------------- steps
def test_each_process_is_one_background_step_pinned_to_its_node_with_exactly_its_gpus():
    script = render([server(node=0, gpus=(0, 1)), trainer(node=1, gpus=(0, 1, 2, 3))])
    first, second = srun_lines(script)
    for line, node, gpus in ((first, 0, 2), (second, 1, 4)):
        assert f'--nodelist="${{AREAL_NODES[{node}]}}"' in line
        assert f"--gpus-per-node={gpus} " in line
        for flag in ("--nodes=1", "--ntasks=1", "--exact", "--kill-on-bad-exit=1", "--export=ALL"):
            assert flag in line
    assert f"> {RUN}/logs/rollout-0.log 2>&1 < /dev/null &" in script
    assert "track $! actor-0 trainer" in script


def test_inherited_gpus_per_node_is_unset_before_the_first_step():
    script = render([server()])
    assert script.index("unset SLURM_GPUS_PER_NODE") < script.index("\nsrun ")


def test_node_names_come_from_the_allocation_in_order():
    assert 'mapfile -t AREAL_NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")' in render([server()])


def test_a_step_without_gpus_asks_for_none():
    line = srun_lines(render([server(gpus=())]))[0]
    assert "--gres=none" in line and "--gpus-per-node" not in line


def test_per_gpu_cpus_and_memory_follow_each_step():
    opts = LauncherConfig(type="slurm", cpus_per_gpu=4, mem_per_gpu="32G")
    script = render([server(gpus=(0, 1))], opts)
    line = srun_lines(script)[0]
    assert "--cpus-per-gpu=4" in line and "--mem-per-gpu=32G" in line
    assert "--exclusive" not in directives(script)


def test_without_cpus_per_gpu_the_job_takes_whole_nodes_and_steps_share_cpus_by_gpus():
    script = render([server(gpus=(0, 1)), trainer(gpus=(0, 1, 2, 3))])
    assert "--exclusive" in directives(script)
    assert "CPUS_PER_GPU=$(( SLURM_CPUS_ON_NODE / 8 > 0 ? SLURM_CPUS_ON_NODE / 8 : 1 ))" in script
    first, second = srun_lines(script)
    assert "--cpus-per-task=$(( 2 * CPUS_PER_GPU ))" in first
    assert "--cpus-per-task=$(( 4 * CPUS_PER_GPU ))" in second


def test_steps_on_disjoint_gpus_of_one_node_stay_exclusive():
    procs = [server(0, (0, 1), "rollout-0"), trainer(0, (2, 3))]
    assert all("--overlap" not in ln for ln in srun_lines(render(procs, num_nodes=1)))


def test_steps_sharing_gpus_overlap_on_all_the_nodes_gpus_and_pick_their_own():
    procs = [server(0, (0, 1), "rollout-0"), trainer(0, (1, 2)), trainer(1, (0,), "actor-1")]
    script = render(procs)
    shared, also_shared, alone = srun_lines(script)
    for line in (shared, also_shared):
        assert "--overlap" in line and "--gpus-per-node=8 " in line
    assert "--overlap" not in alone and "--gpus-per-node=1 " in alone
    assert 'export CUDA_VISIBLE_DEVICES="${slurm_gpus[1]},${slurm_gpus[2]}"' in script


def test_container_and_srun_extra_reach_every_step():
    opts = LauncherConfig(type="slurm", container_image="nvcr.io/x:1",
                          container_mounts="/data:/data", srun_extra=["--mpi=pmix"])
    for line in srun_lines(render([server(), trainer()], opts)):
        assert "--container-image=nvcr.io/x:1 --container-mounts=/data:/data --mpi=pmix" in line


def test_host_placeholders_become_node_names_in_argv_and_env():
    script = render([server(node=0), trainer(node=1)])
    command = script.split("\n")[script.split("\n").index(srun_lines(script)[1]) + 1]
    words = bash_words(command.rstrip("\\"))
    assert words[:2] == ["env", "AREAL_LLM_SERVER_ADDRS=n0:30000"]
    assert "--master-addr=n1" in words


def test_slurm_sets_cuda_visible_devices_not_the_plan():
    script = render([trainer(env={"CUDA_VISIBLE_DEVICES": "4,5", "OTHER": "1"})])
    assert "CUDA_VISIBLE_DEVICES" not in script and "OTHER=1" in script


def test_setup_commands_run_as_given_before_each_process():
    opts = LauncherConfig(type="slurm", setup=["source /opt/env/bin/activate", "module load cuda"])
    script = render([server(), trainer()], opts)
    assert script.count("bash -c 'set -e\nsource /opt/env/bin/activate\nmodule load cuda\n"
                        "exec \"$@\"'") == 2


def test_dry_run_text_masks_secrets_but_the_submitted_script_keeps_them():
    procs = [trainer(env={"HF_TOKEN": "hf_abc"})]
    plan = plan_of(procs)
    opts = LauncherConfig(type="slurm")
    shown = render_sbatch(plan, procs, opts, RUN, "job", mask_secrets=True)
    assert "hf_abc" not in shown and "HF_TOKEN=***" in shown
    assert "HF_TOKEN=hf_abc" in render_sbatch(plan, procs, opts, RUN, "job")


def test_a_bad_environment_variable_name_is_refused():
    with pytest.raises(LaunchError, match="not an environment variable name"):
        render([trainer(env={"A B": "x"})])


# ----------------------------------------------------------------------------- supervision
def test_the_job_waits_for_trainers_then_stops_servers_and_fails_on_the_first_failed_step():
    script = render([server(), trainer()])
    assert "trainers finished; stopping the servers" in script
    assert re.search(r"ended with exit code \$rc; stopping the job.*\n(.*\n)*.*exit 1", script)
    assert script.rstrip().endswith("exit 0")


# ----------------------------------------------------------------------------- safety
PAYLOAD = "a'b \"c\" $(touch /tmp/pwned) `touch /tmp/pwned` ; \\ $HOME #x\nrm -rf /tmp/pwned"


def test_rendered_script_with_hostile_values_is_valid_bash(tmp_path):
    one_line = PAYLOAD.replace("\n", " ")
    opts = LauncherConfig(type="slurm", partition=one_line, sbatch_extra=[f"--comment={one_line}"],
                          srun_extra=[f"--comment={PAYLOAD}"], container_image=PAYLOAD)
    procs = [ProcessSpec(name="actor-0", component="actor", role="trainer", node=0,
                         argv=("echo", PAYLOAD, f"{node_host(0)}{PAYLOAD}"),
                         env={"X": PAYLOAD, "Y": f"{PAYLOAD}{node_host(0)}"}, gpus=(0,))]
    plan = plan_of(procs, num_nodes=1)
    path = tmp_path / "job.sbatch"
    path.write_text(render_sbatch(plan, procs, opts, f"/tmp/{one_line}", one_line))
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


@pytest.mark.parametrize("key", ["job_name", "partition", "sbatch_extra", "run_dir"])
def test_a_line_break_in_an_sbatch_value_is_refused(key):
    opts = LauncherConfig(type="slurm")
    job_name, run_dir = "job", RUN
    if key == "job_name":
        job_name = "x\ntouch /tmp/pwned"
    elif key == "run_dir":
        run_dir = "/tmp/x\ntouch /tmp/pwned"
    else:
        setattr(opts, key, ["x\ntouch /tmp/pwned"] if key == "sbatch_extra" else "x\ny")
    plan = plan_of([server()])
    with pytest.raises(LaunchError, match="line breaks"):
        render_sbatch(plan, plan.processes, opts, run_dir, job_name)


def test_sbatch_values_survive_sbatch_own_parsing_of_quotes_and_backslashes():
    d = directives(render_sbatch(plan_of([server()]), [server()], LauncherConfig(type="slurm"),
                                 RUN, "it's a \\ job"))
    assert d[0] == "--job-name='it'\"'\"'s a \\\\ job'"


def test_a_percent_in_the_run_folder_is_not_taken_for_a_slurm_pattern():
    plan = plan_of([server()])
    script = render_sbatch(plan, plan.processes, LauncherConfig(type="slurm"), "/runs/100%", "j")
    assert "--output=/runs/100%%/slurm-%j.out" in directives(script)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    # any text a process can receive: no NUL, no lone surrogates (argv/env are bytes)
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
            max_size=20),
    st.integers(0, 2).map(node_host)), max_size=6).map("".join))
def test_every_value_reaches_the_process_as_written_with_node_names_filled_in(value):
    expected = re.sub(r"@@AREAL_NODE_(\d+)@@", lambda m: f"n{m.group(1)}", value)
    assert bash_words(shell_word(value)) == [expected]
