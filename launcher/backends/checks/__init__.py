"""Check the command lines a plan would run with the serving projects' own parsers.

Each checker is a script run in a SEPARATE interpreter (the one that has vLLM, or SGLang): the
launcher never imports them. `check_argvs` is the thin edge that runs one and reads its
verdicts; `server_args` picks the argv tails (after `-m <module>`) out of a plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass
from typing import IO, Any, Callable, Optional, Sequence

from launcher.spec.errors import ConfigError
from launcher.spec.plan import Plan
from launcher.spec.process import ProcessSpec, fill_hosts

SOURCE_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def checker(backend: str) -> str:
    """The module that checks `backend`'s argvs with its engine's parser (its checker)."""
    from launcher.backends.kinds import serve_backend  # not in the checkers' interpreters

    found = serve_backend(backend).checker
    if found is None:
        raise ConfigError(f"backend {backend!r} has no argv checker")
    return found


@dataclass(frozen=True)
class Verdict:
    """One argv's result: ok, or the parser's own error text."""

    ok: bool
    error: str = ""
    parsed: Optional[dict] = None  # a few resolved values (tp, pp, port...) when ok


def server_args(plan: Plan, backend: str) -> list[tuple[ProcessSpec, list[str]]]:
    """(process, argv after `-m <module>`) for each server of `backend` in the plan, hosts
    filled in as a node's supervisor would (node k is `node<k>`)."""
    from launcher.backends.kinds import serve_backend

    module = serve_backend(backend).module
    hosts = [f"node{k}" for k in range(plan.cluster.num_nodes)]
    out = []
    for proc in plan.processes:
        argv = [fill_hosts(a, hosts) for a in proc.argv]
        if proc.role == "server" and module in argv:
            out.append((proc, argv[argv.index(module) + 1 :]))
    return out


def plan_items(plan: Plan, backend: str, deep: bool = False) -> list[dict]:
    """Checker items for the plan's `backend` servers (with their environment, for deep checks)."""
    return [
        {"argv": argv, "deep": deep, "env": dict(proc.env)}
        for proc, argv in server_args(plan, backend)
    ]


def check_argvs(
    python: str, backend: str, items: Sequence[Any], timeout_s: float = 300.0
) -> list[Verdict]:
    """Run the backend's checker once in `python` on every item; one Verdict per item.

    An item is an argv (list of str) or {"argv": [...], "deep": bool, "env": {...}}. The
    checker imports `launcher.backends.checks` from this source tree (the SGLang venv does not
    install the launcher).
    """
    path = os.pathsep.join(filter(None, [SOURCE_ROOT, os.environ.get("PYTHONPATH")]))
    module = checker(backend)
    proc = subprocess.run(
        [python, "-m", module],
        input=json.dumps(list(items)),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": path},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{module} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return [Verdict(**v) for v in json.loads(proc.stdout)]


# ----------------------------------------------------------------------------- checker side
def describe(exc: BaseException) -> str:
    """The error's text; a bare `assert` has none, so name the line that failed instead."""
    text = str(exc).strip()
    if not text:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        text = f"{os.path.basename(frame.filename)}:{frame.lineno}: {frame.line}"
    return f"{type(exc).__name__}: {text}"


def argparse_error(stderr_text: str, code: Any) -> str:
    """argparse prints usage then `prog: error: ...` and exits 2: keep the last line."""
    lines = [line for line in stderr_text.splitlines() if line.strip()]
    return lines[-1] if lines else f"argparse exit {code}"


def checker_main(args: list[str], verdict: Callable[[dict], dict], out: IO[str]) -> int:
    """The CLI both checkers share: `[--deep] -- ARGS` checks one argv (exit 1 if bad);
    no `--`: a JSON list of items on stdin, a JSON list of verdicts on `out` (exit 0)."""
    if "--" in args:
        head, argv = args[: args.index("--")], args[args.index("--") + 1 :]
        results = [verdict({"argv": argv, "deep": "--deep" in head})]
    else:
        results = [
            verdict(item if isinstance(item, dict) else {"argv": item})
            for item in json.load(sys.stdin)
        ]
    out.write(json.dumps(results, default=str) + "\n")
    out.flush()
    return 0 if "--" not in args or results[0]["ok"] else 1
