"""One sbatch script per run, rendered as text from the launch request and the options.

Pure (no I/O), like submitit's `_make_sbatch_string` and TorchX's dry run: `render_sbatch`
returns the exact script `launcher.dry_run` prints, and the Slurm runner only hands it to
`sbatch`. The script takes one allocation and runs ONE srun step over all its nodes, one task
per node: each task is the node's supervisor (`python -m launcher.node.agent`), which runs
that node's processes from the run's request.json with health deadlines, the first failure
stopping the node, and its processes' GPUs picked from the ones Slurm gave the task (so engines
that share GPUs need no overlapping steps). `--kill-on-bad-exit` stops every node when one
fails; a node with servers only ends when the nodes with trainers have finished.

Safety: the processes' command lines travel as data in request.json, never through the shell;
every value that reaches the script is single-quoted with `shlex.quote`. `launcher.setup` lines
are the exception: they are commands by design, run as given before each node's supervisor.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from launcher.runners.base import NODE_MODULE
from launcher.spec.errors import UserError
from launcher.spec.process import ENV_GPUS
from launcher.spec.request import LaunchRequest
from launcher.spec.runfolder import LOGS, REQUEST, slurm_output

REQUEUE_MODULE = "launcher.node.requeue"  # what the batch shell runs for launcher.requeue
EXIT_HOOK_MODULE = "launcher.node.exithook"  # ... and for launcher.post_exit_hook, at its end
REQUEUE_MARGIN_S = 20  # of the signal's lead, kept for `scontrol requeue` and the stop


def gpus_per_node(request: LaunchRequest, nodes: Optional[range] = None) -> int:
    """GPUs each node's task asks for: up to the highest GPU position any process (of `nodes`,
    None: of every node) uses (positions are indices into what Slurm shows the task). 0 on cpu."""
    if request.device != "cuda":
        return 0
    return max(
        (g + 1 for p in request.processes for g in p.gpus if nodes is None or p.node in nodes),
        default=0,
    )


def cpu_warning(request: LaunchRequest, opts: Any) -> list[str]:
    """A job on part of a node without launcher.cpus_per_gpu gets Slurm's default CPUs; a
    CPU-only node group without its own options takes nodes of the default partition."""
    gpus = gpus_per_node(request)
    out = []
    if _opt(opts, "cpus_per_gpu") is None and gpus not in (request.gpus_per_node, 0):
        out.append(
            f"the job takes {gpus} of {request.gpus_per_node} GPUs per node and Slurm's "
            "default CPUs with them (DefCpuPerGPU, often 1): set launcher.cpus_per_gpu"
        )
    given = _opt(opts, "group_sbatch") or {}
    for s in node_sets(request, opts):
        out += [
            f"node group {label!r} is CPU-only but launcher.group_sbatch has no options "
            "for it: its nodes come from the job's default partition (set e.g. "
            f"launcher.group_sbatch.{label}=[--partition=cpu])"
            for label in s.labels
            if s.cpu_only and label not in given
        ]
    return out


@dataclass(frozen=True)
class NodeSet:
    """Consecutive plan nodes that Slurm gives alike: one component of a heterogeneous job
    (the whole job when there is one). Plan node k stays the k-th node of the allocation."""

    labels: tuple[str, ...]  # the node groups of its nodes (none: nodes in no group)
    nodes: range
    gpus: int  # GPUs each node asks for (0: none, CPU-only nodes always)
    cpu_only: bool
    whole: bool  # every GPU of the nodes, or none: the nodes are the job's (--exclusive)
    options: tuple[str, ...]  # launcher.group_sbatch.<label>: more #SBATCH options


def node_sets(request: LaunchRequest, opts: Any) -> list[NodeSet]:
    """The allocation's node sets, in plan node order: a new set wherever the group's options
    (launcher.group_sbatch) or GPUs-or-none change, so groups that Slurm gives alike stay one
    component (docs/architecture.md §8). UserError for options of an unknown group."""
    given = dict(_opt(opts, "group_sbatch") or {})
    known = {g.label for g in request.node_groups}
    unknown = sorted(set(given) - known)
    if unknown:
        raise UserError(
            f"launcher.group_sbatch.{unknown[0]}: the plan has no node group "
            f"{unknown[0]!r} (its groups: {', '.join(sorted(known)) or 'none'}); "
            "use a label of cluster.node_groups"
        )
    group_of: dict[int, str] = {}
    for g in reversed(request.node_groups):  # the first group holding a node wins
        group_of.update(dict.fromkeys(g.nodes, g.label))
    labels = [group_of.get(k) for k in range(request.nodes_needed())]
    keys = [
        (tuple(str(o) for o in given.get(label or "", ())), request.cpu_only(k))
        for k, label in enumerate(labels)
    ]
    out: list[NodeSet] = []
    first = 0
    for k in range(1, len(keys) + 1):
        if k < len(keys) and keys[k] == keys[first]:
            continue
        options, cpu = keys[first]
        nodes = range(first, k)
        gpus = 0 if cpu else gpus_per_node(request, nodes)
        whole = _opt(opts, "cpus_per_gpu") is None and gpus in (request.gpus_per_node, 0)
        named = tuple(dict.fromkeys(label for label in labels[first:k] if label))
        out.append(NodeSet(named, nodes, gpus, cpu, whole, options))
        first = k
    return out


@dataclass(frozen=True)
class SbatchJob:
    """The run on Slurm: the batch script sbatch is handed, and the request its nodes read."""

    request: LaunchRequest
    script: str


def render_sbatch(
    request: LaunchRequest,
    opts: Any,
    python: str,
    package_dirs: Sequence[str] = (),
    host_python: str = sys.executable,
) -> str:
    """The whole sbatch script for one run. `opts` is the Slurm runner's Config.

    python: the interpreter on the nodes (inside the container, with one). A job that takes
    every GPU of its nodes (request.gpus_per_node) takes whole nodes. package_dirs: the launcher's
    package folders, mounted into a container at the same path. host_python: the launcher's own
    interpreter, which the batch shell runs outside any container (launcher.requeue's helper).
    Node groups with CPU-only nodes or options of their own make a heterogeneous job, one
    component per node set (node_sets), run by one srun step with a part per component.
    Raises UserError for what cannot be run: no processes, more nodes than the plan's cluster,
    more GPUs than a node has, a value that cannot be written into the script.
    """
    if not request.processes:
        raise UserError("the plan has no processes to run on Slurm: enable rollout or actor")
    n_nodes = request.nodes_needed()
    if n_nodes > request.num_nodes:
        raise UserError(
            f"the plan needs {n_nodes} nodes but cluster.num_nodes="
            f"{request.num_nodes}; set cluster.num_nodes={n_nodes}"
        )
    gpus = gpus_per_node(request)
    if gpus > request.gpus_per_node:
        raise UserError(
            f"the plan uses {gpus} GPUs on a node but nodes have "
            f"cluster.gpus_per_node={request.gpus_per_node}"
        )
    sets = node_sets(request, opts)
    lines = [
        "#!/bin/bash",
        f"# areal-launch: {len(request.processes)} process(es) on {n_nodes} node(s); one "
        "task per node runs that node's supervisor",
        *_sbatch_lines(opts, request, sets),
    ]
    lines += _body(request, opts, (python, host_python), sets, package_dirs)
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- #SBATCH
def _directive_value(key: str, value: Any) -> str:
    """A value for an #SBATCH line. sbatch parses these itself (quotes as in the shell, but a
    backslash escapes the next character even inside quotes, hence the doubling); a newline
    would end the line and make the rest a shell command, so it is refused."""
    text = str(value)
    if any(c in text for c in "\n\r\0"):
        raise UserError(f"{key}={text!r}: #SBATCH values cannot hold line breaks; remove them")
    return shlex.quote(text).replace("\\", "\\\\")


def _sbatch_lines(opts: Any, request: LaunchRequest, sets: Sequence[NodeSet]) -> list[str]:
    """The job's options with its first node set, then `hetjob` and each further set's."""
    d = _directive_value
    out = [f"#SBATCH --job-name={d('launcher.job_name', request.job_name)}"]
    for k, s in enumerate(sets):
        if k:
            out.append(
                f"#SBATCH hetjob  # plan node(s) {_span(s.nodes)}: node group(s) "
                f"{', '.join(s.labels) or 'none'}"
            )
        out += [f"#SBATCH --nodes={len(s.nodes)}", "#SBATCH --ntasks-per-node=1"]
        if s.gpus > 0:
            out.append(f"#SBATCH --gpus-per-node={s.gpus}")
        if s.whole or _opt(opts, "exclusive"):  # every GPU of the nodes (or none asked), or
            out.append("#SBATCH --exclusive")  # asked: the nodes' CPUs are ours too
        if k == 0:
            out += _job_lines(opts, request)
        # Slurm carries account, qos and time over to later components, not these; a CPU-only
        # set's partition is its group's (launcher.group_sbatch)
        keys = (
            ()
            if s.cpu_only
            else (
                ("partition", "partition"),
                ("cpus_per_gpu", "cpus-per-gpu"),
                ("mem_per_gpu", "mem-per-gpu"),
            )
        )
        for key, flag in keys:
            value = _opt(opts, key)
            if value is not None:
                out.append(f"#SBATCH --{flag}={d('launcher.' + key, value)}")
        if k == 0:
            for extra in _opt(opts, "sbatch_extra") or ():
                out.append(f"#SBATCH {d('launcher.sbatch_extra', extra)}")
        for extra in s.options:
            out.append(f"#SBATCH {d(f'launcher.group_sbatch.{s.labels[0]}', extra)}")
    return out


def _span(nodes: range) -> str:
    return str(nodes.start) if len(nodes) == 1 else f"{nodes.start}-{nodes.stop - 1}"


def _job_lines(opts: Any, request: LaunchRequest) -> list[str]:
    """What holds for the whole job: its output file, requeue, account, qos, time."""
    d = _directive_value
    # sbatch expands %j and friends in the path: a literal % is written %%
    output = f"{request.run_dir.replace('%', '%%')}/{slurm_output()}"
    out = [f"#SBATCH --output={d('run_dir', output)}"]
    if _opt(opts, "requeue"):  # USR1 before the time limit: checkpoint, then requeue (below)
        out += [
            "#SBATCH --requeue",
            f"#SBATCH --signal=B:USR1@{int(opts.requeue_signal_s)}",
            "#SBATCH --open-mode=append",
        ]
    else:
        out.append("#SBATCH --no-requeue")
    for key, flag in (
        ("account", "account"),
        ("qos", "qos"),
        ("time_limit", "time"),
        ("reservation", "reservation"),
    ):
        value = _opt(opts, key)
        if value is not None:
            out.append(f"#SBATCH --{flag}={d('launcher.' + key, value)}")
    return out


def _opt(opts: Any, key: str) -> Optional[Any]:
    value = getattr(opts, key, None)
    return None if value is None or value == "" else value


def shell_word(value: str) -> str:
    if "\0" in value:
        raise UserError(f"{value!r}: a NUL byte cannot be passed to a process; remove it")
    return shlex.quote(value)


# ----------------------------------------------------------------------------- body
def _body(
    request: LaunchRequest,
    opts: Any,
    pythons: tuple[str, str],
    sets: Sequence[NodeSet],
    package_dirs: Sequence[str],
) -> list[str]:
    """The batch shell's commands; pythons: the nodes' interpreter and the launcher's own."""
    q = shell_word
    python, host_python = pythons
    run_dir = request.run_dir
    het = len(sets) > 1
    command = [q(python), "-m", NODE_MODULE, q(f"{run_dir}/{REQUEST}"), "--peers"]
    setup = [str(s) for s in _opt(opts, "setup") or ()]  # commands by design: run as given
    image = _opt(opts, "container_image")
    if image is not None and package_dirs:
        setup = [
            f"export PYTHONPATH={q(_parent(package_dirs))}${{PYTHONPATH:+:$PYTHONPATH}}",
            *setup,
        ]
    if setup:  # then the supervisor replaces the shell
        script = "set -e\n" + "\n".join(setup) + '\nexec "$@"'
        command = ["bash", "-c", shlex.quote(script), "areal-launch-node", *command]
    step: list[str] = []
    for k, s in enumerate(sets):
        part = _srun_part(request, opts, s, k if het else None, package_dirs)
        # a CPU-only node shows its supervisor no GPUs (the batch shell's would be inherited)
        cmd = (["env", "-u", ENV_GPUS] if s.cpu_only else []) + command
        step += [
            ("srun " if k == 0 else "  ") + " ".join(part) + " \\",
            "  " + " ".join(cmd) + (" : \\" if k < len(sets) - 1 else ""),
        ]
    if _opt(opts, "requeue"):
        step = _requeue_lines(opts, step, host_python)
    else:
        step.append("rc=$?")
    if het:  # each component's nodes, in plan node order
        hosts = (
            f"AREAL_HOSTS=$(for k in $(seq 0 {len(sets) - 1}); do "
            'v=SLURM_JOB_NODELIST_HET_GROUP_$k; scontrol show hostnames "${!v}"; done | '
            "paste -sd, -)"
        )
    else:
        hosts = 'AREAL_HOSTS=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)'
    return [
        "",
        "set -uo pipefail",
        f"RUN_DIR={q(run_dir)}",
        "# plan node k is the k-th node of the allocation (each task reads $SLURM_NODEID)",
        hosts,
        "export AREAL_HOSTS",
        'echo "areal-launch: job $SLURM_JOB_ID on $AREAL_HOSTS"',
        f'mkdir -p "$RUN_DIR/{LOGS}"',
        *step,
        'if [ "$rc" = 0 ]; then echo "areal-launch: job finished: ok"; else',
        "  echo \"areal-launch: job failed: a node's supervisor exited with $rc (its root cause "
        'is above)"; fi',
        *_exit_hook_lines(request, host_python),
        'exit "$rc"',
    ]


