"""What `plan` shows is what a launch runs: `plan --json` and a dry run of the same command line
compose one way (launcher/config/compose.py) and come out with the same processes, for a corpus
of command lines of our own and in the peers' vocabularies. Only what differs by design between
two commands is left out: the ports (counted up for `plan`, free ones reserved for a launch)
and the run's id."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.config.schema import DEFAULT_MODEL_PATH
from launcher.spec.process import fill_hosts

CUDA = ["cluster.device=cuda", "cluster.gpus_per_node=8"]
CORPUS = {
    "the default": [],
    "a layout of its own": [*CUDA, "rollout.backend=vllm:d2t2", "actor.backend=fsdp:d4"],
    "a preset": [
        "experiment=gpu1x8_collocated_sglang_fsdp",
        "rollout.backend=vllm:d4t2",
        f"model_path={Path(DEFAULT_MODEL_PATH).expanduser()}",  # the preset's: a cluster's
    ],
    "AReaL's spellings": [
        "cluster.device=cuda",
        "cluster.n_gpus_per_node=4",
        "rollout.backend=vllm:d2",
        "actor.backend=fsdp:d2",
        "ref.scheduling_strategy.type=colocation",
        "ref.scheduling_strategy.target=actor",
        "ref.backend=fsdp:d2",
        "actor.scheduling_spec=[{cpu: 2, env_vars: {TOKENIZERS_PARALLELISM: 'false'}}]",
    ],
    "AReaL's allocation_mode": [*CUDA, "allocation_mode=vllm:d4+fsdp:d4"],
    "RLinf's spellings": [
        "cluster.device=cpu",
        "cluster.component_placement.actor=0-1",
        "cluster.component_placement.env=0",
        "cluster.component_placement.rollout=1",
        "rollout.enable_offload=true",
        "env.enable_offload=true",
        "reward.processes=2",
    ],
    "a worker of one's own": [
        "+components.sim.entry=-m recipes.workers.text_env",
        "+components.sim.processes=2",
    ],
}
PORT = re.compile(r"(?<=[:= ])([1-9]\d{3,4})(?=[/\s,'\"]|$)")


def cli(*args: str) -> str:
    """stdout of `areal-launch ARGS`, in this process; it must succeed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with pytest.raises(SystemExit) as done:
            main(list(args))
    assert done.value.code in (0, None), err.getvalue()
    return out.getvalue()


def env_of(env: dict[str, str]) -> dict[str, str]:
    """An environment with its ports left out (`*_PORT`, `host:PORT`), and the run's id."""
    return {
        k: "<port>" if k.endswith("_PORT") else ordinal_ports(v)
        for k, v in env.items()
        if k != "AREAL_LAUNCH_RUN"
    }


def ordinal_ports(text: str) -> str:
    """`text` with its port numbers left out (`host:PORT`, `--x=PORT`)."""
    return PORT.sub(lambda m: "<port>", text)


def argv_of(words: list[str]) -> list[str]:
    """argv with its port numbers left out (`--port N`, `--master-port N`, `host:N`)."""
    return [
        "<port>" if i and words[i - 1].endswith("port") and w.isdigit() else ordinal_ports(w)
        for i, w in enumerate(words)
    ]


Process = tuple[dict[str, str], list[str]]  # its environment, its argv


def from_plan(plan: dict) -> dict[str, Process]:
    """Each process of the plan JSON as this machine runs it (every plan node is this one)."""
    hosts = ["127.0.0.1"] * int(plan["cluster"]["num_nodes"])

    return {
        p["name"]: (
            env_of({k: fill_hosts(v, hosts) for k, v in p["env"].items()}),
            argv_of([fill_hosts(a, hosts) for a in p["argv"]]),
        )
        for p in plan["processes"]
    }


def from_dry_run(text: str) -> dict[str, Process]:
    """Each process block of a dry run: `# NAME: ...`, then its environment and argv."""
    out = {}
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        head = next(i for i, line in enumerate(lines) if line.startswith("# ") and ": " in line)
        name = lines[head][2:].split(":", 1)[0]
        words = shlex.split(" ".join(line.rstrip("\\") for line in lines[head + 1 :]))
        env = dict(w.partition("=")[::2] for w in words if re.match(r"[A-Z_][A-Z0-9_]*=", w))
        argv = [w for w in words if not re.match(r"[A-Z_][A-Z0-9_]*=", w)]
        out[name] = (
            env_of(env),
            argv_of(argv),
        )
    return out


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_plan_json_and_a_dry_run_hold_the_same_processes(name, tmp_path: Path):
    args = [*CORPUS[name], f"hydra.run.dir={tmp_path}/run"]
    planned = from_plan(json.loads(cli("plan", "--json", *args)))
    ran = from_dry_run(cli(*args, "launcher.dry_run=true"))
    assert sorted(ran) == sorted(planned)
    for name, (env, argv) in planned.items():
        assert ran[name][1] == argv, name
        given = ran[name][0]  # the node adds its own (CUDA_VISIBLE_DEVICES, AREAL_HOSTS)
        assert {k: given.get(k) for k in env} == env, name
    assert not (tmp_path / "run").exists()  # neither made the run folder
