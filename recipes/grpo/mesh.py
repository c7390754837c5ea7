"""The plan's layout, trained: a DeviceMesh laid out from the plan's rank coordinates, tensor
parallel (DTensor) over its tp axis, FSDP2 over dp (x cp), and the groups read back from it.

Mesh: `RuntimePlan.mesh_layout()` gives the ranks as nested lists in (dp, cp, tp) order, which
DeviceMesh takes as is: the trainer never re-derives the launcher's rank arithmetic.
Tensor parallel: the HF Llama plan (the one transformers ships as `base_model_tp_plan`):
q/k/v and gate/up column-wise, o and down row-wise; each rank computes its heads and its slice
of the MLP and the row-wise layers all-reduce, so the residual stream, norms, embedding and
lm_head stay whole (replicated) on every tp rank.
cp: FSDP2 shards over dp and cp flattened, as torchtitan does, but sequences are not split
(HF Llama's attention has no context-parallel path and these sequences are ~30 tokens): the cp
ranks of a dp group take samples of their own, so cp works as more data parallelism.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Iterable, Optional

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from launcher.trainer.runtime import RuntimePlan
from recipes.grpo.layout import WeightShard

# Gathering a (dp, tp)-sharded weight whole takes two all-gathers; torch warns on every push
# that one would be faster. Once per push on the recipe's model: not worth a line per rank.
logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)

MESH_DIMS = ("dp", "cp", "tp")
LLAMA_LAYER_TP_PLAN = {
    "self_attn.q_proj": ColwiseParallel,
    "self_attn.k_proj": ColwiseParallel,
    "self_attn.v_proj": ColwiseParallel,
    "self_attn.o_proj": RowwiseParallel,
    "mlp.gate_proj": ColwiseParallel,
    "mlp.up_proj": ColwiseParallel,
    "mlp.down_proj": RowwiseParallel,
}
RECORDED_WEIGHT = "model.layers.0.self_attn.q_proj.weight"  # the weight ranks/<rank>.json shows
MIXED_PRECISION = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}


def plan_mesh(rt: RuntimePlan, device_type: str, engine: str = "actor") -> DeviceMesh:
    """The engine's (dp, cp, tp) DeviceMesh, laid out as the plan places its ranks."""
    layout = rt.mesh_layout(MESH_DIMS, engine)
    return DeviceMesh(
        device_type, mesh=torch.tensor(layout.ranks, dtype=torch.int), mesh_dim_names=layout.names
    )


def data_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The ranks that take different samples and shard parameters: dp, or dp x cp flattened."""
    if mesh.size(MESH_DIMS.index("cp")) == 1:
        return mesh["dp"]
    return mesh["dp", "cp"]._flatten("dp_cp")


def live_groups(mesh: DeviceMesh) -> dict[str, list[int]]:
    """Each axis's group holding this rank, as the process groups the mesh made have them."""
    return {axis: dist.get_process_group_ranks(mesh.get_group(axis)) for axis in MESH_DIMS}


def live_coords(mesh: DeviceMesh) -> dict[str, int]:
    """This rank's coordinates read from the mesh (FSDP has no pipeline: pp is 0)."""
    return {**{axis: mesh.get_local_rank(axis) for axis in MESH_DIMS}, "pp": 0}


def mixed_precision_policy(name: Optional[str]) -> Optional[MixedPrecisionPolicy]:
    """actor.fsdp.mixed_precision: bf16/fp16 parameters for compute, fp32 gradient reduction
    (the sharded master weights and optimizer stay in the training dtype); None: off."""
    if not name:
        return None
    key = str(name).lower()
    if key not in MIXED_PRECISION:
        raise ValueError(f"actor.fsdp.mixed_precision={name}: choose bf16 or fp16 (or null)")
    return MixedPrecisionPolicy(param_dtype=MIXED_PRECISION[key], reduce_dtype=torch.float32)


def check_divisible(config: Any, tp: int) -> None:
    """Heads and MLP width must split evenly over tp, else one line saying which."""
    for what in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        value = getattr(config, what)
        if value % tp:
            raise ValueError(
                f"tp={tp} does not divide the model's {what} ({value}): "
                "choose a t that divides it in actor.backend"
            )