def _exit_hook_lines(request: LaunchRequest, host_python: str) -> list[str]:
    """launcher.post_exit_hook at the batch shell's end, once the step (every node's processes)
    is over: launcher.node.exithook runs it from request.json, in the launcher's interpreter."""
    if not request.post_exit_hook:
        return []
    return [
        "# launcher.post_exit_hook, once every node's processes are gone (node/exithook.py)",
        f'{shell_word(host_python)} -m {EXIT_HOOK_MODULE} --run-dir "$RUN_DIR" --status "$rc"',
    ]


def _srun_part(
    request: LaunchRequest,
    opts: Any,
    s: NodeSet,
    het_group: Optional[int],
    package_dirs: Sequence[str],
) -> list[str]:
    """srun's options for one node set (the whole step when the job is not heterogeneous)."""
    q = shell_word
    part = [] if het_group is None else [f"--het-group={het_group}"]
    part += [
        f"--nodes={len(s.nodes)}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        f"--job-name={q(request.job_name)}",
        "--export=ALL",
    ]
    part.append(f"--gpus-per-node={s.gpus}" if s.gpus else "--gres=none")
    if s.whole:
        part.append(
            "--cpus-per-task=$SLURM_CPUS_ON_NODE"
            if het_group is None
            else f"--cpus-per-task=${{SLURM_JOB_CPUS_PER_NODE_HET_GROUP_{het_group}%%[(,]*}}"
        )
    elif s.gpus and _opt(opts, "cpus_per_gpu") is not None:
        part.append(f"--cpus-per-gpu={q(str(_opt(opts, 'cpus_per_gpu')))}")
    image = _opt(opts, "container_image")
    if image is not None:
        part.append(f"--container-image={q(str(image))}")
        part.append(f"--container-mounts={q(_mounts(request, opts, package_dirs))}")
    return part + [q(str(a)) for a in _opt(opts, "srun_extra") or ()]


