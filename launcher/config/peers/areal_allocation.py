"""AReaL's `allocation_mode` (and `multi_agent_allocation`) string, read as AReaL means it:
the engines' backends, the components beyond the built-in ones, and their shared GPUs, in our
keys (`<engine>.backend`, `components.<name>`, `cluster.component_placement`).

    mode  := group ('+' group)*          '+': separate GPUs
    group := part ('|' part)*            '|': same GPUs as the part before it (binds tighter)
    part  := [backend] ['[' name ']'] ':' (dims | attn/ffn form) | dims | 'eval'

`sglang:d4t2+fsdp:d8` (unnamed: the first inference backend is rollout, the first training
backend actor) or `sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4`. AReaL lets a training
part leave its backend out (`sglang:d4+d4`, `[actor]:d4`: megatron for pipeline, expert or
attn/ffn layouts, fsdp otherwise); here, as in `<engine>.backend`, every part names its
backend, and such a part is an error that writes the whole string out. `+eval` is an
evaluation client without GPUs.

The string names the engines of the run: `sglang:d4p2t2` is an inference-only run and `fsdp:d4`
a training-only one; engines it does not name are off. Unlike the peer, every part comes out
with a name and a GPU group, so a colocated part always knows its partners.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from launcher.config.peers import Context, Translation
from launcher.config.peers.edit import get, put, take
from launcher.config.peers.rlinf import WORKERS
from launcher.spec import registry
from launcher.spec.alloc import (
    AllocationError,
    ModelAllocation,
    Part,
    SpecText,
    implied_names,
    parse_backend,
    read_parts,
    starts_anonymous,
)
from launcher.spec.builtins import ENGINES
from launcher.spec.errors import ConfigError

EXAMPLE = "sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4"
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class LegacyComponent:
    """One engine of an allocation_mode; parts with the same `group` share their GPUs."""

    name: str
    alloc: ModelAllocation
    group: int


@dataclass(frozen=True)
class AllocationMode:
    """The engines an allocation_mode names, and whether it asked for an evaluation client
    (`+eval`: servers only, no training engine)."""

    components: tuple[LegacyComponent, ...]
    evaluation: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components)


def parse_allocation_mode(text: str) -> list[LegacyComponent]:
    """Parse an allocation_mode string into named parts in the order written."""
    return list(read_allocation_mode(text).components)


def read_allocation_mode(text: str) -> AllocationMode:
    """Parse an allocation_mode string (AllocationError, with the column, for what is wrong)."""
    if not isinstance(text, str):
        raise AllocationError(repr(text), "allocation_mode must be text", hint=f"e.g. {EXAMPLE}")
    t = SpecText(text)
    if not t.n:
        raise AllocationError(
            text, "empty allocation_mode", hint=f"e.g. sglang:d4t2+fsdp:d8 or {EXAMPLE}"
        )
    t.require_lowercase()
    parts = read_parts(t)
    evaluation = any(p.alloc is None for p in parts)
    for prev, part in zip([None, *parts], parts):
        if part.alloc is None:
            continue
        if part.name is not None:
            _check_name(t, part)
        if prev is not None and prev.group == part.group:
            _check_colocated(t, prev, part)
    named = AllocationMode(_named(t, parts), evaluation)
    _refuse_bare_dims(t, parts)
    return named


def _refuse_bare_dims(t: SpecText, parts: list[Part]) -> None:
    """Every allocation string names its backend, here as in `<engine>.backend`: a part
    without one (`d4`, `[actor]:d4`, `attn:...|ffn:...`, AReaL's implied fsdp or megatron)
    is an error whose fix is the whole string with each backend written in."""
    bare = [p for p in parts if p.alloc is not None and starts_anonymous(t, p.pos)]
    if not bare:
        return
    fixed = t.s
    for part in reversed(bare):
        assert part.alloc is not None
        insert = part.alloc.backend + ("" if t.s[part.pos] == "[" else ":")
        fixed = fixed[: part.pos] + insert + fixed[part.pos :]
    raise t.error(
        bare[0].pos,
        "a backend prefix is required (bare dims are no longer "
        f"read as {bare[0].alloc.backend if bare[0].alloc else 'fsdp'})",
        f"write allocation_mode={fixed}",
    )


def _check_name(t: SpecText, part: Part) -> None:
    """A built-in engine's name fits its kind; any other name (AReaL's multi-agent
    `vllm[rollout1]:d2t2 + fsdp[actor1]:d4`) is a component of the part's kind."""
    assert part.alloc is not None and part.name is not None
    if part.name not in ENGINES:
        if not _NAME.match(part.name) or part.name in WORKERS:
            raise t.error(
                part.pos,
                f"{part.name!r} cannot name an engine",
                "lowercase letters, digits and _, starting with a letter, not a "
                f"worker's name ({', '.join(WORKERS)})",
            )
        return
    if part.alloc.is_inference != (part.name == "rollout"):
        kind = registry.SERVE if part.name == "rollout" else registry.TRAIN
        want = (
            f"{'an' if kind == registry.SERVE else 'a'} {registry.KIND_WORDS[kind]} backend "
            f"({', '.join(registry.backend_names(kind))})"
        )
        raise t.error(
            part.pos,
            f"{part.name} needs {want}, not {part.alloc.backend}",
            "rollout serves; actor, critic, ref and teacher train",
        )


