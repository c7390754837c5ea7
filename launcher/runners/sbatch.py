"""One sbatch script per run, rendered as text from the plan, its processes and the options.

Pure (no I/O), like submitit's `_make_sbatch_string` and TorchX's dry run: `render_sbatch`
returns the exact script `launcher.dry_run` prints, and `runners.slurm.submit` only hands it to
`sbatch`. The script takes one allocation and runs each process as its own background `srun`
step pinned to one node with exactly its GPUs (steps that share GPUs, collocated, overlap on the
node's GPUs instead); it waits for the trainers, then stops the servers, and fails the job
(stopping every step) as soon as any step fails.

Safety: every value that reaches the script is data, single-quoted with `shlex.quote`; the only
shell expansions are node names (`"${AREAL_NODES[k]}"`), put where the engines wrote a host
placeholder. `launcher.setup` lines are the exception: they are commands by design and are run
as given, before each step's command.
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Optional, Sequence

from launcher.errors import LaunchError
from launcher.plan import Plan, ProcessSpec, mask_env

NODES_VAR = "AREAL_NODES"
_PLACEHOLDER = re.compile(r"@@AREAL_NODE_(\d+)@@")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Slurm sets each step's CUDA_VISIBLE_DEVICES to the GPUs it gave the step, which need not be
# the plan's node-local indices (another job may hold GPUs 0-3), so the spec's value is dropped;
# steps that share GPUs pick theirs from Slurm's list by those indices (see _step).
SLURM_OWNED_ENV = ("CUDA_VISIBLE_DEVICES",)


def slurm_host_placeholder(node: int) -> str:
    """The address of node `node` in a Slurm script: replaced by that node's name at run time.

    Engines get this as `LaunchContext.host`; the script fills it from
    `scontrol show hostnames "$SLURM_JOB_NODELIST"` (node k = k-th node of the allocation).
    """
    return f"@@AREAL_NODE_{int(node)}@@"


def shell_word(value: str) -> str:
    """`value` as one shell word that expands to itself, except host placeholders -> node names."""
    if "\0" in value:
        raise LaunchError(f"{value!r}: a NUL byte cannot be passed to a process; remove it")
    if not _PLACEHOLDER.search(value):
        return shlex.quote(value)
    quoted = "'" + value.replace("'", "'\"'\"'") + "'"  # always quoted: the splice needs it
    word = _PLACEHOLDER.sub(lambda m: f"'\"${{{NODES_VAR}[{m.group(1)}]}}\"'", quoted)
    # drop the empty '' a placeholder leaves at either end (the word stays non-empty)
    word = word[2:] if word.startswith("''") else word
    return word[:-2] if word.endswith("''") else word


def nodes_needed(plan: Plan, processes: Sequence[ProcessSpec]) -> int:
    """Nodes the allocation must have: up to the highest node any process or engine uses.

    Node k of the plan is the k-th node of the allocation, so the count is the highest index
    used plus one (never zero), not the number of distinct nodes.
    """
    used = [p.node for p in processes]
    used += [int(m.group(1)) for p in processes
             for text in (*p.argv, *p.env.values()) for m in _PLACEHOLDER.finditer(text)]
    used += [plan.cluster.node_of(g) for c in plan.components.values() for g in c.gpus
             if plan.cluster.gpus_per_node > 0]
    return max(used, default=0) + 1


def shared_nodes(processes: Sequence[ProcessSpec]) -> set[int]:
    """Nodes where two processes use the same GPU (collocated or hybrid placement)."""
    shared, seen = set(), {}
    for p in processes:
        for g in p.gpus:
            if (p.node, g) in seen and seen[(p.node, g)] != p.name:
                shared.add(p.node)
            seen.setdefault((p.node, g), p.name)
    return shared


def render_sbatch(plan: Plan, processes: Sequence[ProcessSpec], opts: Any, run_dir: str,
                  job_name: str, mask_secrets: bool = False) -> str:
    """The whole sbatch script for one run. `opts` is `LauncherConfig` (or its DictConfig).

    `mask_secrets=True` for printing (dry run): secret env values become *** (DESIGN §7).
    Raises LaunchError for what cannot be run: no processes, more nodes than
    `cluster.num_nodes`, a step with more GPUs than a node has, a bad value.
    """
    if not processes:
        raise LaunchError("the plan has no processes to run on Slurm: enable rollout or actor")
    gpn = plan.cluster.gpus_per_node
    n_nodes = nodes_needed(plan, processes)
    if n_nodes > plan.cluster.num_nodes:
        raise LaunchError(f"the plan needs {n_nodes} nodes but cluster.num_nodes="
                          f"{plan.cluster.num_nodes}; set cluster.num_nodes={n_nodes} or use "
                          "fewer GPUs")
    for p in processes:
        if p.node < 0 or len(p.gpus) > max(gpn, 0) or any(not 0 <= g < gpn for g in p.gpus):
            raise LaunchError(f"process {p.name!r} wants GPUs {list(p.gpus)} of node {p.node} "
                              f"but nodes have cluster.gpus_per_node={gpn}")
    per_node = [sum(1 for p in processes if p.node == k) for k in range(n_nodes)]
    lines = ["#!/bin/bash",
             f"# areal-launch: {len(processes)} step(s) on {n_nodes} node(s), one srun each",
             *_sbatch_lines(opts, run_dir, job_name, n_nodes, gpn, max(per_node))]
    lines += _prologue(run_dir, gpn, _opt(opts, "cpus_per_gpu") is None)
    shared = shared_nodes(processes)
    for p in processes:
        lines += _step(p, opts, run_dir, mask_secrets, gpn if p.node in shared else 0)
    lines += _supervision(opts)
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- #SBATCH
def _directive_value(key: str, value: Any) -> str:
    """A value for an #SBATCH line. sbatch parses these itself (quotes as in the shell, but a
    backslash escapes the next character even inside quotes, hence the doubling); a newline
    would end the line and make the rest a shell command, so it is refused."""
    text = str(value)
    if any(c in text for c in "\n\r\0"):
        raise LaunchError(f"{key}={text!r}: #SBATCH values cannot hold line breaks; remove them")
    return shlex.quote(text).replace("\\", "\\\\")


def _sbatch_lines(opts: Any, run_dir: str, job_name: str, n_nodes: int, gpn: int,
                  steps_per_node: int) -> list[str]:
    d = _directive_value
    out = [f"#SBATCH --job-name={d('launcher.job_name', job_name)}",
           f"#SBATCH --nodes={n_nodes}",
           # one task slot per step, so concurrent --exact steps on a node all fit
           f"#SBATCH --ntasks-per-node={max(steps_per_node, 1)}"]
    if gpn > 0:
        out.append(f"#SBATCH --gpus-per-node={gpn}")
    if _opt(opts, "cpus_per_gpu") is None:  # whole nodes; steps share the CPUs by their GPUs
        out.append("#SBATCH --exclusive")
    # sbatch expands %j and friends in the path: a literal % is written %%
    out.append(f"#SBATCH --output={d('run_dir', run_dir.replace('%', '%%') + '/slurm-%j.out')}")
    out.append("#SBATCH --no-requeue")
    for key, flag in (("partition", "partition"), ("account", "account"), ("qos", "qos"),
                      ("time_limit", "time"), ("cpus_per_gpu", "cpus-per-gpu"),
                      ("mem_per_gpu", "mem-per-gpu")):
        value = _opt(opts, key)
        if value is not None:
            out.append(f"#SBATCH --{flag}={d('launcher.' + key, value)}")
    for extra in _opt(opts, "sbatch_extra") or ():
        out.append(f"#SBATCH {d('launcher.sbatch_extra', extra)}")
    return out


def _opt(opts: Any, key: str) -> Optional[Any]:
    value = getattr(opts, key, None)
    return None if value is None or value == "" else value


# ----------------------------------------------------------------------------- body
def _prologue(run_dir: str, gpn: int, whole_nodes: bool) -> list[str]:
    lines = [
        "",
        "set -uo pipefail",
        "# srun would take the job's GPUs per node as its own request and run steps one after",
        "# the other (reference/slurm.md): each step says its own --gpus-per-node instead",
        "unset SLURM_GPUS_PER_NODE",
        f"RUN_DIR={shell_word(run_dir)}",
        f'mapfile -t {NODES_VAR} < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
    ]
    if whole_nodes and gpn > 0:
        lines += ["# whole nodes (no launcher.cpus_per_gpu): each step gets the node's CPUs in",
                  "# proportion to its GPUs (nodes assumed alike)",
                  f"CPUS_PER_GPU=$(( SLURM_CPUS_ON_NODE / {gpn} > 0 ? "
                  f"SLURM_CPUS_ON_NODE / {gpn} : 1 ))"]
    return lines + [
        'mkdir -p "$RUN_DIR/logs"',
        f'echo "areal-launch: job $SLURM_JOB_ID on ${{{NODES_VAR}[*]}}"',
        "declare -A STEP_NAME=() STEP_ROLE=()",
        'track() { STEP_NAME[$1]=$2; STEP_ROLE[$1]=$3; }',
        "",
    ]


def _step(p: ProcessSpec, opts: Any, run_dir: str, mask_secrets: bool,
          shared_gpus: int) -> list[str]:
    """One background srun step: one node, one task, exactly this process's GPUs.

    `shared_gpus` > 0: processes on this node share GPUs (collocated), which exclusive steps
    cannot express; each step there takes all the node's GPUs with --overlap and picks its
    own from Slurm's CUDA_VISIBLE_DEVICES by the plan's node-local indices.
    """
    q = shell_word
    n_gpus = shared_gpus or len(p.gpus)
    srun = ["srun", f"--job-name={q(p.name)}", "--nodes=1", "--ntasks=1",
            f'--nodelist="${{{NODES_VAR}[{p.node}]}}"']
    srun.append(f"--gpus-per-node={n_gpus}" if n_gpus else "--gres=none")
    cpus_per_gpu, mem_per_gpu = _opt(opts, "cpus_per_gpu"), _opt(opts, "mem_per_gpu")
    if cpus_per_gpu is None:
        srun.append(f"--cpus-per-task=$(( {max(n_gpus, 1)} * CPUS_PER_GPU ))")
    elif n_gpus:
        srun.append(f"--cpus-per-gpu={q(str(cpus_per_gpu))}")
    if mem_per_gpu is not None and n_gpus:
        srun.append(f"--mem-per-gpu={q(str(mem_per_gpu))}")
    srun += ["--exact", "--kill-on-bad-exit=1", "--export=ALL"]
    if shared_gpus:
        srun.append("--overlap")
    for key, flag in (("container_image", "container-image"),
                      ("container_mounts", "container-mounts")):
        value = _opt(opts, key)
        if value is not None:
            srun.append(f"--{flag}={q(str(value))}")
    srun += [q(str(a)) for a in _opt(opts, "srun_extra") or ()]

    env = {k: v for k, v in p.env.items() if k not in SLURM_OWNED_ENV}
    bad = [k for k in env if not _ENV_NAME.match(k)]
    if bad:
        raise LaunchError(f"process {p.name!r}: {bad[0]!r} is not an environment variable name")
    if mask_secrets:
        env = mask_env(env)
    command = (["env", *[q(f"{k}={v}") for k, v in env.items()]] if env else [])
    before = [str(s) for s in _opt(opts, "setup") or ()]  # commands by design: run as given
    if shared_gpus and p.gpus:
        picked = ",".join(f"${{slurm_gpus[{g}]}}" for g in p.gpus)
        before = ['IFS=, read -ra slurm_gpus <<< "$CUDA_VISIBLE_DEVICES"',
                  f'export CUDA_VISIBLE_DEVICES="{picked}"', *before]
    if before:  # then the process replaces the shell
        script = "set -e\n" + "\n".join(before) + '\nexec "$@"'
        command += ["bash", "-c", shlex.quote(script), q(p.name)]
    command += [q(str(a)) for a in p.argv]
    gpus = ",".join(map(str, p.gpus)) or "none"
    return [f"# {p.name}: {p.role} ({p.component}) on node {p.node}, plan GPUs {gpus}"
            + (" (shared with other steps)" if shared_gpus else ""),
            " ".join(srun) + " \\",
            "  " + " ".join(command) + " \\",
            f"  > {q(f'{run_dir}/logs/{p.name}.log')} 2>&1 < /dev/null &",
            f"track $! {q(p.name)} {q(p.role)}", ""]


def _supervision(opts: Any) -> list[str]:
    """Wait for the trainers, then stop the servers; the first failed step fails the job.

    Polls with `kill -0` + `wait PID` (portable to bash 4; `wait -n -p` needs bash 5.1):
    a server that ends while trainers still need it counts as a failure.
    """
    grace = max(int(float(getattr(opts, "grace_period_s", 10) or 10)), 1)
    return f"""\