def _requeue_lines(opts: Any, step: list[str], host_python: str) -> list[str]:
    """launcher.requeue: the step in the background, so that the batch shell takes Slurm's USR1
    (requeue_signal_s before the time limit) while it waits, and launcher.node.requeue called
    as the job starts (a start after a requeue is recorded) and on the signal (a checkpoint,
    then the requeue, unless the run ends first or that checkpoint was its last step)."""
    lead = int(opts.requeue_signal_s)
    wait_s = max(5, lead - REQUEUE_MARGIN_S)
    helper = f'{shell_word(host_python)} -m {REQUEUE_MODULE} --run-dir "$RUN_DIR"'
    return [
        f'{helper} started --uptime "$SECONDS"',
        "requeue_job() {  # Slurm's USR1: the time limit is near",
        "  trap - USR1; trapped=1",
        f'  {helper} warned --uptime "$SECONDS" --lead {lead} --wait {wait_s} --step "$step"',
        "}",
        "trap requeue_job USR1",
        "# the step runs in the background so that the shell takes USR1 while it waits",
        *step[:-1],
        step[-1] + " &",
        "step=$!",
        "# USR1 ends a wait early (rc 138): wait again, for the step's own exit code",
        'while :; do trapped=; wait "$step"; rc=$?; [ -n "$trapped" ] || break; done',
    ]


def _parent(package_dirs: Sequence[str]) -> str:
    import os.path

    return os.path.dirname(package_dirs[0].rstrip("/"))


def _mounts(request: LaunchRequest, opts: Any, package_dirs: Sequence[str]) -> str:
    """The run folder, the launcher's packages and what the processes read (the model, the
    trainer's folder: read-only) and the user's mounts, each at the same path inside the
    container, so every path in the request holds there too."""
    mounts = [f"{request.run_dir}:{request.run_dir}"]
    mounts += [f"{d}:{d}:ro" for d in (*package_dirs, *request.paths)]
    for extra in str(_opt(opts, "container_mounts") or "").split(","):
        if extra.strip():
            mounts.append(extra.strip())
    return ",".join(mounts)