def _check_colocated(t: SpecText, anchor: Part, part: Part) -> None:
    """Parts joined by '|' run on the same GPUs, so their world sizes must match."""
    if anchor.alloc is None or part.alloc is None:
        raise t.error(
            part.pos, "eval takes no GPUs and shares them with nothing", "join eval with '+'"
        )
    if part.alloc.world_size != anchor.alloc.world_size:
        raise t.error(
            part.pos,
            f"{part.alloc} shares the GPUs of {anchor.alloc} ('|') but "
            f"needs {part.alloc.world_size} GPUs, not "
            f"{anchor.alloc.world_size}",
            "colocated parts need equal world sizes; use '+' for separate GPUs",
        )


def _named(t: SpecText, parts: list[Part]) -> tuple[LegacyComponent, ...]:
    """Give unnamed parts their implied names; 3+ parts must all be named."""
    out: list[LegacyComponent] = []
    seen: dict[str, int] = {}
    counted = sum(1 for p in parts if p.alloc is not None)
    for part, name in zip(parts, implied_names(parts)):
        if part.alloc is None:
            continue
        if name is None:
            if counted >= 3:
                raise t.error(
                    part.pos, f"with {counted} parts every part needs a name", f"e.g. {EXAMPLE}"
                )
            kind, example = (
                ("inference", "rollout") if part.alloc.is_inference else ("training", "critic")
            )
            backend, dims = str(part.alloc).split(":", 1)
            raise t.error(
                part.pos, f"a second {kind} part needs a name", f"e.g. {backend}[{example}]:{dims}"
            )
        if name in seen:
            raise t.error(
                part.pos,
                f"{name} given twice, first at column {t.column(seen[name])}",
                "each engine appears once",
            )
        seen[name] = part.pos
        out.append(LegacyComponent(name, part.alloc, part.group))
    return tuple(out)


# ----------------------------------------------------------------------------- translation
def apply_allocation_mode(
    text: str,
    texts: dict[str, Optional[str]],
    placement: dict[str, Any],
    explicit: frozenset[str],
    warnings: list[str],
    key: str = "allocation_mode",
) -> tuple[dict[str, Optional[str]], dict[str, Any], dict[str, tuple[str, Optional[str]]]]:
    """The engines' backend texts and placement with `allocation_mode` applied, and the
    engines it names beyond the built-in ones: name -> (kind, the serving engine it feeds).

    The string names the engines of the run: they get its backends, every other engine is
    off; an `<engine>.backend` set on the command line wins over both. Parts joined by '|'
    share GPUs: a group holding rollout and a trainer is placed on the first GPUs (a group of
    trainers only is where the default placement puts it already). Names beyond the built-in
    ones are AReaL's several policies (`multi_agent_allocation`): each training part feeds the
    serving part of the same number (actor2 -> rollout2), else the serving part written at
    the same position among serving parts. The warning spells the equivalent in our keys.
    """
    try:
        mode = read_allocation_mode(text)
    except AllocationError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    named = {c.name: c for c in mode.components}
    out: dict[str, Optional[str]] = {}
    for name in ENGINES:
        if f"{name}.backend" in explicit or name in explicit:
            out[name] = texts[name]
            if name in named:
                warnings.append(
                    f"{name}.backend={texts[name]} wins over {key}'s {named[name].alloc}"
                )
        else:
            out[name] = str(named[name].alloc) if name in named else None
    extra = [c for c in mode.components if c.name not in ENGINES]
    more = _policies(extra)
    out.update({c.name: str(c.alloc) for c in extra})
    shared = _shared(mode, out, placement)
    if mode.evaluation:
        warnings.append(
            f"{key}'s '+eval' is an evaluation client without GPUs: "
            "the run starts the servers; point your evaluation at them"
        )
    warnings.append(f"{key} is deprecated: write " + " ".join(_in_our_keys(out, more, shared)))
    return out, {**placement, **shared}, more


