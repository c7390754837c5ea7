"""The run folder's layout: the name of everything a run keeps in its folder, said once.

Every run has a folder of its own (launcher.node.runs makes it). The launch writes the plan and
the entry's config there, the runner the request and the record, each node's supervisor its
processes' logs and its status; `status`, `cancel` and `logs` read them back, on any runner.
The folders whose files have a format of their own are named by the module that owns the
format: restarts/ (launcher.node.restarts), control/ and checkpoints/
(launcher.trainer.checkpoints), metrics.jsonl and tracking.json (launcher.spec.tracking).

Names, and the one cache folder of areal-launch; nothing here touches the disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

PLAN = "plan.json"  # the plan, secrets included: every process is told its path
REQUEST = "request.json"  # the launch request, which every node's supervisor runs
RECORD = "launch.json"  # which runner started the run, and the ids it is known by
ENTRY_CONFIG = "entry_config.yaml"  # the config an entry of another project gets (--config)
LOGS = "logs"  # logs/<process>.log: each process's output
STATUS = "status"  # status/<node>.json: each node's supervisor's account of its processes
DONE = "done"  # done/node<k>: plan node k's trainers all exited 0
PREPARED = "prepared"  # prepared/<attempt>: the first node prepared the request's folders
JOB_SCRIPT = "job.sbatch"  # Slurm: the batch script as submitted
RAY_JOB = "ray-job.json"  # Ray: the placement and node commands the driver performs
POST_EXIT_HOOK_LOG = f"{LOGS}/post_exit_hook.log"  # launcher.post_exit_hook's output

CACHE = "areal-launch"  # the folder of areal-launch in the user's cache


def log_file(process: str) -> str:
    """Where process `process` writes its output, relative to the run folder."""
    return f"{LOGS}/{process}.log"


def status_file(node: Optional[int]) -> str:
    """The status file of plan node `node` (None: a run whose every node is this machine)."""
    return f"{STATUS}/{'all' if node is None else f'node{node}'}.json"


def slurm_output(job_id: str = "%j") -> str:
    """The Slurm job's own output file (the batch shell's lines); `%j` is sbatch's pattern."""
    return f"slurm-{job_id}.out"


def cache_root(environ: Mapping[str, str]) -> Path:
    """Where areal-launch keeps what outlives one run, for this user (the index of run ids):
    `$XDG_CACHE_HOME/areal-launch`, else `~/.cache/areal-launch`, as `environ` says."""
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / CACHE
