"""GRPO with Megatron-core: `trainer.entry=recipes/grpo_megatron/train.py` with
`actor.backend=megatron:...` (dense `megatron:d1t2p2` or the MoE hybrid
`megatron:(attn:d2t2|ffn:t2e2)`).

Every rank initialises Megatron's parallel state with the plan's t, p, c, e and the ffn part's
t (etp), read through launcher.trainer.runtime (the Megatron-LM flags the launcher appends must
agree),
checks every group Megatron formed (tp, pp, dp, cp, ep, etp, edp) holds exactly the ranks the
plan says (else all stop with one line naming the rank and the axis), builds the tiny Llama as
a GPTModel on its tp slice and pipeline stage, loads the HF checkpoint into it, and writes
`<run folder>/ranks/<rank>.json`. The dense model has no experts: the expert groups are formed
and checked, nothing is routed.

On cuda it then runs the GRPO loop of recipes/grpo/loop.py with Megatron's schedule
(recipes/grpo_megatron/step.py; UNTESTED: no GPU here). On cpu megatron-core 0.16.1 cannot run
a model step: tensor_parallel.model_parallel_cuda_manual_seed calls torch.cuda.get_rng_state
(random.py, CudaRNGStatesTracker.add), and without it the forward stops in RotaryEmbedding
(inv_freq moved to torch.cuda.current_device()) and, without RoPE, in DotProductAttention's
global memory buffer (allocated on torch.cuda.current_device()). So on cpu the recipe gathers
the loaded weights back to the HF layout, pushes them once as v0 and confirms the servers serve
them (the export path a GPU run uses after every step), and stops.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # run as a script by torchrun: make `recipes` importable
    sys.path.insert(0, str(_ROOT))

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from launcher.trainer.runtime import RuntimePlan, load_plan
from launcher.trainer.tiny_model import default_path as tiny_model_path
from recipes.grpo import loop
from recipes.grpo.layout import LayoutMismatch, mismatches, world_mismatch, write_rank_record
from recipes.grpo.loop import log
from recipes.grpo.options import GRPOOptions, load_options
from recipes.grpo.serving import START_PUSH
from recipes.grpo.weights import hf_shapes
from recipes.grpo_megatron import model as models
from recipes.grpo_megatron import parallel

CPU_STOP = (
    "Megatron's model step needs CUDA on megatron-core 0.16.1 (its RNG tracker, RoPE "
    "and attention buffers call torch.cuda)"
)


def check_layout(rt: RuntimePlan, rank: int, world: int) -> dict[str, int]:
    """Parallel state from the plan, then every group compared with the plan's."""
    problem = world_mismatch(rt, rank, world)
    loop.agree_on_layout([problem] if problem else [])
    sizes = parallel.initialize(rt)
    loop.agree_on_layout(
        mismatches(
            rt, rank, parallel.live_groups(), parallel.live_coords(), "Megatron's parallel state"
        )
    )
    return sizes


def load_hf_state(model_path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for path in sorted(Path(model_path).glob("*.safetensors")):
        state.update(load_file(str(path)))
    return state


def run(rt: RuntimePlan, opts: GRPOOptions, device: torch.device, rank: int, world: int) -> int:
    from megatron.core import parallel_state as ps
    from transformers import AutoConfig

    sizes = check_layout(rt, rank, world)
    options = rt.engine_options("actor")
    if any((rt.offload("actor") or {}).values()):
        log(rank, "grpo: actor.offload.* is not applied by the Megatron recipe")
    model_path = rt.model_path(default=str(tiny_model_path()))
    hf_config = AutoConfig.from_pretrained(model_path)
    dtype = getattr(torch, rt.training("actor")["dtype"])
    if device.type == "cuda":
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(opts.seed)
    hf_state = load_hf_state(model_path)
    module, shape = models.build(hf_config, sizes, options, dtype)
    models.load_hf(module, shape, hf_state)
    groups = parallel.live_groups()
    if rt.run_dir():
        write_rank_record(
            rt.run_dir(),
            rank,
            parallel.live_coords(),
            models.weight_shard(module),
            {
                "backend": "megatron",
                "groups": groups,
                "layers": models.stage_layers(module),
                "megatron": {
                    "sequence_parallel": module.config.sequence_parallel,
                    "recompute_granularity": module.config.recompute_granularity,
                },
            },
        )
    slice_ = (
        ps.get_data_parallel_rank(),
        ps.get_data_parallel_world_size(),
        ps.get_data_parallel_group(),
    )
    s = loop.open_session(rt, opts, device, model_path, slice_, hf_shapes(model_path))
    if s.teacher is not None:  # the distillation term is the FSDP recipe's (recipes/grpo)
        log(rank, "grpo: megatron has no distillation term yet: the served teacher is not asked")
        s.teacher = None
    log(
        rank,
        f"grpo: megatron on {device.type}: {world} rank(s), "
        + " ".join(f"{k} {v}" for k, v in sizes.items())
        + f"; every group checked against the plan; stage layers "
        f"{models.stage_layers(module)} on rank 0; {len(s.servers)} rollout server(s)",
    )
    if device.type != "cuda":
        log(
            rank,
            f"grpo: {CPU_STOP}: pushing the loaded weights once ({START_PUSH}) through the HF "
            "export instead of training",
        )
        state = models.gather_hf(module, shape)
        if s.rank == 0:
            s.phases.before_push()
        _, confirmed = loop.push_weights(s, state, START_PUSH)
        log(
            rank,
            f"grpo done (megatron, cpu): layout checked, weights {START_PUSH} pushed in the HF "
            f"layout, reload confirmed {confirmed}/{len(s.servers)}; no training step",
        )
        dist.barrier()
        return 0
    from recipes.grpo_megatron.step import make_engine

    ref = None
    if "ref" in rt.components() or rt.has_component("ref"):
        ref, _ = models.build(hf_config, sizes, options, dtype)
        models.load_hf(ref, shape, hf_state)
        ref = ref.cuda().eval().requires_grad_(False)
    engine = make_engine(module.cuda(), ref, shape, opts.lr, opts.max_grad_norm, options)
    return loop.run_steps(s, engine)


@record
def main(argv: Optional[list[str]] = None) -> int:
    rt = load_plan()
    if "actor" not in rt.components():
        print(f"grpo: nothing to do for {','.join(rt.components())}", flush=True)
        return 0
    rt.heartbeat(0, "setup")  # from here on SIGUSR2 dumps this rank's stacks into its log
    opts, flags = load_options(rt, sys.argv[1:] if argv is None else argv)
    device, rank, world = loop.init_distributed(rt, opts)
    disagreement = (
        parallel.flags_disagree(rt, flags)
        or models.unsupported_option(rt.engine_options("actor"))
        or (
            "the plan places an inference engine, whose log-probs only the FSDP "
            "entry uses: drop cluster.component_placement.inference or train with "
            "the default trainer.entry"
            if rt.has_component("inference")
            else None
        )
    )
    if disagreement:
        return loop.stop_all(disagreement, 2)
    try:
        code = run(rt, opts, device, rank, world)
    except LayoutMismatch as exc:  # every rank stops here
        return loop.stop_all(str(exc), 1)
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
