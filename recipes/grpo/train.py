"""The default recipe: a small but real GRPO loop (recipes/grpo/loop.py) trained with FSDP2 and
tensor parallel on the plan's own layout.

Run by torchrun on every actor rank (gloo on CPU, NCCL on GPUs; nothing else differs). The
trainers build their (dp, cp, tp) DeviceMesh from the plan's rank coordinates, shard the HF
model with DTensor tensor parallel over tp and FSDP2 over dp (x cp) (recipes/grpo/mesh.py),
check the mesh's groups are the plan's (a difference stops every rank at start with one line
naming the rank and the axis) and write `<run folder>/ranks/<rank>.json` with the layout that
actually trains. `actor.backend=fsdp:d1t2` trains with tp 2, `fsdp:d2` with dp 2.

Options: launcher/conf/recipe/grpo.yaml, overridden by the plan's `recipe` dict and then by
`key=value` arguments (trainer.args); the engine's own options come from the plan
(actor.fsdp.mixed_precision, actor.fsdp.reshard_after_forward, actor.offload.*). A Megatron
layout runs with trainer.entry=recipes/grpo_megatron/train.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # run as a script by torchrun: make `recipes` importable
    sys.path.insert(0, str(_ROOT))

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.elastic.multiprocessing.errors import record

from launcher.spec.errors import LaunchError
from launcher.trainer.runtime import RuntimePlan, load_plan
from launcher.trainer.tiny_model import default_path as tiny_model_path
from recipes.grpo import distill, inference, loop
from recipes.grpo import mesh as meshes
from recipes.grpo import policy as policies
from recipes.grpo.layout import LayoutMismatch, mismatches, world_mismatch, write_rank_record
from recipes.grpo.loop import Session, log
from recipes.grpo.offload import HostOffload
from recipes.grpo.options import GRPOOptions, load_options
from recipes.grpo.rollout_client import Sample
from recipes.grpo.weights import gather_full_state, hf_shapes, token_logprobs
from recipes.grpo.world import stage_problem

MEGATRON_ENTRY = "recipes/grpo_megatron/train.py"


@dataclass
class FSDPEngine:
    """The actor (and its frozen reference) sharded on the plan's mesh, and its optimizer."""

    model: torch.nn.Module
    ref: Optional[torch.nn.Module]
    optim: torch.optim.Optimizer
    host: HostOffload

    @property
    def has_ref(self) -> bool:
        return self.ref is not None

    def train_step(
        self, s: Session, samples: list[Sample], advantages: list[float]
    ) -> dict[str, float]:
        """One GRPO update on this slice's samples (the tp ranks of a slice share them), in
        micro-batches of at most actor.mb_spec.max_tokens_per_mb tokens, gradients summed."""
        mine = loop.my_samples(s, len(samples))
        seqs = [loop.token_ids(s, samples[i]) for i in mine]
        pad = s.tokenizer.pad_token_id
        per_seqs, kls, terms = [], [], []
        gap = torch.zeros((), device=s.device)
        used = torch.zeros((), device=s.device)  # largest |actor - inference| log-prob
        groups = loop.micro_batches(s, seqs)
        for group, weight in zip(groups, loop.weights(groups)):
            rows = [mine[j] for j in group]
            part = [seqs[j] for j in group]
            adv = torch.tensor([advantages[i] for i in rows], device=s.device)
            logp, mask = token_logprobs(self.model, part, pad, s.device)
            ref_logp = None
            if self.ref is not None:
                with torch.no_grad():
                    ref_logp, _ = token_logprobs(self.ref, part, pad, s.device)
            old = (
                None
                if s.proximal is None
                else inference.proximal(logp, mask, [s.proximal[i] for i in rows])
            )
            if old is not None and weight:
                used = torch.maximum(used, ((logp.detach() - old).abs() * mask).max())
            per_seq, kl = loop.grpo_loss(logp, mask, adv, ref_logp, s.opts.kl_coef, old)
            teacher = (
                None
                if s.teacher_logps is None
                else inference.proximal(logp, mask, [s.teacher_logps[i] for i in rows])
            )
            per_seq, term = distill.joint(per_seq, logp, mask, teacher, s.teacher)
            # FSDP averages gradients over the data ranks: scale so the sum is the batch mean
            (per_seq.sum() * weight * s.data_world / len(samples)).backward()
            if weight:
                per_seqs.append(per_seq.detach())
                kls.append(kl.detach())
                terms += [] if term is None else [term.detach()]
                gap = torch.maximum(gap, loop.logp_gap(s, samples, rows, logp, mask))
        if s.opts.max_grad_norm > 0:
            meshes.clip_grad_norm(self.model.parameters(), s.opts.max_grad_norm)
        self.optim.step()
        self.optim.zero_grad(set_to_none=True)
        if s.proximal is not None:
            dist.all_reduce(used, op=dist.ReduceOp.MAX)
            log(
                s.rank,
                f"grpo: loss on the inference engine's log-probs ({len(samples)} "
                f"samples); largest |actor - inference| log-prob {used.item():.1e}",
            )
        stats = loop.batch_stats(s, samples, torch.cat(per_seqs), torch.cat(kls), gap)
        return {**stats, **distill.batch_term(s, terms, len(samples))}

    def full_state(self) -> dict[str, torch.Tensor]:
        return gather_full_state(self.model)

    def checkpoint_state(self) -> dict[str, Any]:
        """The sharded model and optimizer state, as torch.distributed.checkpoint saves and
        loads it (each rank its own shards; FQNs, not parameter ids, key the optimizer)."""
        model, optim = get_state_dict(self.model, self.optim)
        return {"model": model, "optim": optim}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        set_state_dict(
            self.model, self.optim, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )

    def offload(self) -> None:
        self.host.offload()

    def reload(self) -> None:
        self.host.reload()


