"""launcher.post_exit_hook: one shell command, run once when the run has ended (docs §8).

AReaL's `post_exit_hook` as AReaL's launchers run it (areal/infra/utils/launcher.py): after every
process of the run is gone, the command in a shell with `LOG_DIR` (here the run folder's logs)
in its environment, bounded at 600 s. Ours adds the run's exit code (`AREAL_EXIT_STATUS`) and
its folder (`AREAL_RUN_DIR`), kills the hook's whole process group when the bound passes (and
whatever it left in its group when it ends, so nothing of it outlives the launcher), keeps its
output in logs/post_exit_hook.log and says in one line, the run's last, what it did. Its failure
never changes the run's exit code. It runs where the launcher waits for the run's end: the local
runner after its keeper returned, the Slurm job's batch shell at its end (`python -m
launcher.node.exithook`, the launcher's own interpreter), the Ray driver once every node actor
is gone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from launcher.spec.process import ENV_RUN_DIR
from launcher.spec.runfolder import LOGS, POST_EXIT_HOOK_LOG, REQUEST

HOOK_TIMEOUT_S = 600.0  # AReaL's bound
ENV_LOG_DIR = "LOG_DIR"  # AReaL's name: where the run's logs are
ENV_EXIT_STATUS = "AREAL_EXIT_STATUS"  # the run's exit code
SHELL = "/bin/sh"


@dataclass(frozen=True)
class HookResult:
    """How the hook ended: its exit code (None: killed at the bound), how long it took, and
    where its output is."""

    code: Optional[int]
    seconds: float
    timeout_s: float
    log: str

    def line(self) -> str:
        """What the run's summary says of it, one line."""
        if self.code is None:
            return (
                f"post_exit_hook: killed after {self.timeout_s:.0f} s (its bound); its output: "
                f"{self.log}"
            )
        how = "ok" if self.code == 0 else f"exit {self.code} (the run's exit code stands)"
        return f"post_exit_hook: {how} after {self.seconds:.1f} s; its output: {self.log}"


def run_hook(
    command: str,
    run_dir: str,
    status: int,
    timeout_s: float = HOOK_TIMEOUT_S,
    environ: Optional[Mapping[str, str]] = None,
) -> HookResult:
    """Run `command` once (see the module doc); the run's `status` goes to its environment."""
    log = Path(run_dir) / POST_EXIT_HOOK_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **(os.environ if environ is None else environ),
        ENV_LOG_DIR: str(Path(run_dir) / LOGS),
        ENV_EXIT_STATUS: str(status),
        ENV_RUN_DIR: str(run_dir),
    }
    began = time.monotonic()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [SHELL, "-c", command],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the bound kills all of it
        )
    try:
        code: Optional[int] = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = None
    _kill_group(proc.pid)
    if code is None:
        proc.wait()
    return HookResult(code, time.monotonic() - began, timeout_s, str(log))


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def hook_of(run_dir: str) -> Optional[str]:
    """The hook the run's request names (None: none, or no request to read)."""
    try:
        data = json.loads((Path(run_dir) / REQUEST).read_text())
    except (OSError, ValueError):
        return None
    hook = data.get("post_exit_hook") if isinstance(data, dict) else None
    return str(hook) if hook else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m launcher.node.exithook --run-dir DIR --status N`: the run's hook, from its
    request, as the Slurm batch shell runs it at its end; prints the summary's line."""
    ap = argparse.ArgumentParser(prog="python -m launcher.node.exithook")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--status", type=int, required=True)
    args = ap.parse_args(argv)
    hook = hook_of(args.run_dir)
    if hook is not None:
        print(f"areal-launch: {run_hook(hook, args.run_dir, args.status).line()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
