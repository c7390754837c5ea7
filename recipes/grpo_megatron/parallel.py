"""Megatron-core's parallel state from the plan: sizes from the plan's `parallel` dict (read
through launcher.trainer.runtime, not parsed from the command line), groups read back from Megatron
and compared with the plan's, rank by rank, axis by axis.

Megatron builds its groups with its own arithmetic (RankGenerator, order tp-cp-ep-dp-pp; the
experts' grid etp-ep-edp-pp): if the plan ever placed ranks otherwise, training would silently
mix up shards. The comparison turns that into one line at start. The launcher also appends
Megatron-LM's flags (--tensor-model-parallel-size ...); they must say what the plan says.
"""

from __future__ import annotations

from typing import Optional

import torch.distributed as dist

from launcher.trainer.runtime import RuntimePlan

DENSE_AXES = ("tp", "pp", "dp", "cp")
EXPERT_AXES = ("ep", "etp", "edp")
FLAG_SIZES = {
    "--tensor-model-parallel-size": "tp",
    "--pipeline-model-parallel-size": "pp",
    "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep",
    "--expert-tensor-parallel-size": "etp",
}


def flag_values(flags: list[str]) -> dict[str, Optional[str]]:
    """`--name value` / `--name=value` / `--switch` pairs as a dict (switch -> None)."""
    out: dict[str, Optional[str]] = {}
    i = 0
    while i < len(flags):
        name, sep, value = flags[i].partition("=")
        if sep:
            out[name] = value
        elif i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out[name] = flags[i + 1]
            i += 1
        else:
            out[name] = None
        i += 1
    return out


def flags_disagree(rt: RuntimePlan, flags: list[str]) -> Optional[str]:
    """A line when a parallel-size flag on the command line differs from the plan."""
    sizes = rt.parallel("actor")
    given = flag_values(flags)
    for flag, axis in FLAG_SIZES.items():
        if flag in given and given[flag] is not None and int(given[flag]) != sizes[axis]:
            return f"{flag} {given[flag]} on the command line, the plan says {axis} {sizes[axis]}"
    return None


def initialize(rt: RuntimePlan) -> dict[str, int]:
    """Megatron's model-parallel groups with the plan's t, p, c, e and the ffn part's t."""
    from megatron.core import parallel_state as ps

    p = rt.parallel("actor")
    ps.initialize_model_parallel(
        tensor_model_parallel_size=p["tp"],
        pipeline_model_parallel_size=p["pp"],
        context_parallel_size=p["cp"],
        expert_model_parallel_size=p["ep"],
        expert_tensor_parallel_size=p["etp"],
        create_gloo_process_groups=False,
    )
    return p


def live_groups() -> dict[str, list[int]]:
    """Every group Megatron formed that holds this rank, by the plan's axis names."""
    from megatron.core import parallel_state as ps

    groups = {
        "tp": ps.get_tensor_model_parallel_group(),
        "pp": ps.get_pipeline_model_parallel_group(),
        "dp": ps.get_data_parallel_group(with_context_parallel=False),
        "cp": ps.get_context_parallel_group(),
        "ep": ps.get_expert_model_parallel_group(),
        "etp": ps.get_expert_tensor_parallel_group(),
        "edp": ps.get_expert_data_parallel_group(),
    }
    return {axis: dist.get_process_group_ranks(group) for axis, group in groups.items()}


def live_coords() -> dict[str, int]:
    """This rank's coordinates as Megatron's parallel state has them."""
    from megatron.core import parallel_state as ps

    return {
        "tp": ps.get_tensor_model_parallel_rank(),
        "pp": ps.get_pipeline_model_parallel_rank(),
        "dp": ps.get_data_parallel_rank(),
        "cp": ps.get_context_parallel_rank(),
    }
