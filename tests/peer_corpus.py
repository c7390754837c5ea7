"""Peers' published configurations, written in our keys: what the memory check must agree with.

Each case is one run a peer published as working (`fits=True`) or one out-of-memory report a
static estimate can explain (`fits=False`): the plan overrides that say the same in our keys,
the model's dims, the GPU type and node count, and the source (a peer repository at a pinned
commit, or an issue). Written in our own words; what had to be assumed is in `assumed`. The
memory check must refuse no working run (their estimate's low end fits) and warn of every
report; an out-of-memory report is `explained` when even the low end overflows (refused
whatever the engine's kernels), else only an engine that keeps more than the least would
overflow (warned, naming the term).

How peers' settings read in our keys (README "Memory: peers' settings in our keys"):
- tokens per micro-batch: verl `ppo_max_token_len_per_gpu` (use_dynamic_bsz), slime
  `--max-tokens-per-gpu`, NeMo-RL `max_total_sequence_length x train_micro_batch_size`,
  OpenRLHF `--train.max_tokens_per_gpu`, AReaL `mb_spec.max_tokens_per_mb` ->
  `<engine>.mb_spec.max_tokens_per_mb`;
- fp32 master weights with bf16 compute (verl's and NeMo-RL's FSDP actor, DeepSpeed bf16) ->
  `actor.dtype=float32 actor.fsdp.mixed_precision=bf16`; Megatron bf16 keeps fp32 masters by
  itself (`actor.dtype=bfloat16`);
- offload between phases without a flag: slime `--colocate`, NeMo-RL colocated generation
  (offload before/after refit), OpenRLHF `--ds.enable_sleep`, verl's hybrid engine (grads freed
  after the step, `param_offload`/`optimizer_offload` moved out for the rollout) ->
  `actor.offload.{weight,optimizer,grad}=true` (verl: grad always, the others as its flags)
  and `rollout.offload=true`; a ref kept on the host between its forwards (slime, NeMo-RL) ->
  `ref.offload.weight=true`; verl's ref `param_offload` is FSDP's CPUOffload during compute ->
  `ref.fsdp.offload_params=true`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.memory.model_shape import ModelShape, shape_from_config
from tests.model_configs import MODELS

AREAL = "https://github.com/inclusionAI/AReaL/blob/4aef98d8d818af55b43621aaadba047ae10f4e77/"
SLIME = "https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/"
VERL = "https://github.com/volcengine/verl/blob/b178a3cd56f58b2d502255daba591e92833930a7/"
NEMO = "https://github.com/NVIDIA-NeMo/RL/blob/7ea279abfbeb698b092856d0dab61e7cf39bc909/"
OPENRLHF = "https://github.com/OpenRLHF/OpenRLHF/blob/3c3be6234e0cb353e76bb8019947db9dfe99fca7/"
PEERS = ("AReaL", "slime", "verl", "NeMo-RL", "OpenRLHF")


def dense(
    h: int,
    layers: int,
    heads: int,
    kv: int,
    f: int,
    vocab: int,
    tied: bool,
    model_type: str,
    head_dim: int = 0,
    max_pos: int = 32768,
) -> dict[str, Any]:
    """A dense decoder's config.json fields (the ones the estimate reads)."""
    return {
        "model_type": model_type,
        "hidden_size": h,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim or h // heads,
        "intermediate_size": f,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "max_position_embeddings": max_pos,
        "torch_dtype": "bfloat16",
    }


# dims of the models the table below uses beyond tests/model_configs.py, read from slime's
# Megatron model arguments (scripts/models/<name>.sh at the commit above), which restate the
# checkpoints' config.json
CORPUS_MODELS: dict[str, dict[str, Any]] = {
    "Qwen2.5-0.5B": dense(896, 24, 14, 2, 4864, 151936, True, "qwen2"),  # qwen2.5-0.5B.sh
    "Qwen2.5-3B": dense(2048, 36, 16, 2, 11008, 151936, True, "qwen2"),  # qwen2.5-3B.sh
    "Qwen2.5-14B": dense(5120, 48, 40, 8, 13824, 152064, False, "qwen2"),  # HF config.json
    "Qwen2.5-32B": dense(5120, 64, 40, 8, 27648, 152064, False, "qwen2"),  # qwen2.5-32B.sh
    # DeepSeek-R1-Distill-Qwen-1.5B: Qwen2.5-Math-1.5B's dims, lm_head untied
    "R1-Distill-Qwen-1.5B": dense(1536, 28, 12, 2, 8960, 151936, False, "qwen2"),
    "Qwen3-1.7B": dense(2048, 28, 16, 8, 6144, 151936, True, "qwen3", 128),  # qwen3-1.7B.sh
    "Qwen3-4B": dense(2560, 36, 32, 8, 9728, 151936, True, "qwen3", 128),  # qwen3-4B.sh
    "GLM4-9B": {
        **dense(4096, 40, 32, 2, 13696, 151552, False, "glm4", 128),
        "attention_bias": True,
    },  # glm4-9B.sh (--add-qkv-bias)
    "Llama-3.1-8B": {**MODELS["Llama-3-8B"]["config"], "max_position_embeddings": 131072},
    # Moonlight-16B-A3B (moonlight.sh): DeepSeek-V3 layout, MLA without q_lora, 64 experts
    "Moonlight-16B-A3B": {
        "model_type": "deepseek_v3",
        "hidden_size": 2048,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 11264,
        "moe_intermediate_size": 1408,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 163840,
        "topk_method": "noaux_tc",
        "tie_word_embeddings": False,
        "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16",
    },
}


