"""RLinf's worlds for real on CPU (issue 18): the execution-modes document's hybrid and
disaggregated examples, scaled to two cores, as YAML in a user folder (`-cd`), through
`areal-launch` with real vLLM CPU servers, real FSDP2 ranks on gloo and the shipped env and
reward workers. Two runs share every assertion:

- hybrid: env and rollout on disjoint slots, the actor on both, env/rollout/actor offloading,
  rollout.pipeline_stage_num 2, plus two CPU-only reward workers scoring over HTTP;
- disaggregated: rollout, inference and actor on disjoint slots, the inference engine's
  log-probs in the loss, and a second policy (rollout2 fed by actor2) in the same run.
The plan-level cases are in tests/test_rlinf_worlds.py.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.areal_launch import run

pytestmark = [pytest.mark.vllm, pytest.mark.torch]

RECIPE = (
    "recipe: {steps: 2, prompts_per_step: 2, samples_per_prompt: 2, max_new_tokens: 8, "
    "save_every: 0}\n"
)
HYBRID = (
    "cluster: {num_nodes: 1, device: cpu, component_placement: "
    "{actor: 0-1, env: 0, rollout: 1}}\n"
    "env: {enable_offload: true}\n"
    "rollout: {enable_offload: true, pipeline_stage_num: 2}\n"
    "actor: {enable_offload: true}\n"
    "reward: {processes: 2}\n" + RECIPE
)
DISAGGREGATED = (
    "cluster: {num_nodes: 1, device: cpu, component_placement: "
    "{rollout: 0, inference: 1, actor: 2, rollout2: 3, actor2: 4}, "
    "profiling: {backend: torch, components: [actor, inference], steps: [2]}}\n"
    "components:\n"
    "  rollout2: {kind: serve, backend: vllm}\n"
    "  actor2: {kind: train, backend: fsdp, feeds: rollout2}\n" + RECIPE
)
SPAN = re.compile(r"\[(\d+\.\d+), (\d+\.\d+)\]")
ISSUED = re.compile(r"stage 1 issued (\d+\.\d+)")
STEP = re.compile(
    r"^step (\d)/2 reward \S+ loss \S+ kl \S+ logp_gap (\S+) weight_version v\d "
    r"reload confirmed 1/1",
    re.MULTILINE,
)


def launch(tmp_path_factory, name: str, body: str) -> tuple[Path, str, float]:
    folder = tmp_path_factory.mktemp(name)
    (folder / f"{name}.yaml").write_text("defaults: [config, _self_]\n" + body)
    run_dir = folder / "run"
    start = time.monotonic()
    done = run("-cd", str(folder), "-cn", name, f"hydra.run.dir={run_dir}", timeout=900)
    wall = time.monotonic() - start
    print(f"\n{name} run: {wall:.1f}s")
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return run_dir, done.stdout + done.stderr, wall


def log(run_dir: Path, name: str) -> str:
    return (run_dir / "logs" / f"{name}.log").read_text()


def span(line: str) -> tuple[float, float]:
    begin, end = SPAN.search(line).groups()  # type: ignore[union-attr]
    return float(begin), float(end)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return launch(tmp_path_factory, "hybrid", HYBRID)


@pytest.fixture(scope="module")
def disaggregated(tmp_path_factory):
    return launch(tmp_path_factory, "disaggregated", DISAGGREGATED)


def test_hybrid_trains_with_env_and_rollout_overlapping_every_reload_confirmed(hybrid):
    run_dir, _, _ = hybrid
    actor, env = log(run_dir, "actor-node0"), log(run_dir, "env-0")
    assert [s[0] for s in STEP.findall(actor)] == ["1", "2"], actor[-3000:]
    assert "grpo done: steps 2 " in actor and "reloads confirmed 2/2" in actor
    for step in (1, 2):  # stage 1's reset is issued before stage 0 generates, done before
        # stage 1 generates (whether the two overlap on the clock is the OS scheduler's call on
        # two busy cores; tests/test_workers.py shows the overlap with a generation that lasts)
        (rollout0,) = [
            ln
            for ln in actor.splitlines()
            if f"grpo: step {step} stage 0: rollout of 1 prompt(s)" in ln
        ]
        (rollout1,) = [
            ln
            for ln in actor.splitlines()
            if f"grpo: step {step} stage 1: rollout of 1 prompt(s)" in ln
        ]
        (reset1,) = [ln for ln in env.splitlines() if f"reset step {step} stage 1:" in ln]
        issued = float(ISSUED.search(rollout0).group(1))  # type: ignore[union-attr]
        (r0, _), (s1, _), (_, e1) = span(rollout0), span(rollout1), span(reset1)
        assert issued <= r0 and e1 <= s1, (rollout0, reset1, rollout1)
        assert "issued" not in rollout1  # the last stage has no next one
    # env offloaded for each training phase and brought back, confirmed, before the push
    assert actor.count("grpo: workers reloaded 1/1, state confirmed") == 2
    assert env.count("offloaded (digest") == 2 and env.count("reloaded (digest") == 2
    assert "actor.offload.weight, actor.offload.optimizer: nothing to do on cpu" in actor
    assert "rollout servers stay awake" in actor  # vLLM's CPU build: no sleep mode
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["mode"] == "hybrid" and plan["engine_options"]["rollout"]["pipeline_stage_num"] == 2


def test_hybrid_scores_over_http_on_the_reward_workers_spread_over_both(hybrid):
    run_dir, _, _ = hybrid
    assert "scores from reward over HTTP (2 process(es))" in log(run_dir, "actor-node0")
    for i in (0, 1):  # each stage's 2 completions: one to each reward process
        assert log(run_dir, f"reward-{i}").count("scored 1 completion(s)") == 4


def test_disaggregated_loss_uses_the_inference_engines_logprobs(disaggregated):
    run_dir, _, _ = disaggregated
    actor, inference = log(run_dir, "actor-node0"), log(run_dir, "inference-node0")
    assert [s[0] for s in STEP.findall(actor)] == ["1", "2"], actor[-3000:]
    assert "inference rank 0/1 on cpu: forward only, no optimizer" in inference
    assert "inference step 1: log-probs of 4 sequence(s) on weights default" in inference
    assert "inference step 2: log-probs of 4 sequence(s) on weights v1" in inference
    assert "inference rank 0 done: 2 step(s)" in inference
    gaps = [float(g) for g in re.findall(r"largest \|actor - inference\| log-prob (\S+)", actor)]
    assert len(gaps) == 2 and max(gaps) < 1e-4, actor[-3000:]  # the same weights: ~0
    served = [
        float(g)
        for g in re.findall(
            r"from inference on .*? gap to the servers' "
            r"sampling log-probs (\S+)",
            actor,
        )
    ]
    assert len(served) == 2 and max(served) < 1e-3
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["mode"] == "disaggregated"
    assert {c: plan["components"][c]["gpus"] for c in ("rollout", "inference", "actor")} == {
        "rollout": [0],
        "inference": [1],
        "actor": [2],
    }


def test_profiling_leaves_the_named_step_s_trace_of_each_named_component(disaggregated):
    """cluster.profiling.backend=torch (issue 31): step 2's chrome trace on the actor's and the
    inference job's ranks only, each opened by torch.profiler's own trace reader."""
    from torch.profiler._trace_validator import validate_trace

    run_dir, _, _ = disaggregated
    profiles = run_dir / "profiles"
    traces = sorted(p.name for p in profiles.iterdir())
    assert traces == ["actor-rank0-step2.json", "inference-rank0-step2.json"], traces
    for name in traces:
        assert json.loads((profiles / name).read_text())["traceEvents"]
        assert validate_trace(str(profiles / name))[0]


def test_two_policies_train_each_pushing_to_its_own_servers(disaggregated):
    run_dir, _, _ = disaggregated
    plan = json.loads((run_dir / "plan.json").read_text())
    port = {p["component"]: p["ports"][0] for p in plan["processes"] if p["role"] == "server"}
    for actor, rollout, weights in (
        ("actor", "rollout", run_dir / "weights"),
        ("actor2", "rollout2", run_dir / "actor2" / "weights"),
    ):
        text = log(run_dir, f"{actor}-node0")
        assert [s[0] for s in STEP.findall(text)] == ["1", "2"], text[-3000:]
        assert "reloads confirmed 2/2" in text
        assert re.search(rf"1 rollout server\(s\) [\d.]+:{port[rollout]},", text), text[:3000]
        assert (weights / "v2" / "model.safetensors").is_file()
    assert sorted(w["from"] + ">" + w["to"] for w in plan["weight_sync"]) == [
        "actor2>rollout2",
        "actor>rollout",
    ]
