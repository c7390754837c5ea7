"""What a trainer moves to host memory between phases: one type for the config that says it
(`<engine>.offload.*`), the plan that carries it and the memory model that counts it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(unsafe_hash=True)  # not frozen: Hydra overrides its fields (actor.offload.weight=true)
class Offload:
    """Between the train and rollout phases (collocated runs): it frees the GPU for a rollout
    engine that shares it, and comes back before the train phase, so the train peak is
    unchanged."""

    weight: bool = False
    optimizer: bool = False
    grad: bool = False

    @property
    def any(self) -> bool:
        return self.weight or self.optimizer or self.grad