def model_shape(name: str) -> ModelShape:
    """The shape of a corpus model (this file's, else tests/model_configs.py's)."""
    config = CORPUS_MODELS.get(name) or MODELS[name]["config"]
    return shape_from_config(config, where=name)


@dataclass(frozen=True)
class Case:
    peer: str
    source: str
    model: str
    gpu: str  # cluster.gpu_type
    nodes: int
    overrides: dict[str, Any]
    fits: bool = True
    gpus_per_node: int = 8
    assumed: str = ""
    overflows: str = "actor"  # an out-of-memory case: the engine the refusal must name
    explained: bool = False  # an out-of-memory case whose low end overflows: refused


def colocated(*engines: str) -> dict[str, Any]:
    """Every named engine on every GPU."""
    return {f"cluster.component_placement.{e}": "all" for e in engines}


def offloaded(
    engine: str = "actor", weight: bool = True, optimizer: bool = True, grad: bool = True
) -> dict[str, Any]:
    return {
        f"{engine}.offload.weight": weight,
        f"{engine}.offload.optimizer": optimizer,
        f"{engine}.offload.grad": grad,
    }


def areal(
    rollout: str,
    actor: str,
    tokens: int,
    checkpointing: bool = True,
    ref: bool = True,
    critic: bool = False,
    context: int = 32768,
    mfs: float = 0.8,
    ref_tokens: int = 0,
) -> dict[str, Any]:
    """An AReaL example: its keys are ours (sglang context 32768, mfs 0.8, ref on the actor's
    backend, bf16). vllm's fraction is AReaL's default 0.9."""
    out: dict[str, Any] = {
        "rollout.backend": rollout,
        "actor.backend": actor,
        "actor.gradient_checkpointing": checkpointing,
        "actor.mb_spec.max_tokens_per_mb": tokens,
    }
    if rollout.startswith("sglang"):
        out.update(
            {"rollout.sglang.context_length": context, "rollout.sglang.mem_fraction_static": mfs}
        )
    else:
        out.update({"rollout.vllm.max_model_len": context})
    for name, on in (("ref", ref), ("critic", critic)):
        if on:
            out.update(
                {
                    f"{name}.backend": actor,
                    f"{name}.mb_spec.max_tokens_per_mb": (ref_tokens if name == "ref" else 0)
                    or tokens,
                }
            )
    if critic:
        out["critic.gradient_checkpointing"] = checkpointing
    return out


def slime(
    rollout: str,
    actor: str,
    tokens: int,
    colocate: bool,
    cpu_adam: bool = False,
    ref: bool = True,
    mfs: float = 0.7,
    context: int = 0,
) -> dict[str, Any]:
    """A slime script: Megatron with full recompute and sequence parallel (with t > 1); the
    ref's weights live on the host and are swapped in for its forward; --colocate sleeps the
    trainer and releases SGLang between phases."""
    out: dict[str, Any] = {
        "rollout.backend": rollout,
        "actor.backend": actor,
        "actor.megatron.recompute_granularity": "full",
        "actor.megatron.sequence_parallel": "t" in actor.split(":")[1],
        "actor.megatron.optimizer_cpu_offload": cpu_adam,
        "actor.mb_spec.max_tokens_per_mb": tokens,
        "rollout.sglang.mem_fraction_static": mfs,
    }
    if context:
        out["rollout.sglang.context_length"] = context
    if ref:
        out.update(
            {
                "ref.backend": actor,
                "ref.mb_spec.max_tokens_per_mb": tokens,
                "ref.offload.weight": True,
            }
        )
    if colocate:
        out.update({**colocated("rollout", "actor"), **offloaded(), "rollout.offload": True})
    return out


