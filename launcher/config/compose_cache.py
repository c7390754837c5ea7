"""A cache of Hydra's compose for `plan`: the config files' half, keyed by the group choices.

Hydra composes in two halves (`ConfigLoaderImpl._load_configuration_impl`): the defaults list
picks and merges the config files for the group choices (`rollout=sglang`, `experiment=...`),
then the value overrides (`actor.backend=fsdp:d8`) are applied to the result and the overrides
are recorded in its `hydra` node. The first half, with registering our schemas and opening
Hydra, is most of `plan`'s start-up and depends only on the choices and the files. This keeps
its result (the composed DictConfig, pickled) per choices; a hit applies the values with Hydra's
own functions and redoes its record of them, so a command line that differs only in values (the
usual edit) skips the first half. docs/benchmarks.md has the numbers, docs/architecture.md the
contract:

- An entry is used only while every file it was built from has the size and mtime it had: the
  config folder's files and folders, every module loaded when it was made (our schemas, the
  backends' options, Hydra's plugins), the folders of sys.path (a package installed or removed).
- Only a plain command line takes this path: `key=value` overrides, no sweep, no `+`/`~`/`@`,
  nothing of `hydra.*`, our own config folder (no -cp/-cn/-cd). Anything else, and any failure
  here, is composed by Hydra whole, so every error message is Hydra's path's.
- AREAL_LAUNCH_COMPOSE_CACHE=off turns it off; a folder puts it there (default
  $XDG_CACHE_HOME/areal-launch/compose, else ~/.cache/...). A folder that cannot be written
  only costs the speed. Entries are pickles, so a folder that another user owns or can write
  is not read.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

CACHE_ENV = "AREAL_LAUNCH_COMPOSE_CACHE"
OFF = ("off", "0", "false", "no")
MAX_ENTRIES = 64  # choices seen; the oldest go first
FORMAT = 1  # bump when what an entry holds changes
PLAIN = re.compile(r"[A-Za-z_][\w.\-]*=")  # `key=...`: no +, ~, @, / before the `=`
Stamp = tuple[tuple[str, int, int], ...]  # (path, mtime_ns, size); -1, -1: was not there


def folder() -> Optional[Path]:
    """Where entries live, or None when the cache is off."""
    given = os.environ.get(CACHE_ENV, "")
    if given.lower() in OFF:
        return None
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "areal-launch" / "compose"


def config_groups(conf: Path) -> list[str]:
    """The config groups of the folder `conf` (its subfolders)."""
    return [e.name for e in os.scandir(conf) if e.is_dir() and e.name != "__pycache__"]


def split(overrides: Sequence[str], groups: Sequence[str]) -> Optional[list[str]]:
    """The group choices among `overrides` (the rest are values), or None when the command line
    is not plain enough for a cache (see the module's docstring)."""
    choices = []
    for o in overrides:
        if not PLAIN.match(o) or o.startswith("hydra"):
            return None
        if o.partition("=")[0] in groups:
            choices.append(o)
    return choices


def _key(choices: Sequence[str], conf: Path) -> str:
    import hydra
    import omegaconf

    what = (
        FORMAT,
        tuple(choices),
        str(conf),
        hydra.__version__,
        omegaconf.__version__,
        sys.version,
        tuple(os.path.abspath(p or ".") for p in sys.path),
    )
    return hashlib.sha256(repr(what).encode()).hexdigest()[:32]


def _stat(path: str) -> tuple[str, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (path, -1, -1)
    return (path, st.st_mtime_ns, st.st_size)


def _sources(conf: Path) -> list[str]:
    """Every path a compose read, or whose change could change it (see the docstring)."""
    import sysconfig  # here and in store(), not at the top: a hit does not need them

    stdlib = sysconfig.get_paths()["stdlib"]
    paths = [str(conf)]
    for root, dirs, files in os.walk(conf):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        paths += [os.path.join(root, d) for d in dirs]
        paths += [os.path.join(root, f) for f in files if not f.endswith(".pyc")]
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and not file.startswith(stdlib):
            paths.append(file)
    for entry in sys.path:
        folder_ = os.path.abspath(entry or ".")
        paths.append(folder_)
        if os.path.isdir(os.path.join(folder_, "hydra_plugins")):
            paths.append(os.path.join(folder_, "hydra_plugins"))
    return sorted(set(paths))


def _ours(where: Path) -> bool:
    """Whether only this user can have written the entries (they are pickles: code to run)."""
    st = where.stat()
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def load(choices: Sequence[str], conf: Path) -> Optional[Any]:
    """The composed config kept for `choices`, if every file it came from is as it was."""
    where = folder()
    if where is None:
        return None
    try:
        if not _ours(where):
            return None
        data = (where / f"{_key(choices, conf)}.pickle").read_bytes()
        stamp, cfg = pickle.loads(data)
    except Exception:  # noqa: BLE001 - missing, half-written, from another version: a miss
        return None
    if any(_stat(path) != (path, mtime, size) for path, mtime, size in stamp):
        return None
    return cfg


def store(choices: Sequence[str], conf: Path, cfg: Any) -> None:
    """Keep `cfg`, Hydra's compose of `choices`, with the stamp of what it came from."""
    import tempfile

    where = folder()
    if where is None:
        return
    stamp: Stamp = tuple(_stat(p) for p in _sources(conf))
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = pickle.dumps((stamp, cfg), protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, where / f"{_key(choices, conf)}.pickle")
        entries = sorted(where.glob("*.pickle"), key=lambda p: p.stat().st_mtime)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return  # a folder we cannot write, a value that does not pickle: only slower


def applied(base: Any, overrides: Sequence[str], choices: Sequence[str]) -> Optional[Any]:
    """Hydra's second half on `base` (the compose of `choices`): the value overrides applied
    and the overrides recorded, as `_load_configuration_impl` does; None where Hydra would
    decide otherwise (a sweep, a key it takes as a group) or anything fails. `split` has
    already turned away every other form."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.utils import setup_globals
    from omegaconf import open_dict

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        groups = set(base.hydra.runtime.choices)
        values = []
        for o, line in zip(parsed, overrides):
            if o.is_sweep_override():
                return None
            if (o.key_or_group in groups) != (line in choices):
                return None  # Hydra would read it the other way round
            if line not in choices:
                values.append(o)
        setup_globals()  # Hydra's resolvers (${now:...}, ${hydra:...}), as opening Hydra does
        ConfigLoaderImpl._apply_overrides_to_config(values, base)
        job = base.hydra.job
        with open_dict(base.hydra):
            base.hydra.overrides.task = [o.input_line for o in parsed]
            for key in job.env_copy:
                job.env_set[key] = os.environ[key]
            base.hydra.runtime.cwd = os.getcwd()
            job.override_dirname = get_overrides_dirname(
                overrides=parsed,
                kv_sep=job.config.override_dirname.kv_sep,
                item_sep=job.config.override_dirname.item_sep,
                exclude_keys=job.config.override_dirname.exclude_keys,
            )
    except Exception:  # noqa: BLE001 - Hydra composes it whole and says what is wrong
        return None
    return base