def _shared(
    mode: AllocationMode, out: dict[str, Optional[str]], placement: dict[str, Any]
) -> dict[str, Any]:
    """The placement of each '|' group holding rollout and a trainer: the first GPUs (a group
    of trainers only is where the default placement puts it already)."""
    shared: dict[str, Any] = {}
    groups: dict[int, list[str]] = {}
    for c in mode.components:
        groups.setdefault(c.group, []).append(c.name)
    placed = {n.strip() for k, v in placement.items() if v is not None for n in k.split(",")}
    for members in groups.values():
        free = [n for n in members if n not in placed and out.get(n) is not None]
        if "rollout" in free and len(free) > 1:
            size = parse_backend_world(out["rollout"])
            shared[",".join(free)] = f"0-{size - 1}"
    return shared


def _in_our_keys(
    out: dict[str, Optional[str]],
    more: dict[str, tuple[str, Optional[str]]],
    shared: dict[str, Any],
) -> list[str]:
    """The overrides of our keys that say what the string says."""
    words = [
        f"{n}.backend={out[n]}" if out[n] is not None else f"{n}=none"
        for n in ENGINES
        if out[n] is not None or n in ("rollout", "actor")
    ]
    for name, (kind, fed) in more.items():
        words += [f"+components.{name}.kind={kind}", f"+components.{name}.backend={out[name]}"]
        words += [f"+components.{name}.feeds={fed}"] if fed else []
    words += [
        f"cluster.component_placement.{n}={v}" for k, v in shared.items() for n in k.split(",")
    ]
    return words


def _policies(parts: list[LegacyComponent]) -> dict[str, tuple[str, Optional[str]]]:
    """name -> (kind, the serving part a training part feeds)."""
    serving = [c.name for c in parts if c.alloc.is_inference]
    training = [c.name for c in parts if not c.alloc.is_inference]
    by_number = {_number(n): n for n in serving if _number(n)}
    out: dict[str, tuple[str, Optional[str]]] = {n: (registry.SERVE, None) for n in serving}
    for i, name in enumerate(training):
        fed = by_number.get(_number(name)) if _number(name) else None
        if fed is None and i < len(serving):
            fed = serving[i]
        out[name] = (registry.TRAIN, fed)
    return out


def _number(name: str) -> str:
    return re.sub(r"^.*?(\d*)$", r"\1", name)


def parse_backend_world(text: Optional[str]) -> int:
    return parse_backend(str(text)).world_size


# ----------------------------------------------------------------------------- into ours
KEYS = ("allocation_mode", "multi_agent_allocation")  # the same string under two names


def translate(job: Any, context: Context, out: Translation) -> None:
    """The string, where given, as our engines' backends, declared components and shared
    placement in `job`; an engine's backend set on the command line wins."""
    given = [(key, str(v)) for key in KEYS if (v := take(job, key))]
    if len(given) > 1:
        raise ConfigError(
            "allocation_mode and multi_agent_allocation are both set: keep one "
            "(multi_agent_allocation is AReaL's name for the same string)"
        )
    if not given:
        return
    key, text = given[0]
    texts: dict[str, Optional[str]] = {name: get(job, f"{name}.backend") for name in ENGINES}
    placement = dict(get(job, "cluster.component_placement") or {})
    texts, placement, more = apply_allocation_mode(
        text, texts, placement, explicit_keys(context.overrides), out.warnings, key
    )
    for name in ENGINES:
        put(job, f"{name}.backend", texts[name], key)
    for name in (n for n in texts if n in more):  # in the order written: placed in that order
        kind, fed = more[name]
        component: dict[str, Any] = {"kind": kind, "backend": texts[name]}
        if fed is not None:
            component["feeds"] = fed
        put(job, f"components.{name}", {**component, **(get(job, f"components.{name}") or {})}, key)
    put(job, "cluster.component_placement", placement, key)


def explicit_keys(overrides: Sequence[str]) -> frozenset[str]:
    """Keys the user set on the command line (`rollout.backend=...`, `rollout=sglang`)."""
    keys = set()
    for o in overrides:
        key = o.lstrip("+~").partition("=")[0].strip()
        keys.add(key)
        if "." not in key:
            keys.add(f"{key}.backend")  # a group choice sets the backend too
    return frozenset(keys)