def verl_fsdp(
    rollout: str,
    actor: str,
    tokens: int,
    context: int,
    fraction: float,
    param_offload: bool = False,
    optimizer_offload: bool = False,
    ref_offload: bool = True,
    checkpointing: bool = True,
) -> dict[str, Any]:
    """verl's hybrid engine with its FSDP actor: fp32 master, bf16 compute, everything on
    every GPU; the rollout frees its cache (sleep) for training, the actor's grads are freed
    after the step and its params/optimizer go to the host only with its offload flags."""
    backend = rollout.split(":")[0]
    limit = {"vllm": "max_model_len", "sglang": "context_length"}[backend]
    share = {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static"}[backend]
    return {
        "rollout.backend": rollout,
        "actor.backend": actor,
        "ref.backend": actor,
        **colocated("rollout", "actor"),
        "rollout.offload": True,
        f"rollout.{backend}.{limit}": context,
        f"rollout.{backend}.{share}": fraction,
        "actor.dtype": "float32",
        "actor.fsdp.mixed_precision": "bf16",
        "actor.gradient_checkpointing": checkpointing,
        "actor.mb_spec.max_tokens_per_mb": tokens,
        "ref.mb_spec.max_tokens_per_mb": tokens,
        **offloaded("actor", param_offload, optimizer_offload, True),
        "ref.dtype": "bfloat16",
        "ref.fsdp.offload_params": ref_offload,
    }


def verl_megatron(
    rollout: str,
    actor: str,
    tokens: int,
    context: int,
    fraction: float,
    offload: bool,
    recompute: bool = False,
) -> dict[str, Any]:
    """verl's hybrid engine with its Megatron actor (bf16, fp32 masters); megatron
    param/grad/optimizer_offload move them out between phases; the ref's param_offload the
    same for the ref."""
    out = {
        "rollout.backend": rollout,
        "actor.backend": actor,
        "ref.backend": actor,
        **colocated("rollout", "actor"),
        "rollout.offload": True,
        "rollout.vllm.max_model_len": context,
        "rollout.vllm.gpu_memory_utilization": fraction,
        "actor.mb_spec.max_tokens_per_mb": tokens,
        "ref.mb_spec.max_tokens_per_mb": tokens,
        "actor.megatron.sequence_parallel": "t" in actor.split(":")[1].replace("etp", ""),
        **offloaded("actor", offload, offload, True),
        "ref.offload.weight": offload,
    }
    if recompute:
        out["actor.megatron.recompute_granularity"] = "full"
    return out


def nemo(
    rollout: str,
    actor: str,
    tokens: int,
    colocate: bool = True,
    megatron: bool = False,
    checkpointing: bool = False,
    fraction: float = 0.6,
    context: int = 0,
) -> dict[str, Any]:
    """A NeMo-RL recipe: DTensor policy (fp32 master, bf16 compute) or Megatron (bf16, fp32
    masters); the reference weights kept on the host; colocated generation offloads the policy
    before and after refit and puts vLLM to sleep. vLLM's fraction 0.6, max_model_len the
    sequence length."""
    out: dict[str, Any] = {
        "rollout.backend": rollout,
        "actor.backend": actor,
        "ref.backend": actor,
        "rollout.vllm.gpu_memory_utilization": fraction,
        "rollout.vllm.max_model_len": context or tokens,
        "actor.mb_spec.max_tokens_per_mb": tokens,
        "ref.mb_spec.max_tokens_per_mb": tokens,
        "ref.offload.weight": True,
    }
    if megatron:
        out["actor.megatron.recompute_granularity"] = "full" if checkpointing else None
    else:
        out.update(
            {
                "actor.dtype": "float32",
                "actor.fsdp.mixed_precision": "bf16",
                "actor.gradient_checkpointing": checkpointing,
                "ref.fsdp.mixed_precision": "bf16",
            }
        )
    if colocate:
        out.update({**colocated("rollout", "actor"), **offloaded(), "rollout.offload": True})
    return out


def openrlhf(
    rollout: str, actor: str, tokens: int, fraction: float, context: int
) -> dict[str, Any]:
    """An OpenRLHF hybrid-engine script: DeepSpeed ZeRO-3 with bf16 (fp32 master), gradient
    checkpointing, everything colocated, vLLM and DeepSpeed asleep between phases (the ref too)."""
    return {
        "rollout.backend": rollout,
        "actor.backend": actor,
        "ref.backend": actor,
        **colocated("rollout", "actor"),
        **offloaded(),
        "rollout.offload": True,
        "rollout.vllm.gpu_memory_utilization": fraction,
        "rollout.vllm.max_model_len": context,
        "actor.dtype": "float32",
        "actor.fsdp.mixed_precision": "bf16",
        "actor.gradient_checkpointing": True,
        "actor.mb_spec.max_tokens_per_mb": tokens,
        "ref.mb_spec.max_tokens_per_mb": tokens,
        "ref.offload.weight": True,
    }


def verl_72b(tokens: int) -> dict[str, Any]:
    """verl's Qwen2-72B GRPO recipe on 32 GPUs (examples/tuning/70b): vLLM tp 16 at 0.6, FSDP
    over all 32 with param and optimizer offload, 512 + 512 tokens a sample."""
    return verl_fsdp(
        "vllm:d2t16",
        "fsdp:d32",
        tokens,
        512 + 512,
        0.6,
        param_offload=True,
        optimizer_offload=True,
    )


AREAL_GPU = "the config names no GPU: AReaL's installation guide's 8 x H800 per node"
CASES: dict[str, Case] = {
    # ------------------------------------------------------------------ AReaL
    "areal-gsm8k-grpo-fsdp": Case(
        "AReaL",
        AREAL + "examples/math/gsm8k_grpo.yaml",
        "Qwen2.5-1.5B",
        "h800",
        1,
        areal("sglang:d4", "fsdp:d4", 10240),
        assumed=AREAL_GPU,
    ),
    "areal-gsm8k-grpo-megatron": Case(
        "AReaL",
        AREAL + "examples/math/gsm8k_grpo_megatron.yaml",
        "Qwen2.5-1.5B",
        "h800",
        1,
        areal("sglang:d4", "megatron:d4", 10240, checkpointing=False),
        assumed=AREAL_GPU,
    ),
    "areal-gsm8k-ppo-critic": Case(
        "AReaL",
        AREAL + "examples/math/gsm8k_ppo.yaml",
        "Qwen2.5-1.5B",
        "h800",
        1,
        areal("sglang:d4", "fsdp:d4", 10240, critic=True),
        assumed=AREAL_GPU,
    ),
    "areal-gsm8k-dapo-dynamic-bs": Case(
        "AReaL",
        AREAL + "examples/math/gsm8k_dapo_dynamic_bs.yaml",
        "Qwen2.5-1.5B",
        "h800",
        1,
        areal("sglang:d4", "fsdp:d4", 10240),
        assumed=AREAL_GPU,
    ),
    "areal-boba-r1-distill-1.5b-16k": Case(
        "AReaL",
        AREAL + "examples/math/boba_grpo.yaml",
        "R1-Distill-Qwen-1.5B",
        "h800",
        1,
        areal("vllm:d4", "fsdp:d4", 16384),
        assumed=AREAL_GPU,
    ),
    "areal-tau2-qwen3-1.7b-archon": Case(
        "AReaL",
        AREAL + "examples/tau2/config_1.7b_airline.yaml",
        "Qwen3-1.7B",
        "h800",
        1,
        areal("sglang:d6", "archon:d2", 24576),
        assumed=AREAL_GPU,
    ),
    "areal-tau2-qwen3-8b-archon": Case(
        "AReaL",
        AREAL + "examples/tau2/config_8b_airline.yaml",
        "Qwen3-8B",
        "h800",
        3,
        areal("sglang:d16", "archon:d8", 32768),
        assumed=AREAL_GPU,
    ),
    "areal-tau2-qwen3-30b-megatron": Case(
        "AReaL",
        AREAL + "examples/tau2/config_30b_moe_airline.yaml",
        "Qwen3-30B-A3B",
        "h800",
        8,
        {
            **areal("sglang:d8t4", "megatron:(attn:d4p4t2|ffn:d2p4e4)", 32768),
            "actor.megatron.sequence_parallel": True,
        },
        assumed=AREAL_GPU
        + "; AReaL turns sequence parallel on with t > 1 (areal/engine/megatron_engine.py)",
    ),
    "areal-countdown-qwen2.5-3b": Case(
        "AReaL",
        AREAL + "examples/countdown/train_config.yaml",
        "Qwen2.5-3B",
        "h800",
        1,
        areal("sglang:d4", "fsdp:d4", 8192, ref_tokens=10240),
        assumed=AREAL_GPU,
    ),
    "areal-search-agent-qwen2.5-1.5b": Case(
        "AReaL",
        AREAL + "examples/search_agent/local_1.5b_example.yaml",
        "Qwen2.5-1.5B",
        "h800",
        1,
        areal("sglang:d4", "fsdp:d4", 8000, mfs=0.9, ref_tokens=32768),
        assumed=AREAL_GPU,
    ),
    "areal-tongyi-deepresearch-qwen3-1.7b": Case(
        "AReaL",
        AREAL + "examples/search_agent/tongyi_deepresearch/config.yaml",
        "Qwen3-1.7B",
        "h800",
        1,
        areal("sglang:d4", "megatron:d2p2", 32768, ref_tokens=10240),
        assumed=AREAL_GPU,
    ),
    # ------------------------------------------------------------------ slime (docs: H100)
    "slime-qwen3-4b-colocate": Case(
        "slime",
        SLIME + "scripts/run-qwen3-4B.sh",
        "Qwen3-4B",
        "h100",
        1,
        slime("sglang:d4t2", "megatron:d4t2", 9216, colocate=True),
        assumed="docs/en/examples/qwen3-4B.md: 8 x H100",
    ),
    "slime-glm4-9b-disaggregated": Case(
        "slime",
        SLIME + "scripts/run-glm4-9B.sh",
        "GLM4-9B",
        "h100",
        1,
        {
            **slime("sglang:d2t2", "megatron:d1t2c2", 4608, colocate=False),
            "cluster.component_placement.rollout": "4-7",
            "cluster.component_placement.actor": "0-3",
        },
        assumed="docs/en/examples/glm4-9B.md: 8 x H100; mem-fraction-static left at SGLang's "
        "default (the script does not set it): 0.7 taken",
    ),
    "slime-qwen3-32b-colocate-cpu-adam": Case(
        "slime",
        SLIME + "scripts/run-qwen3-32B.sh",
        "Qwen3-32B",
        "h100",
        1,
        slime("sglang:t8", "megatron:t8", 20480, colocate=True, cpu_adam=True),
        assumed="no doc page names its GPU: slime's examples run on H100",
    ),
    "slime-qwen3-30b-colocate-cpu-adam": Case(
        "slime",
        SLIME + "scripts/run-qwen3-30B-A3B.sh",
        "Qwen3-30B-A3B",
        "h100",
        1,
        slime("sglang:t8", "megatron:(attn:d2t4|ffn:e8)", 20480, colocate=True, cpu_adam=True),
        assumed="docs/en/examples/qwen3-30B-A3B.md: 8 x H100",
    ),
    # "To support running Qwen3-30B-A3B in an 8xH800 environment, we need to enable
    # Megatron's CPU Adam to save GPU memory": without it, it does not fit
    "slime-qwen3-30b-colocate-without-cpu-adam-oom": Case(
        "slime",
        SLIME + "docs/en/examples/qwen3-30B-A3B.md",
        "Qwen3-30B-A3B",
        "h800",
        1,
        slime("sglang:t8", "megatron:(attn:d2t4|ffn:e8)", 20480, colocate=True),
        fits=False,
        assumed="Adam states in fp32 (the precision-aware optimizer comes with the offload)",
    ),
    "slime-qwen2.5-0.5b-colocate": Case(
        "slime",
        SLIME + "scripts/run-qwen2.5-0.5B-reproducibility.sh",
        "Qwen2.5-0.5B",
        "h100",
        1,
        {
            **slime("sglang:d8", "megatron:d8", 9216, colocate=True, context=1024 + 2048),
            "actor.megatron.recompute_granularity": None,
        },
        assumed="H100 as slime's other examples; no recompute in this script",
    ),
    "slime-moonlight-16b-colocate-cpu-adam": Case(
        "slime",
        SLIME + "scripts/run-moonlight-16B-A3B.sh",
        "Moonlight-16B-A3B",
        "h100",
        1,
        slime("sglang:t8", "megatron:(attn:d2t4|ffn:e8)", 8192, colocate=True, cpu_adam=True),
        assumed="H100 as slime's other examples",
    ),
    "slime-qwen3-235b-disaggregated-cpu-adam": Case(
        "slime",
        SLIME + "scripts/run-qwen3-235B-A22B.sh",
        "Qwen3-235B-A22B",
        "h100",
        16,
        {
            **slime(
                "sglang:d2t32",
                "megatron:(attn:d2p4t4c2|ffn:p4e16)",
                16384,
                colocate=False,
                cpu_adam=True,
                ref=False,
            )
        },
        assumed="H100 as slime's other examples; SGLang's dp-attention (32-way expert "
        "parallel) written as t32 per engine; no ref (its --use-kl-loss is commented "
        "out)",
    ),
    # ------------------------------------------------------------------ verl
    "verl-qwen2-7b-seq-balance-8gpu": Case(
        "verl",
        VERL + "examples/grpo_trainer/run_qwen2-7b_seq_balance.sh",
        "Qwen2.5-7B",
        "h100",
        1,
        verl_fsdp("sglang:d4t2", "fsdp:d8", 24000, 512 + 1024, 0.6),
        assumed="Qwen2-7B has Qwen2.5-7B's dims; the script names no GPU: 80 GB H100 taken",
    ),
    # the same script "on 4 49G GPUs" (ypwang61/One-Shot-RLVR#14, the author's comment)
    "verl-qwen2-7b-seq-balance-4x48gb": Case(
        "verl",
        "https://github.com/ypwang61/One-Shot-RLVR/issues/14",
        "Qwen2.5-7B",
        "l40s",
        1,
        verl_fsdp("sglang:d2t2", "fsdp:d4", 24000, 512 + 1024, 0.6),
        gpus_per_node=4,
        fits=False,
        explained=True,
        assumed="48 GB cards (L40S); fp32 master weights of 7.6 B parameters over "
        "4 GPUs are 28 GiB per GPU before any activation: a static estimate cannot fit it, the "
        "comment's run must have used smaller micro-batches",
    ),
    "verl-tuning-qwen2-7b-2xh800": Case(
        "verl",
        VERL + "examples/tuning/7b/qwen2-7b_grpo_2_h800_fsdp_vllm.sh",
        "Qwen2.5-7B",
        "h800",
        1,
        {
            **verl_fsdp(
                "vllm:t2",
                "fsdp:d2",
                4096,
                1024 + 1024,
                0.6,
                param_offload=True,
                optimizer_offload=True,
            ),
            "cluster.gpus_per_node": 2,
        },
        gpus_per_node=2,
        assumed="docs/perf/device_tuning.rst (MIN, 2 x H800); micro-batches of 16 GSM8K "
        "sequences of about 256 tokens: 4096 tokens",
    ),
    "verl-tuning-qwen2.5-14b-4xh800": Case(
        "verl",
        VERL + "examples/tuning/14b/qwen2_14b_grpo_4_h800_fsdp_vllm.sh",
        "Qwen2.5-14B",
        "h800",
        1,
        verl_fsdp(
            "vllm:t4", "fsdp:d4", 4096, 1024 + 1024, 0.5, param_offload=True, optimizer_offload=True
        ),
        gpus_per_node=4,
        assumed="docs/perf/device_tuning.rst (MIN, 4 x H800); Qwen2.5-Coder-14B has "
        "Qwen2.5-14B's dims; 16 GSM8K sequences of about 256 tokens a micro-batch",
    ),
    "verl-tuning-qwen2-72b-32xh800": Case(
        "verl",
        VERL + "examples/tuning/70b/qwen2-70b_grpo_32_h800_fsdp_vllm.sh",
        "Qwen2.5-72B",
        "h800",
        4,
        verl_72b(8192),
        assumed="docs/perf/device_tuning.rst (32 x H800); Qwen2-72B has Qwen2.5-72B's dims; "
        "its dynamic cap is 24000 tokens, but a mini-batch gives each GPU 40 GSM8K "
        "sequences of about 200 tokens: 8192 tokens",
    ),
    # the same recipe read with longer GSM8K samples (issue 33: "86.9 GiB estimated against
    # 79.1 usable"): verl's flash-attn cross-entropy keeps 2 bytes a logit, not our 6
    "verl-tuning-qwen2-72b-32xh800-16k": Case(
        "verl",
        VERL + "examples/tuning/70b/qwen2-70b_grpo_32_h800_fsdp_vllm.sh",
        "Qwen2.5-72B",
        "h800",
        4,
        verl_72b(16384),
        assumed="docs/perf/device_tuning.rst (MIN, 32 x H800); 40 GSM8K sequences a GPU of "
        "about 400 tokens (prompt and answer) in one dynamic micro-batch: 16384 tokens",
    ),
    "verl-tuning-qwen2-72b-32xh20-16k": Case(
        "verl",
        VERL + "examples/tuning/70b/qwen2-70b_grpo_32_h20_fsdp_vllm.sh",
        "Qwen2.5-72B",
        "h20",
        4,
        verl_72b(16384),
        assumed="docs/perf/device_tuning.rst (MIN, 32 x H20); the H800 recipe's flags; 16384 "
        "tokens a micro-batch as above",
    ),
    "verl-tuning-qwen2.5-32b-8xh20-megatron": Case(
        "verl",
        VERL + "examples/tuning/32b/qwen2_32B_grpo_8_h20_megatron_vllm.sh",
        "Qwen2.5-32B",
        "h20",
        1,
        verl_megatron("vllm:t8", "megatron:t8", 8192, 2048 + 6144, 0.6, offload=True),
        assumed="docs/perf/device_tuning.rst (8 x H20); one sequence of at most 8192 tokens a "
        "micro-batch; verl turns sequence parallel on with t > 1",
    ),
    "verl-qwen3-30b-moe-megatron-h20": Case(
        "verl",
        VERL + "examples/grpo_trainer/run_qwen3moe-30b_megatron_96gb.sh",
        "Qwen3-30B-A3B",
        "h20",
        1,
        {
            **verl_megatron(
                "vllm:d2t4",
                "megatron:(attn:d2t4|ffn:e8)",
                2048 + 8192,
                2048 + 8192,
                0.7,
                offload=True,
            ),
            "actor.megatron.optimizer_cpu_offload": True,
        },
        assumed="NNODES=1 of its 1-4 x 96G H20; TRAIN_TP 4 / EP 8 as the script's defaults "
        "read; optimizer_cpu_offload with fraction 1",
    ),
    # verl-project/verl#855: DeepSeek-R1-Distill-Qwen-14B on 8 x H100 runs out of memory in
    # update_actor with 24000-token dynamic micro-batches and no offload
    "verl-r1-distill-14b-8xh100-oom": Case(
        "verl",
        "https://github.com/verl-project/verl/issues/855",
        "Qwen2.5-14B",
        "h100",
        1,
        verl_fsdp("vllm:t8", "fsdp:d8", 24000, 512 + 512, 0.6),
        fits=False,
        assumed="R1-Distill-Qwen-14B has Qwen2.5-14B's dims; vLLM's fraction 0.6 (cut off in "
        "the report)",
    ),
    # ------------------------------------------------------------------ NeMo-RL (n8g: DGX-H100)
    "nemo-llama3.1-8b-2n8g-fsdp-noncolocated": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/"
        "grpo-llama3.1-8b-instruct-2n8g-fsdp2tp1-noncolocated.yaml",
        "Llama-3.1-8B",
        "h100",
        2,
        nemo("vllm:d8", "fsdp:d8", 4096, colocate=False),
        assumed="docs/about/performance-summary.md: DGX-H100 for the n8g recipes",
    ),
    "nemo-llama3.1-8b-4n8g-fsdp-long": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/grpo-llama3.1-8b-instruct-4n8g-fsdp2tp1-long.v3.yaml",
        "Llama-3.1-8B",
        "h100",
        4,
        nemo("vllm:d32", "fsdp:d32", 4096),
        assumed="DGX-H100 (performance-summary.md)",
    ),
    "nemo-qwen2.5-32b-32n8g-fsdp-tp8-actckpt-long": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/grpo-qwen2.5-32b-32n8g-fsdp2tp8-actckpt-long.v3.yaml",
        "Qwen2.5-32B",
        "h100",
        32,
        nemo("vllm:d64t4", "fsdp:d32t8", 16384, checkpointing=True),
        assumed="DGX-H100; DTensor's sequence_parallel is off, ours assumes it with t > 1",
    ),
    "nemo-qwen2.5-32b-32n8g-fsdp-tp8-actckpt": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/grpo-qwen2.5-32b-32n8g-fsdp2tp8-actckpt.v3.yaml",
        "Qwen2.5-32B",
        "h100",
        32,
        nemo("vllm:d64t4", "fsdp:d32t8", 4096, checkpointing=True),
        assumed="DGX-H100",
    ),
    "nemo-qwen2.5-math-1.5b-1n8g-fsdp": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/grpo-qwen2.5-math-1.5b-instruct-1n8g-fsdp2tp1.v3.yaml",
        "R1-Distill-Qwen-1.5B",
        "h100",
        1,
        nemo("vllm:d8", "fsdp:d8", 512 * 4),
        assumed="DGX-H100; Qwen2.5-Math-1.5B's dims; "
        "grpo_math_1B.yaml's 512-token sequences, 4 a micro-batch",
    ),
    "nemo-perf-llama3.1-8b-2n8g-megatron-pp2": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/performance/grpo-llama3.1-8b-instruct-2n8g.yaml",
        "Llama-3.1-8B",
        "h100",
        2,
        nemo("vllm:d16", "megatron:d8p2", 4096, megatron=True, checkpointing=True),
        assumed="DGX-H100",
    ),
    "nemo-perf-qwen3-32b-4n8g-megatron-tp4pp4": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/performance/grpo-qwen3-32b-4n8g.yaml",
        "Qwen3-32B",
        "h100",
        4,
        {
            **nemo("vllm:d8t4", "megatron:d2p4t4", 4096, megatron=True),
            "actor.megatron.sequence_parallel": True,
        },
        assumed="DGX-H100",
    ),
    "nemo-perf-qwen3-30b-4n8g-megatron-ep8": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/performance/grpo-qwen3-30ba3b-4n8g.yaml",
        "Qwen3-30B-A3B",
        "h100",
        4,
        nemo("vllm:d16t2", "megatron:(attn:d32|ffn:d4e8)", 4096, megatron=True),
        assumed="DGX-H100",
    ),
    "nemo-perf-qwen3-235b-16n8g-megatron": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/performance/grpo-qwen3-235b-16n8g.yaml",
        "Qwen3-235B-A22B",
        "h100",
        16,
        {
            **nemo(
                "vllm:d8t16",
                "megatron:(attn:d4p8t2c2|ffn:p8e16)",
                8192,
                megatron=True,
                checkpointing=True,
            ),
            "actor.megatron.sequence_parallel": True,
        },
        assumed="DGX-H100",
    ),
    "nemo-perf-deepseek-v3-32n8g-megatron": Case(
        "NeMo-RL",
        NEMO + "examples/configs/recipes/llm/performance/grpo-deepseek-v3-32n8g.yaml",
        "DeepSeek-V3",
        "h100",
        32,
        nemo(
            "vllm:d8t32",
            "megatron:(attn:d16p16|ffn:p16e16)",
            1536,
            megatron=True,
            checkpointing=True,
        ),
        assumed="DGX-H100 (performance-summary.md lists this layout: training EP16 PP16, "
        "generation TP32)",
    ),
    # ------------------------------------------------------------------ OpenRLHF
    "openrlhf-dapo-llama3-8b-hybrid": Case(
        "OpenRLHF",
        OPENRLHF + "examples/scripts/train_dapo_ray_hybrid_engine.sh",
        "Llama-3-8B",
        "a100 80gb",
        1,
        openrlhf("vllm:d4t2", "fsdp:d8", 8 * 2048, 0.6, 2048),
        assumed="README's quick-start template: 8 x A100 80GB; micro-batches of 8 packed "
        "samples of at most 2048 tokens",
    ),
    "openrlhf-ppo-llama3-8b-hybrid-critic": Case(
        "OpenRLHF",
        OPENRLHF + "examples/scripts/train_ppo_ray_hybrid_engine.sh",
        "Llama-3-8B",
        "a100 80gb",
        1,
        {
            **openrlhf("vllm:d4t2", "fsdp:d8", 16384, 0.5, 2048),
            "critic.backend": "",
            "critic.dtype": "float32",
            "critic.fsdp.mixed_precision": "bf16",
            "critic.gradient_checkpointing": True,
            "critic.mb_spec.max_tokens_per_mb": 16384,
            **offloaded("critic"),
        },
        assumed="8 x A100 80GB; the reward model (a forward of the same size as the ref) is "
        "left out: our engines have no reward model",
    ),
    "openrlhf-prorlv2-r1-distill-1.5b-hybrid": Case(
        "OpenRLHF",
        OPENRLHF + "examples/scripts/train_prorlv2_math_hybrid_engine.sh",
        "R1-Distill-Qwen-1.5B",
        "a100 80gb",
        1,
        openrlhf("vllm:d8", "fsdp:d8", 32768, 0.75, 9216),
        assumed="8 x A100 80GB",
    ),
    "openrlhf-reinforce-baseline-qwen3-4b-ring2": Case(
        "OpenRLHF",
        OPENRLHF + "examples/scripts/train_reinforce_baseline_hybrid_engine.sh",
        "Qwen3-4B",
        "a100 80gb",
        1,
        {**openrlhf("vllm:d2t2", "fsdp:d2c2", 16192, 0.7, 74240), "cluster.gpus_per_node": 4},
        gpus_per_node=4,
        assumed="4 x A100 80GB; Qwen3-4B-Thinking-2507 has Qwen3-4B's dims; ring attention 2 "
        "as c2; the script does not set --vllm.enable_sleep, but it trains colocated "
        "with vLLM at 0.7: taken as released",
    ),
    # OpenRLHF/OpenRLHF#887 setup 1: a 7B model with 36864-token answers, the actor on one GPU
    # of each of three H100 nodes (ZeRO-3 over 3), micro-batches of one sample
    "openrlhf-7b-32k-three-gpu-actor-oom": Case(
        "OpenRLHF",
        "https://github.com/OpenRLHF/OpenRLHF/issues/887",
        "Qwen2.5-7B",
        "h100",
        3,
        {
            "rollout.backend": "vllm:d3",
            "actor.backend": "fsdp:d3",
            "ref.backend": "fsdp:d18",
            "rollout.vllm.max_model_len": 1024 + 36864,
            "actor.dtype": "float32",
            "actor.fsdp.mixed_precision": "bf16",
            "actor.gradient_checkpointing": True,
            "actor.mb_spec.max_tokens_per_mb": 1024 + 36864,
            "ref.mb_spec.max_tokens_per_mb": 1024 + 36864,
        },
        fits=False,
        assumed="the 7B model taken as Qwen2.5-7B; gradient checkpointing on (the report "
        "cuts off before its flags)",
    ),
    # OpenRLHF/OpenRLHF#901: Qwen2.5-7B GRPO on 4 x 48 GB (A6000 Ada), the actor on 2 GPUs with
    # ZeRO-2 in bf16, the ref on the other 2, micro-batches of 2 samples of a 1024-token prompt:
    # out of memory whatever the batch size
    "openrlhf-qwen2.5-7b-two-gpu-zero2-actor-oom": Case(
        "OpenRLHF",
        "https://github.com/OpenRLHF/OpenRLHF/issues/901",
        "Qwen2.5-7B",
        "a6000",
        1,
        {
            "rollout.backend": None,
            "actor.backend": "fsdp:d2",
            "ref.backend": "fsdp:d2",
            "cluster.component_placement.actor": "0-1",
            "cluster.component_placement.ref": "2-3",
            "cluster.gpus_per_node": 4,
            "actor.dtype": "float32",
            "actor.fsdp.mixed_precision": "bf16",
            "actor.mb_spec.max_tokens_per_mb": 2 * (1024 + 1),
            "ref.mb_spec.max_tokens_per_mb": 2 * (1024 + 1),
        },
        gpus_per_node=4,
        fits=False,
        explained=True,
        assumed="ZeRO-2 keeps the bf16 weights whole on each GPU; written as a full shard "
        "(fsdp:d2), which needs less, so the refusal holds for ZeRO-2 too; no vLLM engine "
        "(its flags are cut off in the report); bf16 with fp32 master weights as DeepSpeed "
        "keeps them",
    ),
}
