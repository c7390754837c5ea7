"""Ready to run: what each process needs where it starts, checked before anything starts.

A core-only `pip install` used to start a vLLM server and two trainers that died a minute later
with ModuleNotFoundError. Now, before the first process starts (locally before the launch; on a
Slurm or Ray node before that node's supervisor starts anything), every interpreter a process
uses must find the package it runs (`python -m vllm...` needs vllm, torchrun needs torch), a
recipe's declared needs (`REQUIRES` in its package's __init__.py, read without importing it),
the trackers of `launcher.tracking` (a trainer's rank 0 imports them), and the folders the run
reads (the model) must exist. Each problem is one line that says what to
install. Nothing here imports torch, vllm or sglang: it only asks whether they could be found.

Someone else's entry (a script or module outside this project: another project's trainer,
a server wrapper) is read too: its interpreter must exist and run, and each module its top-level
imports name must be there for that interpreter (launcher.node.entry_imports, run by it).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

from launcher.spec import tracking
from launcher.spec.profiling import NSYS, unwrapped
from launcher.spec.request import FlagCheck, Materialized

PROJECT = Path(__file__).resolve().parents[2]  # launcher/ and recipes/: entries of our own
SCANNER = Path(__file__).with_name("entry_imports.py")
ASK_TIMEOUT_S = 30.0

# what recipes' REQUIRES name beyond the backends' own packages (theirs: each one's INSTALL)
RECIPE_INSTALL = {
    "transformers": "pip install 'areal-launch[torch]'",
    "safetensors": "pip install 'areal-launch[torch]'",
}
_FIND = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 1)"


def needs(proc: Materialized) -> list[str]:
    """Top-level packages `proc` imports first: its `-m` module, and its entry's REQUIRES."""
    argv = proc.argv
    out = []
    if len(argv) > 2 and argv[1] == "-m":
        out.append(argv[2].split(".")[0])
    for arg in argv[3:]:
        if arg.endswith(".py") and os.path.isfile(arg):
            out += declared_requires(Path(arg))
            break
    out += [
        package
        for t in tracking.parse(proc.env.get(tracking.ENV_TRACKING, ""))
        for package in tracking.PACKAGES.get(t, ())
    ]  # rank 0's, for launcher.tracking
    return out


def declared_requires(entry: Path) -> list[str]:
    """REQUIRES = ("torch", ...) in the __init__.py of the entry's package, if it has one."""
    init = entry.parent / "__init__.py"
    try:
        tree = ast.parse(init.read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == "REQUIRES" for t in node.targets
        ):
            try:
                return [str(v) for v in ast.literal_eval(node.value)]
            except ValueError:
                return []
    return []


@lru_cache(maxsize=None)
def install_hints() -> dict[str, str]:
    """package -> how to install it: every backend's INSTALL, then the recipes' packages."""
    from launcher.spec import registry  # here: only a missing package needs its hint

    hints = dict(RECIPE_INSTALL)
    hints.update(
        {package: how for t, how in tracking.INSTALL.items() for package in tracking.PACKAGES[t]}
    )
    for name in registry.backend_names():
        install = registry.backend_facts(name).install
        if install is not None:
            hints.setdefault(install.package, install.hint)
    return hints


