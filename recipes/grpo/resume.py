"""Checkpoints of the default recipe: saved every `recipe.save_every` steps, at the last step
and when the launcher asks; the newest complete one resumed from at start (docs/architecture.md
§11).

One checkpoint (`<run folder>/checkpoints/step_<k>/`, launcher/trainer/checkpoints.py) holds:
- the engine's state through torch.distributed.checkpoint: FSDP2's sharded model and optimizer,
  each rank writing its own shards (`__<rank>_0.distcp`, `.metadata`), reloadable on any mesh;
- the step, which is also the data position: step k's prompts and sampling seeds are a
  function of (seed, k) (recipes/grpo/reward.py make_prompts, loop.rollout), so resuming at
  k + 1 draws exactly what an uninterrupted run draws there;
- each rank's RNG states (torch CPU and CUDA, python `random`, numpy) in `rng_<rank>.pt`;
- meta.json: step, time, restart, reason, world size, seed, weight version.

save, load, requested and at_step_end are collectives: all ranks call them at the same point,
and what one rank reads from the disk (the newest checkpoint, the launcher's request) is
broadcast from rank 0, so the ranks never disagree on what to load or when to save.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from launcher.trainer import checkpoints
from launcher.trainer.checkpoints import Checkpoint
from launcher.trainer.runtime import RuntimePlan

if TYPE_CHECKING:
    from recipes.grpo.loop import Session

RNG_FILE = "rng_{rank}.pt"
# A test hook, for tests of resuming and of the launcher's restarts: on the first attempt
# (restart 0) only, rank FAIL_RANK (default 1) raises at the end of step FAIL_AFTER_STEP, after
# that step's push and its checkpoint if one was due. The restarted job runs on.
FAIL_AFTER_STEP = "GRPO_TEST_FAIL_AFTER_STEP"
FAIL_RANK = "GRPO_TEST_FAIL_RANK"
_UNSAVED: list[int] = []  # steps that were due but could not be saved (said once)


class Checkpointable(Protocol):
    """What an engine gives a checkpoint: a state dict torch.distributed.checkpoint saves and
    loads in place (collective), and how to take the loaded values back."""

    def checkpoint_state(self) -> Optional[dict[str, Any]]: ...

    def load_checkpoint_state(self, state: dict[str, Any]) -> None: ...


def rng_state() -> dict[str, Any]:
    """This process's random number generators (what sampling, dropout and init draw from)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, pos, has_gauss, gauss = numpy.random.get_state()
        state["numpy"] = (kind, torch.from_numpy(keys.copy()), pos, has_gauss, gauss)
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    numpy = sys.modules.get("numpy")
    if "numpy" in state and numpy is not None:
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        numpy.random.set_state((kind, keys.numpy(), pos, has_gauss, gauss))


def _from_rank0(value: Any) -> Any:
    box = [value if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def save(
    rt: RuntimePlan,
    engine: Checkpointable,
    step: int,
    keep: int,
    reason: str,
    extra: Optional[dict[str, Any]] = None,
) -> Optional[Path]:
    """Write step `step`'s checkpoint (staged, then renamed into place by rank 0 once every
    rank's files are written) and prune to the newest `keep`; its folder, or None when there
    is no run folder or the engine cannot checkpoint."""
    root = rt.checkpoint_dir()
    state = engine.checkpoint_state() if root else None
    if root is None or state is None:
        return None
    rank = dist.get_rank()
    staged = Path(_from_rank0(str(checkpoints.staging(root, step)) if rank == 0 else None))
    dcp.save(state, checkpoint_id=str(staged))
    torch.save(rng_state(), staged / RNG_FILE.format(rank=rank))
    dist.barrier()  # every rank's shards and RNG file are on disk before the rename
    final = None
    if rank == 0:
        meta = {"reason": reason, "world_size": dist.get_world_size(), **dict(extra or {})}
        final = str(checkpoints.commit(staged, step, restart=rt.restart(), extra=meta))
        checkpoints.prune(root, keep)
    return Path(_from_rank0(final))


def load(rt: RuntimePlan, engine: Checkpointable) -> Optional[Checkpoint]:
    """Load the newest complete checkpoint (rank 0 picks it) into the engine and this rank's
    RNG states; the checkpoint, or None when there is none (or the engine cannot load one)."""
    found = _from_rank0(rt.latest_checkpoint() if dist.get_rank() == 0 else None)
    if found is None:
        return None
    found = Checkpoint(int(found[0]), Path(found[1]))
    state = engine.checkpoint_state()
    if state is None:
        return None
    dcp.load(state, checkpoint_id=str(found.path))
    engine.load_checkpoint_state(state)
    rng = found.path / RNG_FILE.format(rank=dist.get_rank())
    if rng.is_file():  # a rank the saving run did not have starts from its seed instead
        set_rng_state(torch.load(rng, weights_only=True))
    return found


def requested(rt: RuntimePlan) -> Optional[str]:
    """The launcher's pending checkpoint request, as rank 0 read it (same on every rank)."""
    return _from_rank0(rt.checkpoint_request() if dist.get_rank() == 0 else None)


def due(step: int, last_step: int, save_every: int) -> bool:
    """Saved on its own: every `save_every` steps (0: never) and always at the last step."""
    return step == last_step or (save_every > 0 and step % save_every == 0)


def at_step_end(
    s: "Session", engine: Checkpointable, step: int, say: Callable[[str], None]
) -> None:
    """At the step boundary: save when due (save_every, the last step) or when the launcher
    asked (every rank gets rank 0's reading of the request, so all save or none), then tell
    the launcher its request is done."""
    request = requested(s.rt)
    if request or due(step, s.opts.steps, s.opts.save_every):
        s.rt.heartbeat(step, "checkpoint")
        start = time.monotonic()
        reason = "asked by the launcher" if request else "due"
        folder = save(
            s.rt,
            engine,
            step,
            s.opts.keep_checkpoints,
            reason,
            {"seed": s.opts.seed, "weight_version": s.version},
        )
        if folder is None:
            if not _UNSAVED:  # once: it holds for every step of this run
                say(
                    f"grpo: step {step}: no checkpoint ({reason}) and none after it: no run "
                    "folder, or this engine does not checkpoint"
                )
            _UNSAVED.append(step)
        else:
            if request and s.rank == 0:
                s.rt.checkpoint_request_done(request, final=step == s.opts.steps)
            say(
                f"grpo: checkpoint {shown(s.rt, folder)} saved ({reason}, "
                f"{time.monotonic() - start:.1f}s)"
            )
            if request and step != s.opts.steps:  # every rank: the launcher may stop us now
                s.rt.hold_for_stop(request, step, say)
    test_failure(s.rt, s.rank, step)


def shown(rt: RuntimePlan, folder: Path) -> str:
    """`folder` as the user finds it in the run folder (checkpoints/step_3)."""
    run_dir = rt.run_dir()
    try:
        return str(folder.relative_to(run_dir)) if run_dir else str(folder)
    except ValueError:
        return str(folder)


def test_failure(rt: RuntimePlan, rank: int, step: int) -> None:
    """The test hook (FAIL_AFTER_STEP): fail this rank at the end of step `step`, first
    attempt only."""
    if (
        rt.env.get(FAIL_AFTER_STEP) == str(step)
        and rt.env.get(FAIL_RANK, "1") == str(rank)
        and rt.restart() == 0
    ):
        raise RuntimeError(
            f"{FAIL_AFTER_STEP}={step}: rank {rank} fails on purpose at the end "
            f"of step {step} (a test hook)"
        )
