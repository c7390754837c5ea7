"""recipes/grpo/phases.py: rollout servers give their memory back around each training phase
when they share GPUs with the actor and rollout offload is on, and are awake for every push and
rollout. Checked against FAKE recording servers (tests/recording_server.py): CPU cannot show
GPU memory, only the calls a real engine gets and their order. No torch."""

from __future__ import annotations

import pytest

from launcher.trainer.runtime import plan_from_dict
from recipes.grpo.phases import RolloutPhases
from recipes.grpo.rollout_client import RolloutServer, sample_all
from tests import plans
from tests.recording_server import RecordingServer

SHARED = {
    "cluster.component_placement": {"actor,rollout": "0-1"},
    "rollout.backend": "vllm:d2",
    "actor.backend": "fsdp:d2",
    "rollout.offload": True,
    "actor.offload.weight": True,
}


def runtime(device: str, **dotted):
    extra = {"cluster.gpus_per_node": 4} if device == "cuda" else {}
    return plan_from_dict(plans.plan_dict(**{"cluster.device": device, **extra, **dotted}), env={})


@pytest.fixture
def journal():
    return []


@pytest.fixture
def fakes(journal):
    servers = [RecordingServer(journal), RecordingServer(journal)]
    yield servers
    for server in servers:
        server.close()


def run_two_steps(
    phases: RolloutPhases, servers: list[RolloutServer], journal: list, weights_dir: str
) -> None:
    """What the recipe's loop does per step, with a recorded stand-in for the training."""
    for step in (1, 2):
        sample_all(servers, ["count: one", "count: two"], 1, 4, 1.0, seed=step)
        phases.train_then_push(
            lambda: journal.append(("trainer", "RUN train")),
            lambda _: [s.reload(weights_dir, f"v{step}") for s in servers],
            barrier=lambda: None,
            leader=True,
        )


def path(call: str) -> str:
    return call.split()[1].split("?")[0]


def calls(journal: list, addr: str) -> list[str]:
    """The paths `addr` got, with the training step where it ran."""
    return [path(call) for who, call in journal if who in (addr, "trainer")]


def test_vllm_servers_sleep_for_training_and_wake_before_the_push(fakes, journal, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    servers = [RolloutServer(f.addr, "vllm") for f in fakes]
    said: list[str] = []
    phases = RolloutPhases.from_plan(runtime("cuda", **SHARED), servers, said.append)
    run_two_steps(phases, servers, journal, str(tmp_path))
    for server in servers:
        seen = calls(journal, server.addr)
        step = [
            "/v1/completions",
            "/sleep",
            "train",
            "/wake_up",
            "/pause",
            "/collective_rpc",
            "/update_weight_version",
            "/reset_prefix_cache",
            "/resume",
        ]
        assert seen == step + step, seen
    # both servers asleep before the trainer starts, both awake before the first reload
    order = [path(call) for _, call in journal]
    assert order[: order.index("train")].count("/sleep") == 2
    assert "/pause" not in order[: order.index("/wake_up")]
    assert [c for _, c in journal].count("POST /sleep?level=1") == 4  # level 1: weights to host
    assert len(said) == 1 and "release their memory" in said[0]


def test_sglang_servers_release_and_resume_memory_occupation(fakes, journal, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    servers = [RolloutServer(f.addr, "sglang") for f in fakes]
    plan = runtime("cuda", **{**SHARED, "rollout.backend": "sglang:d2"})
    run_two_steps(
        RolloutPhases.from_plan(plan, servers, lambda _: None), servers, journal, str(tmp_path)
    )
    for server in servers:
        step = [
            "/v1/completions",
            "/release_memory_occupation",
            "train",
            "/resume_memory_occupation",
            "/update_weights_from_disk",
        ]
        assert calls(journal, server.addr) == step + step


def test_servers_keep_their_memory_without_rollout_offload(fakes, journal, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    servers = [RolloutServer(f.addr, "vllm") for f in fakes]
    plan = runtime("cuda", **{**SHARED, "rollout.offload": False})
    run_two_steps(
        RolloutPhases.from_plan(plan, servers, lambda _: None), servers, journal, str(tmp_path)
    )
    paths = {path(call) for _, call in journal}
    assert "/sleep" not in paths and "/wake_up" not in paths and "/pause" in paths


def test_servers_on_their_own_gpus_keep_their_memory_and_the_recipe_says_why(fakes, journal):
    servers = [RolloutServer(f.addr, "vllm") for f in fakes]
    said: list[str] = []
    plan = runtime("cuda", **{"rollout.offload": True})
    phases = RolloutPhases.from_plan(plan, servers, said.append)
    phases.before_train()
    phases.before_push()
    assert journal == [] and not phases.enabled
    assert said == [
        "grpo: rollout offload is on but rollout and actor do not share GPUs: "
        "the servers keep their memory"
    ]


def test_vllm_on_cpu_refuses_sleep_mode_so_the_recipe_says_so_once_and_goes_on(fakes, journal):
    servers = [RolloutServer(f.addr, "vllm") for f in fakes]
    said: list[str] = []
    phases = RolloutPhases.from_plan(runtime("cpu", **SHARED), servers, said.append)
    for _ in range(3):
        phases.before_train()
        phases.before_push()
    assert journal == [] and len(said) == 1
    assert "vLLM's CPU build refuses sleep mode" in said[0]
