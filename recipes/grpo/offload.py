"""actor.offload.*: the actor's weights, optimizer state and gradients go to host memory
between training phases (while the rollout servers sample on the same GPUs) and come back
before the next step.

On cpu everything already lives in host memory: a no-op, said once. Gradients are freed at the
end of every step (zero_grad(set_to_none=True)), so `grad` has something to move only where a
recipe keeps gradients across phases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from launcher.trainer.runtime import RuntimePlan


@dataclass
class HostOffload:
    """What to move out of the GPU between phases, and the GPU to bring it back to."""

    model: torch.nn.Module
    optim: torch.optim.Optimizer
    device: torch.device
    weight: bool = False
    optimizer: bool = False
    grad: bool = False

    @classmethod
    def from_plan(
        cls,
        rt: RuntimePlan,
        model: torch.nn.Module,
        optim: torch.optim.Optimizer,
        device: torch.device,
        say: Callable[[str], None],
        engine: str = "actor",
    ) -> "HostOffload":
        asked = rt.offload(engine) or {}
        flags = {k: bool(asked.get(k)) for k in ("weight", "optimizer", "grad")}
        if any(flags.values()) and device.type != "cuda":
            on = ", ".join(f"{engine}.offload.{k}" for k, v in flags.items() if v)
            say(
                f"grpo: {on}: nothing to do on {device.type}, the {engine} already lives in "
                "host memory"
            )
            return cls(model, optim, device)
        return cls(model, optim, device, **flags)

    def _move(self, to: torch.device) -> None:
        if self.weight:
            self.model.to(to)  # FSDP2 moves the sharded parameters
        if self.optimizer:
            for state in self.optim.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor) and key != "step":
                        state[key] = value.to(to, non_blocking=True)
        if self.grad:
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad = p.grad.to(to, non_blocking=True)

    def offload(self) -> None:
        if self.weight or self.optimizer or self.grad:
            self._move(torch.device("cpu"))
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def reload(self) -> None:
        if self.weight or self.optimizer or self.grad:
            self._move(self.device)
            torch.cuda.synchronize()
