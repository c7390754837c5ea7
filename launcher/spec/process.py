"""What a started process is told and what a runner starts: the environment contract
(docs/architecture.md §7), the host placeholders a node fills in, and `ProcessSpec`.

The plan (spec/plan.py) and the launch request (spec/request.py) both carry processes; a node
agent reads only the request, so this module is kept apart from the plan's structure
(allocations, components, the backends' registry) and imports nothing but the codec: each
node of a run imports it at its start. Nothing here does I/O.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from launcher.spec.codec import JsonRecord

# What a started process is told (docs/architecture.md §7). Every reader and writer imports these
# names.
ENV_PLAN = "AREAL_LAUNCH_PLAN"  # path of the plan JSON
ENV_RUN_DIR = "AREAL_RUN_DIR"  # the run folder
ENV_COMPONENT = "AREAL_COMPONENT"  # the engine(s) a process serves: "actor" or "actor,ref"
ENV_SERVER_ADDRS = "AREAL_LLM_SERVER_ADDRS"  # host:port,... of the rollout servers (when short)
ENV_COMPONENT_ADDRS = "AREAL_{NAME}_ADDRS"  # host:port,... of a worker component with a port
ENV_HOSTS = "AREAL_HOSTS"  # every plan node's address, in order: fills the plan's placeholders
MAX_ENV_ADDRS = 32 * 1024  # longer address lists stay in the plan (Linux caps a variable at 128K)
ENV_SERVED_MODEL = "AREAL_SERVED_MODEL_NAME"  # the model name the servers answer to
ENV_SPMD_MODE = "AREAL_SPMD_MODE"  # "1": AReaL's trainer was started by a launcher (torchrun)
ENV_RUN_MARKER = "AREAL_LAUNCH_RUN"  # the run id, in every process of a run
ENV_RESTART = "AREAL_RESTART"  # how many times this process's job was restarted (0 first)
ENV_PROCESS = "AREAL_LAUNCH_PROCESS"  # the process's name in the plan: what to stop of it
ENV_GPUS = "CUDA_VISIBLE_DEVICES"  # set by the node's supervisor from the process's GPUs
CONTRACT_PREFIX = "AREAL_"  # the launcher's own variables: the user's env never overrides them
DEFAULT_SERVED_MODEL = "policy"  # stable, so trainers can name the model in requests

# Hosts are not known when the plan is made (Slurm and Ray pick the nodes): backends write a
# placeholder for node k and the node's supervisor fills it in (launcher.spec.request.materialize).
# A server binds its node's address: loopback stays loopback (a local run exposes nothing),
# a real node's address becomes 0.0.0.0, so others reach it whatever the name resolves to.
_PLACEHOLDER = re.compile(r"@@AREAL_(NODE|BIND)_(\d+)@@")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def component_addrs_env(name: str) -> str:
    """The variable that holds where component `name`'s processes answer (AREAL_REWARD_ADDRS)."""
    return ENV_COMPONENT_ADDRS.replace("{NAME}", name.upper())


def host_placeholder(node: int) -> str:
    """The address of plan node `node`, filled in on the node by its supervisor."""
    return f"@@AREAL_NODE_{int(node)}@@"


def bind_placeholder(node: int) -> str:
    """The address a server on plan node `node` listens on (see bind_address)."""
    return f"@@AREAL_BIND_{int(node)}@@"


def bind_address(host: str) -> str:
    return host if is_loopback(host) else "0.0.0.0"


def is_loopback(host: str) -> bool:
    """localhost, ::1, or any of 127.0.0.0/8 (several nodes on one machine use 127.0.0.2, ..)."""
    try:
        return host in LOOPBACK or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fill_hosts(text: str, hosts: Sequence[str]) -> str:
    """`text` with every placeholder replaced by its node's address (or bind address)."""
    if "@@" not in text:
        return text

    def one(m: "re.Match[str]") -> str:
        host = hosts[int(m.group(2))]
        return host if m.group(1) == "NODE" else bind_address(host)

    return _PLACEHOLDER.sub(one, text)


def nodes_named(text: str) -> list[int]:
    """The plan nodes whose placeholders appear in `text`."""
    return [int(m.group(2)) for m in _PLACEHOLDER.finditer(text)]


_SECRET = re.compile(r"(_TOKEN|_KEY|_SECRET)$|PASSWORD", re.IGNORECASE)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """Hide secret values wherever a plan or request is printed (docs/architecture.md §7)."""
    return {k: ("***" if _SECRET.search(k) else v) for k, v in env.items()}


# ----------------------------------------------------------------------------- the process
@dataclass(frozen=True)
class ProcessSpec(JsonRecord):
    """One process a runner starts: what to exec, on which plan node, with what added env.

    `env` holds only what the launcher adds to the inherited environment. `gpus` are the
    node-local GPU indices (positions in the node's visible GPUs) it may use: the node's
    supervisor turns them into CUDA_VISIBLE_DEVICES. Hosts in argv and env are placeholders
    (`host_placeholder`). `health_url` is polled for servers (None: no probe).
    """

    name: str
    component: str  # engine(s) it serves, comma-joined for shared trainer jobs ("actor,ref")
    role: str  # "server", "trainer" or "worker"
    node: int
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    gpus: tuple[int, ...] = ()
    ports: tuple[int, ...] = ()
    health_url: Optional[str] = None

    @property
    def is_server(self) -> bool:
        return self.role == "server"

    @property
    def is_trainer(self) -> bool:
        """Trainers finish the run; servers and workers serve it (and restart alone)."""
        return self.role == "trainer"


def masked(processes: list[dict], mask_secrets: bool) -> list[dict]:
    """Processes as JSON, their secrets masked (in place) when it is for printing."""
    if mask_secrets:
        for p in processes:
            p["env"] = mask_env(p["env"])
    return processes


INDENT_UP_TO = 256  # processes