def load_model(
    path: str,
    dtype: torch.dtype,
    device: torch.device,
    mesh: Any,
    fsdp_options: dict[str, Any],
    trainable: bool,
    checkpointing: bool = False,
) -> torch.nn.Module:
    """An HF causal LM, tensor parallel over the mesh's tp axis and FSDP2 over its data axis;
    `checkpointing`: each decoder layer recomputed in backward (actor.gradient_checkpointing)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    if checkpointing and trainable:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    meshes.shard_model(
        model,
        mesh,
        meshes.mixed_precision_policy(fsdp_options.get("mixed_precision")),
        bool(fsdp_options.get("reshard_after_forward", True)),
        offload_params=bool(fsdp_options.get("offload_params")) and device.type == "cuda",
    )
    model.requires_grad_(trainable)
    return model if trainable else model.eval()


def build_mesh(
    rt: RuntimePlan, device: torch.device, rank: int, world: int, engine: str = "actor"
) -> Any:
    """The plan's mesh, after checking torchrun started the plan's ranks; then its groups
    checked against the plan's."""
    problem = world_mismatch(rt, rank, world, engine)
    loop.agree_on_layout([problem] if problem else [])
    try:
        mesh = meshes.plan_mesh(rt, device.type, engine)
    except LaunchError as exc:  # the plan's coordinates are no grid: the same on every rank
        raise LayoutMismatch(str(exc)) from None
    loop.agree_on_layout(
        mismatches(rt, rank, meshes.live_groups(mesh), meshes.live_coords(mesh), "the mesh", engine)
    )
    return mesh