def shard_model(
    model: torch.nn.Module,
    mesh: DeviceMesh,
    mp: Optional[MixedPrecisionPolicy],
    reshard_after_forward: bool,
    offload_params: bool = False,
) -> torch.nn.Module:
    """Tensor parallel over the mesh's tp axis (when > 1), then FSDP2 over its data axis:
    each decoder layer, then the whole model. `offload_params` (actor.fsdp.offload_params, on
    GPUs): the shards, their grads and the optimizer step live on the host."""
    tp_mesh = mesh["tp"]
    if tp_mesh.size() > 1:
        check_divisible(model.config, tp_mesh.size())
        for layer in model.model.layers:
            parallelize_module(
                layer, tp_mesh, {name: style() for name, style in LLAMA_LAYER_TP_PLAN.items()}
            )
    kwargs: dict[str, Any] = {
        "mesh": data_mesh(mesh),
        "reshard_after_forward": reshard_after_forward,
    }
    if mp is not None:
        kwargs["mp_policy"] = mp
    if offload_params:
        from torch.distributed.fsdp import CPUOffloadPolicy

        kwargs["offload_policy"] = CPUOffloadPolicy()
    for layer in model.model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _sharded(param: torch.Tensor) -> bool:
    """FSDP2 keeps a parameter as a DTensor over the data axis while it is sharded."""
    names = param.device_mesh.mesh_dim_names or () if isinstance(param, DTensor) else ()
    return any(name in ("dp", "dp_cp") for name in names)


def observe_fsdp(model: torch.nn.Module, device: torch.device) -> dict[str, Any]:
    """What FSDP2 does in a training forward, read from the live model (a collective: every
    rank calls): the dtype the first attention projection computes in (mixed_precision) and
    whether its layer's parameters are sharded again when the forward ends
    (reshard_after_forward). A zero backward leaves no gradient behind."""
    proj = model.model.layers[0].self_attn.q_proj
    seen: dict[str, Any] = {}

    def note_dtype(module: torch.nn.Module, args: Any) -> None:  # None: inputs unchanged
        seen.setdefault("dtype", str(module.weight.dtype).removeprefix("torch."))

    handle = proj.register_forward_pre_hook(note_dtype)
    ids = torch.tensor([[1, 4, 5, 6]], device=device)
    try:
        logits = model(input_ids=ids).logits
        seen["resharded_after_forward"] = _sharded(proj.weight)
        (logits.float().sum() * 0).backward()
    finally:
        handle.remove()
    model.zero_grad(set_to_none=True)
    return seen


def clip_grad_norm(params: Iterable[torch.nn.Parameter], max_norm: float) -> float:
    """Clip by the global gradient norm (a collective: every rank calls). torch's
    clip_grad_norm_ stacks per-parameter norms, which fails when they live on different meshes
    (tp layers on (dp, tp), the rest on dp only): here the squares of the local shards are
    summed per set of sharded mesh axes and all-reduced over those axes' groups only."""
    grads = [p.grad for p in params if p.grad is not None]
    sums: dict[tuple[Any, ...], torch.Tensor] = {}
    for g in grads:
        local, groups = (
            (g, ())
            if not isinstance(g, DTensor)
            else (
                g.to_local(),
                tuple(
                    g.device_mesh.get_group(i) for i, pl in enumerate(g.placements) if pl.is_shard()
                ),
            )
        )
        sq = local.detach().float().pow(2).sum()
        sums[groups] = sums[groups] + sq if groups in sums else sq
    total_sq = torch.zeros((), dtype=torch.float32)
    for groups, sq in sums.items():
        for group in groups:
            dist.all_reduce(sq, group=group)
        total_sq += sq.cpu()
    total = float(total_sq.sqrt())
    scale = max_norm / (total + 1e-6)
    if scale < 1.0:
        for g in grads:
            g.mul_(scale)
    return total


def weight_shard(model: torch.nn.Module, name: str = RECORDED_WEIGHT) -> WeightShard:
    """What this rank holds of parameter `name`: local and full shape, offset, digest."""
    param = dict(model.named_parameters())[name]
    if isinstance(param, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        local = param.to_local()
        _, offset = compute_local_shape_and_global_offset(
            param.shape, param.device_mesh, param.placements
        )
    else:
        local, offset = param.detach(), (0,) * param.dim()
    data = local.detach().to("cpu", torch.float32).contiguous()
    return WeightShard(
        name,
        list(local.shape),
        list(param.shape),
        [int(o) for o in offset],
        hashlib.sha256(data.numpy().tobytes()).hexdigest(),
    )
