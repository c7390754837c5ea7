"""The default recipe end to end: a real vLLM CPU server, two real FSDP2 ranks on gloo.

The trainers are started the way a runner starts them (torchrun + AREAL_* environment, see
`trainer_env`), from a plan JSON of the shape `Plan.to_dict()` writes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

from launcher.trainer.runtime import wait_for_servers

pytestmark = [pytest.mark.vllm, pytest.mark.torch]

ROOT = Path(__file__).resolve().parents[1]
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").is_dir() else sys.executable
SERVER_START_TIMEOUT_S = 420
TRAINER_TIMEOUT_S = 420


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """TERM the process group we started, KILL it if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def vllm_server(tiny_model, tmp_path_factory):
    """One real vLLM CPU server on the tiny model, with the weight-update endpoints on."""
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_SERVER_DEV_MODE="1")
    argv = [
        PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tiny_model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--enforce-eager",
        "--served-model-name",
        "policy",
    ]
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        addr = f"127.0.0.1:{port}"
        wait_for_servers([addr], timeout_s=SERVER_START_TIMEOUT_S, interval_s=1.0)
        print(f"\nvLLM server healthy after {time.monotonic() - start:.1f}s")
        yield addr
    except TimeoutError:
        pytest.fail(f"vLLM server did not start; log tail:\n{log.read_text()[-3000:]}")
    finally:
        stop(proc)


def write_plan(run_dir: Path, model: Path, addr: Optional[str], recipe: dict) -> Path:
    """A plan as `Plan.to_dict()` writes it: actor fsdp:d2 on slots 1-2 and, unless `addr` is
    None, rollout vllm:d1 on slot 0 fed by actor rank 1 (a reload is not only rank 0's job)."""
    ranks = [
        {"rank": r, "gpu": 1 + r, "node": 0, "local_gpu": 1 + r, "dp": r, "tp": 0, "pp": 0, "cp": 0}
        for r in range(2)
    ]
    components: dict = {
        "actor": {
            "backend": "fsdp",
            "spec": "fsdp:d2",
            "inherited_from": None,
            "world_size": 2,
            "gpus": [1, 2],
            "ranks": ranks,
        }
    }
    weight_sync, processes = [], []
    if addr is not None:
        components["rollout"] = {
            "backend": "vllm",
            "spec": "vllm:d1",
            "inherited_from": None,
            "world_size": 1,
            "gpus": [0],
            "instances": [{"index": 0, "gpus": [0], "nodes": [0]}],
        }
        weight_sync = [
            {"from": "actor", "to": "rollout", "pairs": [{"rank": 1, "instance": 0, "tp": 0}]}
        ]
        processes = [
            {
                "name": "rollout-0",
                "component": "rollout",
                "role": "server",
                "node": 0,
                "argv": [],
                "env": {},
                "gpus": [0],
                "ports": [int(addr.split(":")[1])],
                "health_url": f"http://{addr}/health",
            }
        ]
    plan = {
        "schema": 1,
        "cluster": {"num_nodes": 1, "gpus_per_node": 3, "device": "cpu"},
        "mode": "disaggregated",
        "components": components,
        "weight_sync": weight_sync,
        "processes": processes,
        "warnings": [],
        "model_path": str(model),
        "recipe": recipe,
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "plan.json"
    path.write_text(json.dumps(plan, indent=2))
    return path


def trainer_env(plan_path: Path, addrs: list[str], component: str = "actor") -> dict:
    """What a runner hands every trainer (docs/architecture.md §7), on top of this environment."""
    env = dict(
        os.environ,
        AREAL_LAUNCH_PLAN=str(plan_path),
        AREAL_COMPONENT=component,
        AREAL_LLM_SERVER_ADDRS=",".join(addrs),
        AREAL_SERVED_MODEL_NAME="policy",
    )
    if not addrs:
        env.pop("AREAL_LLM_SERVER_ADDRS")
    return env


def run_trainers(env: dict, nproc: int = 2) -> tuple[subprocess.CompletedProcess, float]:
    argv = [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "recipes/grpo/train.py",
    ]
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=TRAINER_TIMEOUT_S)
    finally:
        stop(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out), time.monotonic() - start


def weight_version(addr: str) -> str:
    with urllib.request.urlopen(f"http://{addr}/weight_info", timeout=10) as resp:
        return json.load(resp)["weight_version"]


STEP = re.compile(
    r"^step (\d+)/2 reward (\S+) loss (\S+) kl \S+ logp_gap \S+ "
    r"weight_version (v\d+) reload confirmed 1/1",
    re.MULTILINE,
)