@lru_cache(maxsize=None)
def importable(python: str, module: str) -> bool:
    """Whether `python` finds `module` (this interpreter: asked in-process, without importing)."""
    if python == sys.executable:  # (a venv's python resolves to the base one: compare as given)
        import importlib.util

        return importlib.util.find_spec(module) is not None
    try:
        return (
            subprocess.run(
                [python, "-c", _FIND, module], capture_output=True, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


@lru_cache(maxsize=None)
def interpreter_problem(python: str) -> str:
    """Why `python` cannot run a process here ('' when it can)."""
    if python == sys.executable:
        return ""
    import shutil  # here: shutil and its compressors are ~4 ms of every node's start

    if os.sep in python:
        if not os.path.isfile(python):
            return "does not exist"
        if not os.access(python, os.X_OK):
            return "is not executable"
    elif shutil.which(python) is None:
        return "is not on PATH"
    try:
        done = subprocess.run(
            [python, "-c", "import sys"], capture_output=True, text=True, timeout=ASK_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"does not run ({exc})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [""])[-1]
        return f"does not run (exit {done.returncode}{': ' + said if said else ''})"
    return ""


def profiler_problems(procs: Sequence[Materialized]) -> list[str]:
    """One line when processes run under `nsys profile` (cluster.profiling.backend=nsight) on
    a node without nsys."""
    wrapped = [p.name for p in procs if unwrapped(p.argv) != tuple(p.argv)]
    if not wrapped:
        return []
    import shutil  # only when something is wrapped (see python_problems)

    if shutil.which(NSYS[0]) is not None:
        return []
    return [
        f"{', '.join(wrapped)}: {NSYS[0]} is not on PATH here (cluster.profiling.backend=nsight "
        "runs them under `nsys profile`): install Nsight Systems, or profile with backend torch"
    ]


def foreign_entry(proc: Materialized) -> tuple[str, ...]:
    """The entry of `proc` when it is someone else's (`(script,)` or `("-m", module)`): not
    a file of this project, nor a backend's own server module; () otherwise."""
    if proc.argv[1:2] == ("-m",):  # maybe torchrun's, whose own flags come before the entry
        from launcher.backends.torchrun import entry_in  # the backends only where they may be

        entry = entry_in(proc.argv)
    else:  # `python script ...`: the backends are ~20 ms of CPU a node
        entry = proc.argv[1:2]
    if not entry:
        return ()
    if entry[0] == "-m":
        top = entry[1].split(".")[0]
        return () if top in install_hints() or top in ("launcher", "recipes") else entry
    script = Path(entry[0])
    return () if not script.is_file() or script.resolve().is_relative_to(PROJECT) else entry


@lru_cache(maxsize=None)
def entry_missing(
    python: str, entry: tuple[str, ...], pythonpath: Optional[str]
) -> tuple[Optional[str], tuple[tuple[str, int], ...]]:
    """(the entry's file, the modules its top-level imports name that `python` cannot find,
    with their lines), asked of `python` itself; nothing missing when it cannot answer."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    try:
        done = subprocess.run(
            [python, "-c", SCANNER.read_text(), *entry],
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT_S,
            env=env,
        )
        said = json.loads(done.stdout)
        return said["file"], tuple((str(m), int(n)) for m, n in said["missing"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return None, ()


def python_key(proc: Materialized) -> str:
    """The key that chooses `proc`'s interpreter, for a problem's line (spec.entry and the
    engines' names it reads: only when there is a problem to say)."""
    from launcher.spec.entry import python_key as key_of

    return key_of(proc.spec.role, proc.spec.component)


def problems(
    procs: Sequence[Materialized], paths: Sequence[str], flags: Optional[FlagCheck] = None
) -> list[str]:
    """One line per thing missing here (empty: ready); `flags`: the user's server flags,
    checked with the engine's own parser."""
    out = [
        f"{path} does not exist here (the run reads it)"
        for path in paths
        if not os.path.exists(path)
    ]
    out += profiler_problems(procs)
    procs = [dataclasses.replace(p, argv=unwrapped(p.argv)) for p in procs]  # nsys's, unwrapped
    out += flag_problems(procs, flags)
    seen: set[tuple[str, str]] = set()
    for proc in procs:
        python = proc.argv[0]
        modules, entry = needs(proc), foreign_entry(proc)
        if not modules and not entry:  # nothing Python to ask of it (a shell's process)
            continue
        wrong = interpreter_problem(python)
        if wrong:
            if (python, "") not in seen:
                seen.add((python, ""))
                out.append(
                    f"{proc.name}: the interpreter {python} {wrong}: set {python_key(proc)} to a "
                    "Python that has what it runs"
                )
            continue
        lacks = False
        for module in modules:
            if (python, module) in seen:
                continue
            seen.add((python, module))
            if not importable(python, module):
                lacks = True
                how = install_hints().get(module, f"pip install {module}")
                out.append(
                    f"{proc.name} needs {module!r}, which {python} cannot import: {how}"
                    f" (or set {python_key(proc)} to an interpreter that has it)"
                )
        if lacks or not entry or (python, " ".join(entry)) in seen:
            continue
        seen.add((python, " ".join(entry)))
        path, missing = entry_missing(python, entry, proc.env.get("PYTHONPATH"))
        for module, line in missing[:1]:
            where = f"{path} imports (line {line})" if path else f"{' '.join(entry)} names"
            more = f" (and {len(missing) - 1} more of its imports)" if len(missing) > 1 else ""
            out.append(
                f"{proc.name}: {python} cannot import {module!r}, which {where}"
                f"{more}: install it for that interpreter or set {python_key(proc)} to one "
                "that has it"
            )
    return out


FLAG_CHECK_TIMEOUT_S = 180.0  # importing vLLM's parser takes ~10 s on an idle machine
_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")


def flag_problems(procs: Sequence[Materialized], check: Optional[FlagCheck]) -> list[str]:
    """The servers' argv parsed by the engine's own parser (launcher.backends.checks) in the
    interpreter that runs them, once per interpreter, when the user gave them flags: a flag
    it refuses is named as the key it was written as (`vllm.max_num_seq`). Skipped where the
    interpreter lacks the engine (said already, or a wrapper's own venv) or the check itself
    cannot run (the server says it at start then)."""
    if check is None:
        return []
    from launcher.backends.checks import check_argvs
    from launcher.spec import registry

    package = registry.backend_facts(check.backend).install
    from launcher.backends.kinds import serve_backend

    module = serve_backend(check.backend).module
    by_python: dict[str, tuple[Materialized, list[str]]] = {}
    for proc in procs:
        argv = list(proc.argv)
        if (
            proc.spec.role != "server"
            or proc.spec.component != check.component
            or "-m" not in argv[:2]
            or len(argv) < 3
        ):
            continue
        if package is None or not importable(argv[0], package.package):
            continue
        by_python.setdefault(argv[0], (proc, argv[3:]))
    out = []
    for python, (proc, argv) in by_python.items():
        try:
            verdict = check_argvs(python, check.backend, [argv], FLAG_CHECK_TIMEOUT_S)[0]
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError):
            continue
        if not verdict.ok:
            out.append(flag_line(proc, verdict.error, dict(check.origins), str(module)))
    return out


def flag_line(proc: Materialized, error: str, origins: dict[str, str], module: str) -> str:
    """The parser's refusal as the key the user wrote the flag as."""
    said = error.split(": error: ", 1)[-1]
    for flag in _FLAG.findall(said):
        where = origins.get(flag) or origins.get(flag.replace("_", "-"))
        if where is not None:
            return (
                f"{proc.name}: {where} ({flag}) is refused by {module}'s own parser: "
                f"{said} (set it to what the server takes, or remove it)"
            )
    return f"{proc.name}: {module}'s own parser refuses the server's flags: {said}"
