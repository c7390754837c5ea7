"""When the rollout servers give their GPU memory back: around each training phase, when they
share GPUs with the trainer and rollout offload is on. Stdlib only, so it is tested without
torch against a server that records the calls it gets (tests/recording_server.py).

Order, per server: release before the training step (SGLang /release_memory_occupation, vLLM
/sleep?level=1), resume before the weight push, so the push and the next rollout find it awake.
The launcher starts the servers able to do it (SGLang --enable-memory-saver, vLLM
--enable-sleep-mode on cuda). A backend whose CPU build cannot release memory says why
(CLIENT.cpu_keeps_memory: vLLM's refuses sleep mode), so on cpu the recipe says so once and the
servers stay awake.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, TypeVar

from launcher.backends.protocol import serve_backend
from launcher.worker.runtime import RuntimePlan

T = TypeVar("T")
P = TypeVar("P")


class MemoryServer(Protocol):
    addr: str
    backend: str

    def release_memory(self) -> None: ...

    def resume_memory(self) -> None: ...


@dataclass
class RolloutPhases:
    """Switches the servers between rollout (awake) and training (memory released)."""

    servers: Sequence[MemoryServer]
    enabled: bool
    asleep: bool = field(default=False)

    @classmethod
    def from_plan(cls, rt: RuntimePlan, servers: Sequence[MemoryServer],
                  say: Callable[[str], None]) -> "RolloutPhases":
        """On when the plan's rollout and actor share GPUs and rollout offload is on; `say`
        tells why it is not where a user asked for it."""
        if not servers or not rt.offload("rollout"):
            return cls(servers, False)
        if not rt.shares_gpus("actor", "rollout"):
            say("grpo: rollout offload is on but rollout and actor do not share GPUs: "
                "the servers keep their memory")
            return cls(servers, False)
        kept = sorted({serve_backend(s.backend).CLIENT.cpu_keeps_memory for s in servers} - {""})
        if rt.device() == "cpu" and kept:
            say(f"grpo: {'; '.join(kept)}: rollout servers stay awake while the actor trains "
                "(releasing memory works on cuda)")
            return cls(servers, False)
        say(f"grpo: rollout shares GPUs with actor: {len(servers)} server(s) release their "
            "memory for every training phase")
        return cls(servers, True)

    def before_train(self) -> None:
        """Release every server's memory (no-op when off or already released)."""
        if self.enabled and not self.asleep:
            for server in self.servers:
                server.release_memory()
            self.asleep = True

    def before_push(self) -> None:
        """Take the memory back before weights are pushed and the next rollout samples."""
        if self.asleep:
            for server in self.servers:
                server.resume_memory()
            self.asleep = False

    def train_then_push(self, train: Callable[[], T], push: Callable[[T], P],
                        barrier: Callable[[], None], leader: bool) -> tuple[T, P]:
        """One step after its rollout: the leader releases the servers' memory, every rank
        trains, the leader takes the memory back, every rank pushes. The barriers keep any rank
        from training before the servers let go, or pushing before they are awake."""
        if leader:
            self.before_train()
        barrier()
        trained = train()
        if leader:
            self.before_push()
        barrier()
        return trained, push(trained)
