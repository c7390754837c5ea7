"""The built-in engines, as data: what each one is, so that code reads a fact, never a name.

A run may have these engines under their own top-level keys (`rollout.backend`, ...), beside
the components a user declares (`components.<name>`). Everything that differs between them is
a field here: placement, sizing, memory and rendering read the field (docs/architecture.md §12).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from launcher.spec.registry import SERVE, TRAIN


@dataclass(frozen=True)
class Builtin:
    """One built-in engine.

    policy: the trainer the others fall back to (an empty backend is its backend) and the one
    sized first beside the primary server. feeds: the serving engine its weights go to.
    inherits: an empty backend means the policy's backend and options, and it shares the
    policy's GPUs when their world sizes match. trainable: it has gradients and optimizer
    state (else it only runs forwards). value_head: it trains a value head (a critic).
    on_when_placed: off by default, on (with the policy's backend) once it is placed.
    serves: a serving backend makes it a serving component instead (a teacher on vLLM: servers
    that score the samples' tokens, frozen, so no weight sync feeds them).
    """

    name: str
    kind: str
    letter: str  # in the GPU map
    color: str  # in the SVG map
    primary: bool = False  # the serving engine the policy feeds
    policy: bool = False
    feeds: Optional[str] = None
    inherits: bool = False
    trainable: bool = True
    value_head: bool = False
    on_when_placed: bool = False
    serves: bool = False

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds it may be, its own first."""
        return (self.kind, SERVE) if self.serves else (self.kind,)


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin("rollout", SERVE, "R", "#2e9d5b", primary=True),
        Builtin("actor", TRAIN, "A", "#3b7dd8", policy=True, feeds="rollout"),
        Builtin("critic", TRAIN, "C", "#b04fc4", inherits=True, value_head=True),
        Builtin("ref", TRAIN, "F", "#d08a00", inherits=True, trainable=False),
        Builtin("teacher", TRAIN, "T", "#1a9fae", inherits=True, trainable=False, serves=True),
        Builtin(
            "inference",
            TRAIN,
            "I",
            "#8a6d3b",
            inherits=True,
            trainable=False,
            on_when_placed=True,
        ),
    )
}
ENGINES = tuple(BUILTINS)  # engine order, everywhere
INHERITING = tuple(n for n, b in BUILTINS.items() if b.inherits)
ON_WHEN_PLACED = tuple(n for n, b in BUILTINS.items() if b.on_when_placed)
POLICY = next(n for n, b in BUILTINS.items() if b.policy)
PRIMARY = next(n for n, b in BUILTINS.items() if b.primary)


def builtin_kind(name: str, backend_kind: Optional[str] = None) -> Optional[str]:
    """The kind of built-in engine `name` (None for any other name): its own, or `backend_kind`
    (the kind of the backend it runs) where it may be that one (a served teacher)."""
    found = BUILTINS.get(name)
    if found is None:
        return None
    return backend_kind if backend_kind in found.kinds else found.kind


def builtin_kinds(name: str) -> tuple[str, ...]:
    """The kinds built-in engine `name` may be (its own first); () for any other name."""
    found = BUILTINS.get(name)
    return found.kinds if found else ()
