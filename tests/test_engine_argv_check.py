"""The servers' command lines a plan builds pass vLLM's and SGLang's own parsers.

Each project parses in its own interpreter (the launcher never imports it), once per test for
all argvs together: the import costs ~10 s, each check ~0.05 s.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from launcher.backends.checks import check_argvs, plan_items
from launcher.backends.context import LaunchContext
from launcher.backends.plan_processes import build_processes
from launcher.planning.build import build_plan
from launcher.spec.plan import Plan
from tests.plans import config

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv" / "bin" / "python"
SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
LLAMA_CONFIG = {  # enough for vLLM's engine config: it reads only config.json
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "float32",
}


def planned(model: str, **dotted) -> Plan:
    """A config with `dotted` overrides -> the real plan -> its processes (counted ports).
    rollout vllm:d1 and actor fsdp:d2 unless given (not sized for the machine)."""
    spec = config(model_path=model, **dotted)
    ports = itertools.count(21000)
    ctx = LaunchContext("/runs/r", "/runs/r/plan.json", "python", next_port=lambda: next(ports))
    return build_processes(
        build_plan(spec, local_gpus=0), spec.trainer.entry, spec.trainer.args, ctx
    )


@pytest.fixture
def model(tmp_path) -> str:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    return str(tmp_path)


@pytest.mark.vllm
def test_vllm_argvs_pass_vllms_own_parser(model):
    cuda = {"cluster.device": "cuda", "cluster.gpus_per_node": 8}
    cpu_d1 = plan_items(planned(model, **{"cluster.device": "cpu"}), "vllm", deep=True)
    cpu_t2 = plan_items(
        planned(model, **{"cluster.device": "cpu", "rollout.backend": "vllm:t2"}), "vllm", deep=True
    )
    cuda_d2t2 = plan_items(
        planned(model, **cuda, **{"rollout.backend": "vllm:d2t2", "actor.backend": "fsdp:d4"}),
        "vllm",
    )
    offload = plan_items(
        planned(
            model, **cuda, **{"rollout.offload": True, "rollout.vllm.gpu_memory_utilization": 0.5}
        ),
        "vllm",
    )
    two_nodes = plan_items(
        planned(
            model,
            **cuda,
            **{
                "cluster.num_nodes": 2,
                "rollout.backend": "vllm:t16",
                "actor.backend": "fsdp:d16",
                "rollout.offload": True,
                "actor.offload.weight": True,
                "cluster.component_placement": {"rollout,actor": "all"},
            },
        ),
        "vllm",
    )
    assert len(cpu_d1) == 1 and len(cuda_d2t2) == 2 and len(two_nodes) == 2
    assert "--enable-sleep-mode" in offload[0]["argv"]
    broken = dict(cpu_d1[0], argv=cpu_d1[0]["argv"] + ["--max-model-len", "many"])
    sleeping_cpu = dict(cpu_d1[0], argv=cpu_d1[0]["argv"] + ["--enable-sleep-mode"])
    ours = cpu_d1 + cpu_t2 + cuda_d2t2 + offload + two_nodes

    verdicts = check_argvs(str(VLLM_PYTHON), "vllm", ours + [broken, sleeping_cpu])

    assert [v.error for v in verdicts[: len(ours)]] == [""] * len(ours)
    assert [v.parsed["tp"] for v in verdicts[: len(ours)]] == [1, 2, 2, 2, 1, 16, 16]
    assert verdicts[len(ours)].ok is False and "max-model-len" in verdicts[len(ours)].error
    # why the plan does not pass it on cpu: vLLM's CPU build refuses sleep mode
    assert verdicts[-1].ok is False and "sleep mode" in verdicts[-1].error.lower()


SGLANG_PRESETS = {
    "1x8 collocated sglang+fsdp": {
        "rollout.backend": "sglang:d4t2",
        "actor.backend": "fsdp:d8",
        "rollout.offload": True,
        "actor.offload.weight": True,
        "cluster.component_placement": {"rollout,actor": "all"},
    },
    "2x8 disaggregated sglang+fsdp": {
        "cluster.num_nodes": 2,
        "rollout.backend": "sglang:d4t2",
        "actor.backend": "fsdp:d8",
        "rollout.sglang.mem_fraction_static": 0.85,
    },
    "2x8 one instance across both nodes": {
        "cluster.num_nodes": 2,
        "rollout.backend": "sglang:t16",
        "actor.backend": "fsdp:d16",
        "rollout.offload": True,
        "actor.offload.weight": True,
        "cluster.component_placement": {"rollout,actor": "all"},
    },
    "2x8 dp attention and ep inside each instance": {
        "cluster.num_nodes": 2,
        "rollout.backend": "sglang:d4t4",
        "actor.backend": "fsdp:d16",
        "rollout.sglang.enable_dp_attention": True,
        "rollout.sglang.ep_size": 4,
        "rollout.offload": True,
        "actor.offload.weight": True,
        "cluster.component_placement": {"rollout,actor": "all"},
    },
    "2x8 sglang+megatron": {
        "cluster.num_nodes": 2,
        "rollout.backend": "sglang:d2t4",
        "actor.backend": "megatron:d2p2t2",
    },
}


@pytest.mark.sglang
@pytest.mark.skipif(
    not SGLANG_PYTHON.exists(),
    reason="no .venv-sglang: `make check-sglang` builds it (SGLang 0.5.23, ~1.5 GB)",
)
def test_sglang_argvs_pass_sglangs_own_checks(model):
    cuda = {"cluster.device": "cuda", "cluster.gpus_per_node": 8}
    items, names = [], []
    for name, overrides in SGLANG_PRESETS.items():
        got = plan_items(planned(model, **cuda, **overrides), "sglang")
        items += got
        names += [name] * len(got)
    multi_node_dp = {
        "argv": [
            "--model-path",
            "M",
            "--tp-size",
            "8",
            "--dp-size",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--dist-init-addr",
            "h:1",
        ]
    }

    verdicts = check_argvs(str(SGLANG_PYTHON), "sglang", items + [multi_node_dp])

    assert [(n, v.error) for n, v in zip(names, verdicts)] == [(n, "") for n in names]
    parsed = [v.parsed for v in verdicts[: len(items)]]
    assert {(p["tp"], p["dp"]) for p in parsed} == {(2, 1), (4, 1), (16, 1)}
    assert any(p["attn_dp"] == 4 and p["ep"] == 4 for p in parsed)
    # the launcher never passes --dp-size: SGLang refuses it across nodes
    assert verdicts[-1].ok is False and "multi-node" in verdicts[-1].error