def setup(
    rt: RuntimePlan,
    opts: GRPOOptions,
    device: torch.device,
    rank: int,
    world: int,
    engine: str = "actor",
) -> tuple[Session, FSDPEngine]:
    mesh = build_mesh(rt, device, rank, world, engine)
    training = rt.training(engine)
    dtype = getattr(torch, training["dtype"])
    model_path = rt.model_path(default=str(tiny_model_path()))
    fsdp_options = rt.engine_options(engine)
    model = load_model(
        model_path,
        dtype,
        device,
        mesh,
        fsdp_options,
        trainable=True,
        checkpointing=bool(training["gradient_checkpointing"]),
    )
    fsdp = meshes.observe_fsdp(model, device)
    if fsdp_options.get("offload_params") and device.type != "cuda":
        log(
            rank,
            "grpo: actor.fsdp.offload_params: nothing to do on cpu (the shards are in host "
            "memory already)",
        )
    run_dir = rt.run_dir()
    if run_dir:
        write_rank_record(
            run_dir,
            rank,
            meshes.live_coords(mesh),
            meshes.weight_shard(model),
            {"backend": "fsdp", "fsdp": fsdp, "mesh": dict(zip(mesh.mesh_dim_names, mesh.shape))},
        )
    ref_on = "ref" in rt.components() or rt.has_component("ref")
    ref = load_model(model_path, dtype, device, mesh, fsdp_options, False) if ref_on else None
    optim = torch.optim.AdamW(model.parameters(), lr=opts.lr, weight_decay=0.0)
    data = meshes.data_mesh(mesh)
    slice_ = (data.get_local_rank(), data.size(), data.get_group())
    s = loop.open_session(rt, opts, device, model_path, slice_, hf_shapes(model_path))
    host = HostOffload.from_plan(
        rt, model, optim, device, say=lambda text: log(rank, text), engine=engine
    )
    sizes = " x ".join(f"{n} {k}" for n, k in zip(mesh.mesh_dim_names, mesh.shape))
    log(
        rank,
        f"grpo: {world} {engine} rank(s) on {device.type}, mesh {sizes} "
        f"(FSDP2 over {data.size()}, tensor parallel over {mesh['tp'].size()}; computes "
        f"in {fsdp['dtype']}, reshard_after_forward "
        f"{str(fsdp['resharded_after_forward']).lower()}), "
        f"micro-batches of {s.max_tokens_per_mb} tokens, gradient checkpointing "
        f"{'on' if training['gradient_checkpointing'] else 'off'}, "
        f"ref {'on' if ref else 'off'}, {len(s.servers)} rollout server(s)"
        f"{' ' + ','.join(x.addr for x in s.servers) if s.servers else ''}, "
        f"model {model_path}, "
        f"weights -> {s.weights_root}",
    )
    return s, FSDPEngine(model, ref, optim, host)


def refuse_megatron(rt: RuntimePlan, engine: str = "actor") -> Optional[str]:
    backend = rt.component(engine).get("backend")
    if backend == "megatron":
        return (
            f"{engine}.backend={rt.component(engine).get('spec')} is a Megatron layout: "
            f"run it with trainer.entry={MEGATRON_ENTRY} (this entry trains FSDP2)"
        )
    return None


def bad_fsdp_option(rt: RuntimePlan, engine: str = "actor") -> Optional[str]:
    """actor.fsdp.mixed_precision checked before anything is built."""
    try:
        meshes.mixed_precision_policy(rt.engine_options(engine).get("mixed_precision"))
    except ValueError as exc:
        return str(exc)
    return None


@record
def main(argv: Optional[list[str]] = None) -> int:
    rt = load_plan()
    role = policies.job_role(rt)
    if role is None:
        print(
            f"grpo: nothing to do for {','.join(rt.components())}: this recipe runs the "
            "reference model inside the actor job",
            flush=True,
        )
        return 0
    rt = policies.scoped(rt, role)  # a second policy's files in <run>/<role>/
    if role == policies.INFERENCE:
        return inference.serve(rt, lambda text: print(text, flush=True))
    rt.heartbeat(0, "setup")  # from here on SIGUSR2 dumps this rank's stacks into its log
    opts, engine_flags = load_options(rt, sys.argv[1:] if argv is None else argv)
    device, rank, world = loop.init_distributed(rt, opts)
    refusal = (
        refuse_megatron(rt, role)
        or bad_fsdp_option(rt, role)
        or stage_problem(rt, opts.prompts_per_step)
    )
    if refusal:
        return loop.stop_all(refusal, 2)
    try:
        s, engine = setup(rt, opts, device, rank, world, role)
    except LayoutMismatch as exc:  # every rank stops here
        return loop.stop_all(str(exc), 1)
    if engine_flags:
        log(s.rank, f"grpo: trains with FSDP2, ignores engine flags {' '.join(engine_flags)}")
    code = loop.run_steps(s, engine)
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
