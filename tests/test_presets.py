"""The GPU-cluster presets (conf/experiment/) resolve cleanly, and their server command lines
pass SGLang's own checks: they cannot run here, so this is what we can prove without GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.backends.checks import check_argvs, plan_items
from launcher.cli.launch import counted_request, prepare

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (ROOT / "launcher" / "conf" / "experiment").glob("*.yaml"))
SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
EXPECTED_MODE = {
    "gpu1x8_collocated_sglang_fsdp": "collocated",
    "gpu2x8_disaggregated_sglang_fsdp": "disaggregated",
    "gpu2x8_megatron": "disaggregated",
}
# what each preset's comment says it is: (phrase in the comment, servers (node, GPUs each),
# torchrun jobs (engines, node, GPUs))
STATED = {
    "gpu1x8_collocated_sglang_fsdp": (
        ("4 SGLang instances (tp 2) and 8 FSDP ranks share every GPU",),
        [(0, 2)] * 4,
        [("actor", 0, 8)],
    ),
    "gpu2x8_disaggregated_sglang_fsdp": (
        (
            "node 0 serves (4 SGLang instances of tp 2)",
            "node 1 trains (8 FSDP ranks)",
            "reference model inside the same trainer processes",
        ),
        [(0, 2)] * 4,
        [("actor,ref", 1, 8)],
    ),
    "gpu2x8_megatron": (
        (
            "node 0 serves (2 SGLang instances of tp 4)",
            "node 1 trains with Megatron",
            "ref runs inside the same trainer processes",
        ),
        [(0, 4)] * 2,
        [("actor,ref", 1, 8)],
    ),
}


def preset_plan(name: str):
    return counted_request(prepare([f"experiment={name}"]))[0]


def test_every_preset_is_covered_here():
    assert PRESETS == sorted(EXPECTED_MODE) == sorted(STATED)


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_is_the_shape_its_comment_states(name):
    phrases, servers, trainers = STATED[name]
    comment = (ROOT / "launcher" / "conf" / "experiment" / f"{name}.yaml").read_text()
    flat = " ".join(
        line.lstrip("# ").strip() for line in comment.splitlines() if line.startswith("#")
    )
    for phrase in phrases:
        assert phrase in flat, f"{name}: the comment no longer says {phrase!r}"
    plan = preset_plan(name)
    assert [(p.node, len(p.gpus)) for p in plan.processes if p.role == "server"] == servers
    assert [
        (p.component, p.node, len(p.gpus)) for p in plan.processes if p.role == "trainer"
    ] == trainers


@pytest.mark.parametrize("name", PRESETS)
def test_preset_resolves_on_cuda_without_warnings(name):
    """Only that its model is not on this machine (tests/test_memory_presets.py checks its
    memory against the published config)."""
    plan = preset_plan(name)
    assert plan.cluster.device == "cuda" and plan.mode == EXPECTED_MODE[name]
    assert [
        w for w in plan.warnings if not w.startswith("memory unknown: no config.json at /models/")
    ] == []
    servers = [p for p in plan.processes if p.role == "server"]
    assert len(servers) == len(plan.components["rollout"].instances)
    assert all(p.argv[:3] == (p.argv[0], "-m", "sglang.launch_server") for p in servers)


def test_megatron_preset_passes_megatron_parallel_flags_to_the_entry_point():
    trainers = [p for p in preset_plan("gpu2x8_megatron").processes if p.role == "trainer"]
    argv = trainers[0].argv
    for flag, value in (
        ("--tensor-model-parallel-size", "2"),
        ("--pipeline-model-parallel-size", "2"),
    ):
        assert argv[argv.index(flag) + 1] == value


@pytest.mark.sglang
@pytest.mark.skipif(
    not SGLANG_PYTHON.exists(),
    reason="no .venv-sglang: `make install-sglang` builds it (SGLang 0.5.23, ~1.5 GB)",
)
def test_preset_server_argvs_pass_sglangs_own_checks():
    items = [item for name in PRESETS for item in plan_items(preset_plan(name), "sglang")]
    verdicts = check_argvs(str(SGLANG_PYTHON), "sglang", items)
    assert [v.error for v in verdicts] == [""] * len(items)
    assert len(items) == 4 + 4 + 2
