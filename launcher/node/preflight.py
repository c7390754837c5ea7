"""Ready to run: what each process needs where it starts, checked before anything starts.

A core-only `pip install` used to start a vLLM server and two trainers that died a minute later
with ModuleNotFoundError. Now, before the first process starts (locally before the launch; on a
Slurm or Ray node before that node's supervisor starts anything), every interpreter a process
uses must find the package it runs (`python -m vllm...` needs vllm, torchrun needs torch), a
recipe's declared needs (`REQUIRES` in its package's __init__.py, read without importing it),
the trackers of `launcher.tracking` (a trainer's rank 0 imports them), and the folders the run reads (the model) must exist. Each problem is one line that says what to
install. Nothing here imports torch, vllm or sglang: it only asks whether they could be found.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from launcher.backends.protocol import backend
from launcher.spec import registry, tracking
from launcher.spec.request import Materialized

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
    out += [package for t in tracking.parse(proc.env.get(tracking.ENV_TRACKING, ""))
            for package in tracking.PACKAGES.get(t, ())]  # rank 0's, for launcher.tracking
    return out


def declared_requires(entry: Path) -> list[str]:
    """REQUIRES = ("torch", ...) in the __init__.py of the entry's package, if it has one."""
    init = entry.parent / "__init__.py"
    try:
        tree = ast.parse(init.read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "REQUIRES"
                                                for t in node.targets):
            try:
                return [str(v) for v in ast.literal_eval(node.value)]
            except ValueError:
                return []
    return []


@lru_cache(maxsize=None)
def install_hints() -> dict[str, str]:
    """package -> how to install it: every backend's INSTALL, then the recipes' packages."""
    hints = dict(RECIPE_INSTALL)
    hints.update({package: how for t, how in tracking.INSTALL.items()
                  for package in tracking.PACKAGES[t]})
    for name in registry.backend_names():
        install = backend(name).INSTALL
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
        return subprocess.run([python, "-c", _FIND, module], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def problems(procs: Sequence[Materialized], paths: Sequence[str]) -> list[str]:
    """One line per thing missing here (empty: ready)."""
    out = [f"{path} does not exist here (the run reads it)" for path in paths
           if not os.path.exists(path)]
    seen: set[tuple[str, str]] = set()
    for proc in procs:
        python = proc.argv[0]
        for module in needs(proc):
            if (python, module) in seen:
                continue
            seen.add((python, module))
            if not importable(python, module):
                how = install_hints().get(module, f"pip install {module}")
                out.append(f"{proc.name} needs {module!r}, which {python} cannot import: {how}")
    return out
