"""When the rollout servers give their GPU memory back: around each training phase, when they
share GPUs with the trainer and rollout offload is on. Stdlib only, so it is tested without
torch against a server that records the calls it gets (tests/recording_server.py).

Order, per server: release before the training step (SGLang /release_memory_occupation, vLLM
/sleep?level=1), resume before the weight push, so the push and the next rollout find it awake.
The launcher starts the servers able to do it (SGLang --enable-memory-saver, vLLM
--enable-sleep-mode on cuda). A backend whose CPU build cannot release memory says why
(its client.cpu_keeps_memory: vLLM's refuses sleep mode), so on cpu the recipe says so once and the
servers stay awake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence, TypeVar

from launcher.backends.kinds import serve_backend
from launcher.trainer.runtime import RuntimePlan

T = TypeVar("T")
P = TypeVar("P")


class MemoryServer(Protocol):
    addr: str
    backend: str

    def release_memory(self) -> None: ...

    def resume_memory(self) -> None: ...


class PhaseWorkers(Protocol):
    """Worker components that offload between phases (recipes/grpo/workers_client.py)."""

    def offload(self) -> None: ...

    def reload(self) -> int: ...


@dataclass
class RolloutPhases:
    """Switches the servers between rollout (awake) and training (memory released)."""

    servers: Sequence[MemoryServer]
    enabled: bool
    asleep: bool = field(default=False)
    workers: Optional[PhaseWorkers] = None  # worker components offloaded around training too

    @classmethod
    def from_plan(
        cls,
        rt: RuntimePlan,
        servers: Sequence[MemoryServer],
        say: Callable[[str], None],
        pol: Any = None,
        workers: Optional[PhaseWorkers] = None,
    ) -> "RolloutPhases":
        """On when the plan's rollout and actor (the policy `pol`'s serving and training
        components) share GPUs and rollout offload is on; `say` tells why it is not where a
        user asked for it."""
        train, serve = (pol.train, pol.serve) if pol is not None else ("actor", "rollout")
        if not servers or not serve or not rt.offload(serve):
            return cls(servers, False, workers=workers)
        if not rt.shares_gpus(train, serve):
            say(
                f"grpo: {serve} offload is on but {serve} and {train} do not share GPUs: "
                "the servers keep their memory"
            )
            return cls(servers, False, workers=workers)
        kept = sorted({serve_backend(s.backend).client.cpu_keeps_memory for s in servers} - {""})
        if rt.device() == "cpu" and kept:
            say(
                f"grpo: {'; '.join(kept)}: {serve} servers stay awake while {train} trains "
                "(releasing memory works on cuda)"
            )
            return cls(servers, False, workers=workers)
        say(
            f"grpo: {serve} shares GPUs with {train}: {len(servers)} server(s) release their "
            "memory for every training phase"
        )
        return cls(servers, True, workers=workers)

    def before_train(self) -> None:
        """Release every server's memory (no-op when off or already released), offload the
        workers that offload."""
        if self.workers is not None:
            self.workers.offload()
        if self.enabled and not self.asleep:
            for server in self.servers:
                server.release_memory()
            self.asleep = True

    def before_push(self) -> None:
        """Take the memory back before weights are pushed and the next rollout samples;
        reload the offloaded workers, each reload confirmed."""
        if self.workers is not None:
            self.workers.reload()
        if self.asleep:
            for server in self.servers:
                server.resume_memory()
            self.asleep = False

    def train_then_push(
        self,
        train: Callable[[], T],
        push: Callable[[T], P],
        barrier: Callable[[], None],
        leader: bool,
    ) -> tuple[T, P]:
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
