"""The deprecated top-level `allocation_mode` string (AReaL's form), read into per-engine parts.

    mode  := group ('+' group)*          '+': separate GPUs
    group := part ('|' part)*            '|': same GPUs as the part before it (binds tighter)
    part  := backend ['[' name ']'] ':' (dims | attn/ffn form)

`sglang:d4t2+fsdp:d8` (unnamed: the first inference backend is rollout, the first training
backend actor) or `sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4`. Unlike the peer, every
part comes out with a name and a GPU group, so a colocated part always knows its partners.
"""
from __future__ import annotations

from dataclasses import dataclass

from launcher.alloc import (INFERENCE_BACKENDS, AllocationError, ModelAllocation, SpecText,
                            read_component)
from launcher.config import ENGINE_NAMES

EXAMPLE = "sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4"


@dataclass(frozen=True)
class LegacyComponent:
    """One engine of an allocation_mode; parts with the same `group` share their GPUs."""

    name: str
    alloc: ModelAllocation
    group: int


def parse_allocation_mode(text: str) -> list[LegacyComponent]:
    """Parse an allocation_mode string into named parts in the order written."""
    if not isinstance(text, str):
        raise AllocationError(repr(text), "allocation_mode must be text", hint=f"e.g. {EXAMPLE}")
    t = SpecText(text)
    if not t.n:
        raise AllocationError(text, "empty allocation_mode",
                              hint=f"e.g. sglang:d4t2+fsdp:d8 or {EXAMPLE}")
    t.require_lowercase()
    parts: list[tuple[ModelAllocation, str | None, int, int]] = []  # alloc, name, group, pos
    group, i = 0, 0
    while True:
        alloc, name, j = read_component(t, i, names=True)
        if name is not None:
            _check_name(t, i, name, alloc)
        if parts and parts[-1][2] == group:
            _check_colocated(t, i, parts[-1], alloc)
        parts.append((alloc, name, group, i))
        if j == t.n:
            break
        ch = t.s[j]
        if ch not in "+|":
            raise t.error(j, f"unexpected {ch!r}", "join parts with '+' (separate GPUs) or "
                                                   "'|' (shared GPUs)")
        if ch == "+":
            group += 1
        i = j + 1
        if i == t.n:
            raise t.error(i, f"expected a part after {ch!r}", f"e.g. {EXAMPLE}")
    return _named(t, parts)


def _check_name(t: SpecText, pos: int, name: str, alloc: ModelAllocation) -> None:
    hint = f"names: {', '.join(ENGINE_NAMES)}"
    if name not in ENGINE_NAMES:
        raise t.error(pos, f"unknown engine name {name!r}", hint)
    inference = alloc.backend in INFERENCE_BACKENDS
    if inference != (name == "rollout"):
        want = "an inference backend (sglang, vllm)" if name == "rollout" else \
            "a training backend (fsdp, megatron, archon)"
        raise t.error(pos, f"{name} needs {want}, not {alloc.backend}",
                      "rollout serves; actor, critic, ref and teacher train")


def _check_colocated(t: SpecText, pos: int, anchor: tuple, alloc: ModelAllocation) -> None:
    """Parts joined by '|' run on the same GPUs, so their world sizes must match."""
    if alloc.world_size != anchor[0].world_size:
        raise t.error(pos, f"{alloc} shares the GPUs of {anchor[0]} ('|') but needs "
                           f"{alloc.world_size} GPUs, not {anchor[0].world_size}",
                      "colocated parts need equal world sizes; use '+' for separate GPUs")


def _named(t: SpecText, parts: list) -> list[LegacyComponent]:
    """Give unnamed parts their implied names; 3+ parts must all be named."""
    if len(parts) >= 3:
        for alloc, name, _, pos in parts:
            if name is None:
                raise t.error(pos, f"with {len(parts)} parts every part needs a name",
                              f"e.g. {EXAMPLE}")
    out: list[LegacyComponent] = []
    seen: dict[str, int] = {}
    first = {True: True, False: True}  # first inference / first training part still unseen
    for alloc, name, group, pos in parts:
        inference = alloc.backend in INFERENCE_BACKENDS
        if name is None:
            if not first[inference]:
                kind, example = ("inference", "rollout") if inference else ("training", "critic")
                backend, dims = str(alloc).split(":", 1)
                raise t.error(pos, f"a second {kind} part needs a name",
                              f"e.g. {backend}[{example}]:{dims}")
            name = "rollout" if inference else "actor"
        first[inference] = False
        if name in seen:
            raise t.error(pos, f"{name} given twice, first at column {t.column(seen[name])}",
                          "each engine appears once")
        seen[name] = pos
        out.append(LegacyComponent(name, alloc, group))
    return out
