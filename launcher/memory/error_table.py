"""How far each term of the estimate may be from what a run really holds: one table, with
where each number comes from (docs/benchmarks.md, "The estimate's range", says how each was
derived). Data, not formulas: the formulas in train.py and infer.py give the estimate, this
table its error.

A term's range is its estimate times `low` and times `high`. The low end is the least any
engine the estimate stands for keeps for that term (where a peer's code keeps less than ours,
that code sets it); the high end is the most the measurements found above the estimate, and
never below it. So the estimate lies inside its range, a plan is refused only when even the low
end does not fit, and it surely fits when the high end does.

Terms inside a server's own budget (an SGLang fraction holds weights and KV cache; a vLLM
utilization holds activations and CUDA graphs too) move together: the server sizes its KV
cache to fill the budget, so their sum is exact whatever each term's error (EngineNeed.budget).
"""

from __future__ import annotations

from dataclasses import dataclass

TRAIN, SERVE, HOST = "train", "rollout", "host"
ANY = "any"  # a row for every device


@dataclass(frozen=True)
class TermError:
    """A term's range relative to its estimate, and where the two numbers come from."""

    low: float
    high: float
    source: str

    def __post_init__(self) -> None:
        assert 0 < self.low <= 1 <= self.high, self  # the estimate lies inside its range


_STATES = TermError(
    1.0,
    1.06,
    "low: bytes per parameter counted from config.json, which every engine holds (dtype and "
    "optimizer are options we read); high: CPU, llama-170m states measured 1.048-1.052x the "
    "estimate at 2048 and 4096 tokens (allocator rounding, autograd bookkeeping), rounded up",
)
_LAYER = TermError(
    0.68,
    1.01,
    "low: fused norms and SwiGLU (Megatron-core, Liger) keep 0.684-0.857x of what HF's eager "
    "layers keep on tests/peer_corpus.py's models (Qwen2.5-14B the least); high: CPU, "
    "llama-170m with and without checkpointing differ by 1282 MiB measured against 1280 "
    "MiB estimated (1.0016x), rounded up",
)
_GPU_PROCESS = TermError(
    0.5,
    1.0,
    "reference/memory.md §5: a process's CUDA context and NCCL buffers take about 1-2 GiB; "
    "the estimate takes the top",
)
# (phase, term, device) -> range; device ANY where the device changes nothing
TABLE: dict[tuple[str, str, str], TermError] = {
    (TRAIN, "weights", ANY): _STATES,
    (TRAIN, "grads", ANY): _STATES,
    (TRAIN, "optimizer", ANY): _STATES,
    (TRAIN, "gathered", ANY): TermError(
        0.5,
        1.0,
        "low: an engine that prefetches no layer holds one gathered layer, not two (the root "
        "unit is held either way); CPU, llama-170m: the step's part that does not grow with "
        "the tokens (grads, gathered, grad_reduce) measured 250 MiB against 718 estimated, "
        "about the root unit alone: the peak comes at the start of backward, before the grads",
    ),
    (TRAIN, "activations", ANY): _LAYER,
    (TRAIN, "layer_backward", ANY): _LAYER,
    (TRAIN, "logits", ANY): TermError(
        0.33,
        1.55,
        "low: verl's flash-attn cross-entropy with in-place backward keeps only the "
        "compute-dtype logits, 2 of our 6 bytes an entry (verl/utils/torch_functional.py "
        "logprobs_from_logits; reference/memory.md §9); high: CPU, llama-170m with "
        "checkpointing, 2048 tokens more added 839 MiB to the step against 564 estimated: "
        "less the activations' 64, the logits' 775 MiB against 500, 1.55x (at the start of "
        "backward the log-softmax's gradient is alive beside the logits)",
    ),
    (TRAIN, "grad_reduce", ANY): TermError(
        0.5,
        1.0,
        "low: a reduce in the compute dtype (bf16, FSDP2's default without a reduce_dtype) "
        "halves the fp32 copy; high: the estimate (CPU, measured inside gathered's part)",
    ),
    (TRAIN, "overhead", "cuda"): _GPU_PROCESS,
    (TRAIN, "overhead", "cpu"): TermError(
        0.85,
        1.0,
        "CPU: a bare FSDP2 rank 438 MiB (benchmarks/measure_fsdp_memory.py), the recipe's "
        "ranks 462-465 MiB (benchmarks/measure_cpu_memory.py), against 512",
    ),
    (SERVE, "weights", ANY): TermError(1.0, 1.0, "the checkpoint's tensors, counted"),
    (SERVE, "kv_cache", ANY): TermError(
        1.0, 1.0, "the pool the server is told to take (its fraction), or one full context"
    ),
    (SERVE, "activations", ANY): TermError(
        1.0,
        1.0,
        "not measured on a GPU yet (one prefill chunk through one layer, under 2 % of a "
        "card); inside vLLM's budget, which holds it exactly",
    ),
    (SERVE, "cuda_graphs", ANY): TermError(
        0.5,
        1.0,
        "SGLang's own reserve: 2 MB per captured batch size, 256-512 of them (0.5-1 GiB; "
        "srt/arg_groups/memory_hook.py)",
    ),
    (SERVE, "overhead", "cuda"): _GPU_PROCESS,
    (SERVE, "overhead", "cpu"): TermError(
        0.96,
        1.22,
        "CPU: vLLM's server tree 1979 MiB beyond its KV space and weights, against 2048; "
        "its compiler (cc1plus) added 508 MiB for a moment with a cold inductor cache "
        "(benchmarks/measure_cpu_memory.py)",
    ),
    (SERVE, "processes", ANY): TermError(1.0, 1.0, "the worker's own mem_gib, as given"),
    (HOST, "torchrun_agent", "cpu"): TermError(
        0.86, 1.0, "CPU: the torchrun agent 222-223 MiB against 256"
    ),
}


def term_error(phase: str, term: str, device: str) -> TermError:
    """The range of one term of an engine in `phase` on `device`."""
    found = TABLE.get((phase, term, device)) or TABLE.get((phase, term, ANY))
    if found is None:
        raise KeyError(f"no error range for the {phase} term {term!r} on {device}")
    return found