TRAINERS_LEFT=0
for pid in "${{!STEP_ROLE[@]}}"; do [ "${{STEP_ROLE[$pid]}}" = trainer ] && TRAINERS_LEFT=$((TRAINERS_LEFT + 1)); done
HAD_TRAINERS=$TRAINERS_LEFT

stop_steps() {{  # TERM the sruns (srun passes it to its step), KILL after {grace} s; the job's end reaps the rest
  local pid i
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
  for ((i = 0; i < {grace * 10}; i++)); do
    local left=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left=1; done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for pid in "$@"; do kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
}}

while [ ${{#STEP_NAME[@]}} -gt 0 ]; do
  for pid in "${{!STEP_NAME[@]}}"; do
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"; rc=$?
    name=${{STEP_NAME[$pid]}}; role=${{STEP_ROLE[$pid]}}
    unset "STEP_NAME[$pid]" "STEP_ROLE[$pid]"
    if [ "$rc" = 0 ] && {{ [ "$role" = trainer ] || [ "$HAD_TRAINERS" = 0 ]; }}; then
      echo "areal-launch: step $name finished"
      [ "$role" = trainer ] || continue
      TRAINERS_LEFT=$((TRAINERS_LEFT - 1))
      [ "$TRAINERS_LEFT" = 0 ] || continue
      echo "areal-launch: trainers finished; stopping the servers"
      stop_steps "${{!STEP_NAME[@]}}"
      break 2
    fi
    echo "areal-launch: step $name ($role) ended with exit code $rc; stopping the job" >&2
    echo "areal-launch: last lines of $RUN_DIR/logs/$name.log:" >&2
    tail -n 20 "$RUN_DIR/logs/$name.log" >&2
    stop_steps "${{!STEP_NAME[@]}}"
    echo "areal-launch: job failed: step $name exited with $rc"
    exit 1
  done
  sleep 0.5
done
echo "areal-launch: job finished: ok"
exit 0""".split("\n")