def test_grpo_loop_trains_and_confirms_every_reload(vllm_server, tiny_model, tmp_path):
    """And records torch.profiler's trace of step 2, as `cluster.profiling.backend=torch
    cluster.profiling.steps=[2]` plans it (tests/test_profiling.py): one per rank, step 2 only,
    each opened by torch's own trace reader."""
    from torch.profiler._trace_validator import validate_trace

    from launcher.spec.profiling import Profiling

    plan = write_plan(tmp_path / "run", Path(tiny_model), vllm_server, {"steps": 2})
    profiles = tmp_path / "run" / "profiles"
    record = Profiling("torch", ("actor",), str(profiles), (2,))
    plan.write_text(json.dumps({**json.loads(plan.read_text()), **record.as_meta()}))
    result, wall = run_trainers(trainer_env(plan, [vllm_server]))
    print(f"trainers: {wall:.1f}s\n{result.stdout[-2000:]}")
    assert result.returncode == 0, result.stdout[-4000:]
    steps = STEP.findall(result.stdout)
    assert [s[0] for s in steps] == ["1", "2"], result.stdout[-4000:]
    for _, reward, loss, _ in steps:
        assert 0.0 <= float(reward) <= 1.0 and abs(float(loss)) < 100
    assert "reloads confirmed 2/2" in result.stdout
    assert weight_version(vllm_server) == "v2"
    assert (tmp_path / "run" / "weights" / "v2" / "model.safetensors").is_file()
    traces = sorted(p.name for p in profiles.iterdir())
    assert traces == ["actor-rank0-step2.json", "actor-rank1-step2.json"], traces
    for name in traces:
        assert json.loads((profiles / name).read_text())["traceEvents"]
        ok, violations = validate_trace(str(profiles / name))
        assert ok, violations
    assert "grpo: step 2 profiled (torch.profiler)" in result.stdout


def test_server_serving_other_weights_fails_the_run(vllm_server, tiny_model, tmp_path):
    # a model with wider MLPs: vLLM's reload "succeeds" yet serves a mix of old and new
    # weights; the trainer's check must notice and exit non-zero
    wide = tmp_path / "wide-model"
    shutil.copytree(Path(tiny_model), wide)
    code = (
        "import sys; from transformers import AutoConfig, AutoModelForCausalLM as M; "
        "c = AutoConfig.from_pretrained(sys.argv[1]); c.intermediate_size = 384; "
        "M.from_config(c).save_pretrained(sys.argv[1])"
    )
    subprocess.run([PYTHON, "-c", code, str(wide)], check=True, capture_output=True, timeout=120)
    plan = write_plan(tmp_path / "run", wide, vllm_server, {"steps": 1})
    result, _ = run_trainers(trainer_env(plan, [vllm_server]))
    assert result.returncode != 0
    # after the push of v1; or already before step 1's rollout, when the server still serves
    # another test's weights and is given this trainer's start model ("v0") first
    assert re.search(r"does not serve (v1|v0) after its reload", result.stdout), result.stdout[
        -4000:
    ]


def test_grpo_loop_without_servers_samples_itself_and_keeps_a_kl_to_ref(tiny_model, tmp_path):
    plan = write_plan(tmp_path / "run", Path(tiny_model), None, {"steps": 2})
    result, _ = run_trainers(trainer_env(plan, [], component="actor,ref"))
    assert result.returncode == 0, result.stdout[-4000:]
    kls = re.findall(
        r"^step \d/2 .* kl (\S+) .* reload none \(no servers\)", result.stdout, re.MULTILINE
    )
    assert len(kls) == 2 and float(kls[0]) == 0.0 < float(kls[1]), result.stdout[-4000:]


DISTILL_STEP = re.compile(
    r"^step (\d+)/2 reward \S+ loss \S+ kl off distill (\S+) logp_gap \S+ "
    r"weight_version (v\d+) reload confirmed 1/1",
    re.MULTILINE,
)


def test_grpo_loop_adds_the_served_teachers_distillation_term(vllm_server, tiny_model, tmp_path):
    """A served teacher (issue 32): the module's one vLLM CPU server is the rollout's and the
    teacher's. Step 1's teacher is the policy itself (the server holds the start weights the
    trainer pushed first), so the term is ~0 only when the teacher's prompt log-probs line up
    with the policy's own tokens; every reload is confirmed beside it."""
    plan_path = write_plan(
        tmp_path / "run", Path(tiny_model), vllm_server, {"steps": 2, "distill_loss_weight": 0.5}
    )
    plan = json.loads(plan_path.read_text())
    rollout = plan["components"]["rollout"]
    plan["components"]["teacher"] = {**rollout, "inherited_from": None}
    server = next(p for p in plan["processes"] if p["component"] == "rollout")
    plan["processes"].append({**server, "name": "teacher-0", "component": "teacher"})
    plan_path.write_text(json.dumps(plan, indent=2))
    env = dict(trainer_env(plan_path, [vllm_server]), AREAL_TEACHER_ADDRS=vllm_server)
    result, _ = run_trainers(env)
    assert result.returncode == 0, result.stdout[-4000:]
    steps = DISTILL_STEP.findall(result.stdout)
    assert [s[0] for s in steps] == ["1", "2"], result.stdout[-4000:]
    assert abs(float(steps[0][1])) < 0.05, steps  # the teacher is the policy at step 1
    assert "reloads confirmed 2/2" in result.stdout
    asked = re.findall(r"teacher log-probs of (\d+) sample\(s\) from 1 server", result.stdout)
    assert len(asked) == 2 and all(int(n) > 0 for n in asked), result.stdout[-4000:]
