"""Other people's entry points (docs/architecture.md §17): the interpreter a component's
processes run with, the module a server runs and its extra flags, checked as typed.

Which interpreter runs a process, most specific first: the component's own
(`trainer.python` for every training engine's ranks, `rollout.python` and
`components.<name>.python` for servers, `<worker>.python` for a worker), then the node
group's (`cluster.node_groups[*].python`), then the runner's (this one's, Ray's
`launcher.python`, Slurm's `launcher.container_python` inside an image).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError
from launcher.spec.plan import WORKERS

MAX_PATH = 4096  # PATH_MAX: an interpreter's path
MAX_SERVER_ARGS = 64  # flags in a server_args mapping, and values in one list
MAX_VALUE = 4096  # characters of one flag's value
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_FLAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")


def check_python(where: str, value: Optional[str]) -> None:
    """ConfigError unless `value` is None or could name an interpreter (a path or a name
    looked up in PATH where the process runs)."""
    if value is None:
        return
    text = str(value)
    if (
        not text.strip()
        or text != text.strip()
        or len(text) > MAX_PATH
        or any(c in text for c in "\n\r\0")
    ):
        raise ConfigError(
            f"{where}={value!r}: the path of a Python interpreter (e.g. "
            f"{where}=/opt/areal/.venv/bin/python), or null for the launcher's"
        )


def check_module(where: str, value: Optional[str]) -> None:
    """ConfigError unless `value` is None or a dotted module name (`python -m` runs it)."""
    if value is not None and (len(str(value)) > 256 or not _MODULE.match(str(value))):
        raise ConfigError(
            f"{where}={value!r}: a module `python -m` runs, e.g. "
            f"{where}=areal.engine.vllm_ext.areal_vllm_server (null: the "
            "backend's own)"
        )


def left_out(value: Any) -> bool:
    """What AReaL leaves out of a server's command line (its get_py_cmd): null, false, ""
    and an empty list."""
    return (
        value is None
        or value is False
        or value == ""
        or (isinstance(value, (list, tuple)) and not value)
    )


def flag_of(key: str) -> str:
    """A server option's key as its flag, AReaL's way: max_num_seqs -> --max-num-seqs."""
    return "--" + key.replace("_", "-")


def server_flags(where: str, args: Mapping[str, Any]) -> tuple[str, ...]:
    """`{max_num_seqs: 64, enable_prefix_caching: true}` -> `--max-num-seqs 64
    --enable-prefix-caching`, as AReaL writes a server's config as flags: true is the bare
    flag, false, null and "" leave it out, a list gives its values after the flag."""
    if not isinstance(args, Mapping):
        raise ConfigError(
            f"{where}: a mapping of flag names to values, e.g. {where}={{max_num_seqs: 64}}"
        )
    if len(args) > MAX_SERVER_ARGS:
        raise ConfigError(f"{where}: {len(args)} flags; at most {MAX_SERVER_ARGS}")
    out: list[str] = []
    for key, value in args.items():
        name = str(key)
        if not _FLAG.match(name):
            raise ConfigError(
                f"{where}.{name}: a flag name without its dashes, letters, digits, "
                "_ and - (e.g. max_num_seqs: 64 is --max-num-seqs 64)"
            )
        flag = flag_of(name)
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(values) > MAX_SERVER_ARGS or any(
            isinstance(v, (Mapping, list, tuple)) or len(str(v)) > MAX_VALUE for v in values
        ):
            raise ConfigError(
                f"{where}.{name}: a number, a string, true/false or a list of at "
                f"most {MAX_SERVER_ARGS} of those ({MAX_VALUE} characters each)"
            )
        if left_out(value):
            continue
        out.append(flag)
        if value is not True:
            out += [str(v) for v in values]
    return tuple(out)


def python_key(role: str, component: str) -> str:
    """The key that chooses the interpreter of a process of `role` in `component`."""
    if role == "trainer":
        return "trainer.python"
    name = component.split(",")[0]
    return f"{name}.python" if name in ENGINES or name in WORKERS else f"components.{name}.python"
