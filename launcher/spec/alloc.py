"""Backend strings: `<backend>:<dims>` -> ModelAllocation (docs/architecture.md §3).

A small recursive-descent parser of our own: it knows the column of every token, so each
error points at the offending text and says how to fix it, and it parses a spec in a few
microseconds (the peer's Earley parser takes milliseconds and reports by scraping tracebacks).

    spec   := backend ':' (dims | hybrid)          whitespace anywhere is ignored
    dims   := (letter size)+                        each letter at most once
    hybrid := ['('] 'attn:' dims '|' 'ffn:' dims [')']   megatron, archon only
    size   := [1-9][0-9]*
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from launcher.spec import registry
from launcher.spec.errors import UserError
from launcher.spec.limits import MAX_GPUS

DIM_NAMES = {"d": "data", "t": "tensor", "p": "pipeline", "c": "context", "e": "expert"}
HYBRID_EXAMPLE = "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)"
DIGITS = "0123456789"
MAX_SIZE_DIGITS = 6  # no real grid has a million-way dim; also keeps int() off huge inputs


def known() -> str:
    """The engines' backend names, for hints (a worker's backend is named in its own key)."""
    return ", ".join(
        n for kind in (registry.SERVE, registry.TRAIN) for n in registry.backend_names(kind)
    )


def is_hybrid_backend(backend: str) -> bool:
    found = registry.find_backend(backend)
    return found is not None and found.hybrid


def example(backend: str) -> str:
    return registry.backend_facts(backend).example


class AllocationError(UserError):
    """A backend string the grammar rejects; the message names the spec, the column and a fix."""

    def __init__(self, spec: str, message: str, column: Optional[int] = None, hint: str = ""):
        self.spec, self.column, self.hint = spec, column, hint
        shown = spec if spec and spec.isprintable() else repr(spec)  # always one line
        where = f" column {column}:" if column is not None else ""
        text = f"{shown}:{where} {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


@dataclass(frozen=True)
class ModelAllocation:
    """Parallel sizes of one engine. world_size = dp*tp*pp*cp; e re-partitions experts inside it.

    For the MoE hybrid form, dp/tp/pp/cp describe attention and ep/etp/edp the FFN experts;
    `hybrid` records that the spec used that form, so `str()` gives it back the same way.
    Construction validates, so every ModelAllocation has a canonical text that parses back.
    """

    backend: str
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    edp: int = 0  # 0 -> derived: world / (pp*etp*ep)
    hybrid: bool = False

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise AllocationError(repr(self), problem[0], hint=problem[1])
        if self.edp == 0:
            object.__setattr__(self, "edp", self.world_size // (self.pp * self.etp * self.ep))

    def _problem(self) -> Optional[tuple[str, str]]:
        """Why these sizes are no valid allocation (message, hint), or None."""
        takes = registry.backend_dims(self.backend)
        if takes is None:
            return f"unknown backend {self.backend!r}", f"known: {known()}"
        sizes = (
            ("d", self.dp),
            ("t", self.tp),
            ("p", self.pp),
            ("c", self.cp),
            ("e", self.ep),
            ("etp", self.etp),
        )
        for letter, size in sizes:
            if type(size) is not int or size < 1:
                return f"{letter} must be a positive int, not {size!r}", "sizes start at 1"
            if size > 1 and letter not in takes and letter != "etp":
                return f"{self.backend} does not take {letter!r}", _not_taken(self.backend, letter)
        if self.hybrid and not is_hybrid_backend(self.backend):
            return f"{self.backend} has no attn/ffn form", "only megatron and archon do"
        if self.etp > 1 and not self.hybrid:
            return "etp > 1 needs the attn/ffn form", f"e.g. {HYBRID_EXAMPLE}"
        world, experts = self.world_size, self.pp * self.etp * self.ep
        if world > MAX_GPUS:
            return (
                f"world size {world} is more than the {MAX_GPUS} GPUs areal-launch plans for",
                "use smaller sizes",
            )
        if world % experts:
            return (
                f"pp*etp*ep ({experts}) does not divide the world size ({world})",
                "choose expert sizes whose product with pp divides dp*tp*pp*cp",
            )
        if type(self.edp) is not int or self.edp not in (0, world // experts):
            return (
                f"edp {self.edp!r} != world/(pp*etp*ep) = {world // experts}",
                "leave edp out to derive it",
            )
        return None

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def kind(self) -> str:
        """serve, train or worker: what its backend runs (launcher.spec.registry.KINDS)."""
        return registry.backend_facts(self.backend).kind

    @property
    def is_inference(self) -> bool:
        return self.kind == registry.SERVE

    def to_dict(self) -> dict:
        return {
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "cp": self.cp,
            "ep": self.ep,
            "etp": self.etp,
            "edp": self.edp,
        }

    def __str__(self) -> str:
        """Canonical text: dims in the order d p t c e, size-1 dims left out, no spaces."""
        if self.hybrid:
            attn = _dims_text((("d", self.dp), ("p", self.pp), ("t", self.tp), ("c", self.cp)))
            ffn = _dims_text((("d", self.edp), ("p", self.pp), ("t", self.etp), ("e", self.ep)))
            return f"{self.backend}:(attn:{attn}|ffn:{ffn})"
        return f"{self.backend}:" + _dims_text(
            (("d", self.dp), ("p", self.pp), ("t", self.tp), ("c", self.cp), ("e", self.ep))
        )


def _dims_text(dims: tuple[tuple[str, int], ...]) -> str:
    return "".join(f"{k}{v}" for k, v in dims if v > 1) or "d1"


def _not_taken(backend: str, dim: str) -> str:
    """Hint for a dim the backend does not take: what it does take, and who takes the dim."""
    takes = ", ".join(registry.backend_dims(backend) or "")
    kin = registry.backend_names(registry.backend_facts(backend).kind)
    others = [b for b in kin if dim in (registry.backend_dims(b) or "")]
    name = DIM_NAMES.get(dim, dim)
    if others:
        return f"{backend} takes {takes}; use {others[0]} for {name} parallel"
    trainers = ", ".join(
        b for b in registry.backend_names(registry.TRAIN) if dim in (registry.backend_dims(b) or "")
    )
    return f"{backend} takes {takes}; {name} parallel is for training backends: {trainers}"


class SpecText:
    """The spec with whitespace removed, mapping positions back to columns of what was typed."""

    __slots__ = ("spec", "s", "n", "cols")

    def __init__(self, spec: str):
        self.spec = spec
        s = "".join(spec.split())
        self.s, self.n = s, len(s)
        self.cols = (
            None if len(s) == len(spec) else [i for i, ch in enumerate(spec) if not ch.isspace()]
        )

    def column(self, pos: int) -> int:
        if self.cols is None:
            return pos
        return self.cols[pos] if pos < self.n else len(self.spec)

    def error(self, pos: Optional[int], message: str, hint: str = "") -> AllocationError:
        column = None if pos is None else self.column(pos)
        return AllocationError(self.spec, message, column, hint)

    def require_lowercase(self) -> None:
        """Uppercase is an error, not folded: the canonical text is what the user should type."""
        s = self.s
        if not s.islower():
            for k, ch in enumerate(s):
                if "A" <= ch <= "Z":
                    raise self.error(
                        k, "backend strings are lowercase", f"use lowercase: {s.lower()}"
                    )


ANONYMOUS_DIMS = "dtpce"  # what a legacy part without a backend may take (then fsdp or megatron)


def anonymous_backend(pp: int, ep: int, hybrid: bool) -> str:
    """The backend AReaL gave a legacy training part written without one: megatron for
    pipeline, expert or attn/ffn layouts, fsdp otherwise (`d4`, `[ref]:t2d2`)."""
    return "megatron" if hybrid or pp > 1 or ep > 1 else "fsdp"


def starts_anonymous(t: SpecText, i: int) -> bool:
    """A legacy part with no backend: `[name]:dims`, `d4p2`, `attn:...|ffn:...`, `(attn:...`."""
    s, n = t.s, t.n
    return i < n and (
        s[i] in "[("
        or s.startswith("attn", i)
        or (s[i] in DIM_NAMES and i + 1 < n and s[i + 1] in DIGITS)
    )


def read_component(
    t: SpecText, i: int, names: bool, own: Optional[str] = None
) -> tuple[ModelAllocation, Optional[str], int]:
    """Parse `backend[name]:dims` starting at i; return the allocation, the name, the end.

    Names (`fsdp[critic]:d4`) and parts without a backend (`[actor]:d4`, `d2p2`) exist in the
    legacy allocation_mode (`names=True`); an engine's own backend field may name that engine
    (`own`: `actor.backend=megatron[actor]:(attn:...|ffn:...)`, AReaL's named hybrid form).
    Stops at the first character that cannot continue the component ('+', '|', end).
    """
    s, n = t.s, t.n
    anonymous = names and starts_anonymous(t, i)
    j = i
    while not anonymous and j < n and "a" <= s[j] <= "z":
        j += 1
    backend = s[i:j]
    takes = ANONYMOUS_DIMS if anonymous else registry.backend_dims(backend)
    if takes is None:
        raise _unknown_backend(t, i, j, backend)
    name, j = _read_name(t, j, names, own)
    if not (anonymous and name is None and j < n and s[j] != ":"):  # else bare dims (`d4`)
        j = _read_colon(t, i, j, backend)
    if j < n and (s[j] == "(" or s.startswith("attn", j)):
        if anonymous:
            backend = anonymous_backend(1, 1, hybrid=True)
        elif not is_hybrid_backend(backend):
            raise t.error(
                j,
                f"{backend} has no attn/ffn form",
                f"only megatron and archon do, e.g. {HYBRID_EXAMPLE}",
            )
        alloc, j = _read_hybrid(t, j, backend)
        return alloc, name, j
    alloc, j = _read_plain(t, j, takes, backend, anonymous)
    return alloc, name, j


def _read_name(
    t: SpecText, j: int, names: bool, own: Optional[str] = None
) -> tuple[Optional[str], int]:
    """An engine name in brackets at j (`[critic]`): allocation_mode syntax, or in an engine's
    own backend field the name of that engine (`own`)."""
    s = t.s
    if j >= t.n or s[j] != "[":
        return None, j
    k = s.find("]", j)
    if not names and (own is None or k < 0 or s[j + 1 : k] != own):
        label = s[j : k + 1] if k >= 0 else "[actor]"
        if own is not None and k >= 0:
            raise t.error(
                j + 1,
                f"{s[j + 1 : k]!r} names another engine than {own}",
                f"write {s[:j]}[{own}]{s[k + 1 :]} or leave the name out",
            )
        raise _several_engines(t, j, f"engine names like {label!r} are allocation_mode syntax")
    if k < 0:
        raise t.error(j, "unclosed '['", "write the name as fsdp[actor]:d4")
    return s[j + 1 : k], k + 1


def _read_colon(t: SpecText, i: int, j: int, backend: str) -> int:
    """The ':' after the backend (and its name) at j; where the dims start."""
    s = t.s
    if j < t.n and s[j] == ":":
        return j + 1
    if j < t.n and s[j] == ".":
        fix = s.replace(".", ":")
        raise t.error(j, "use ':' after the backend, not '.'", f"write {fix}")
    shown = backend or s[i:j]
    raise t.error(
        j,
        f"expected ':' and dims after {shown!r}",
        f"e.g. {example(backend) if backend else 'fsdp[actor]:d4'}",
    )


def _read_plain(
    t: SpecText, j: int, takes: str, backend: str, anonymous: bool
) -> tuple[ModelAllocation, int]:
    """`(letter size)+` at j as one allocation (a legacy part without a backend: fsdp or
    megatron, as its dims say)."""
    s = t.s
    start = j
    dims, pos, j = _read_dims(t, j, takes, backend or "megatron")
    if s.startswith("|ffn", j) and (anonymous or is_hybrid_backend(backend)):
        end = s.find("+", j)
        rest = (s[j:end] if end >= 0 else s[j:]).rstrip(")") + ")"
        raise t.error(
            start,
            "the attn/ffn form needs 'attn:' before the attention dims",
            f"write {backend or 'megatron'}:(attn:{s[start:j]}{rest}",
        )
    dp, tp, pp, cp = dims.get("d", 1), dims.get("t", 1), dims.get("p", 1), dims.get("c", 1)
    ep = dims.get("e", 1)
    if anonymous:
        backend = anonymous_backend(pp, ep, hybrid=False)
    world = _bounded_world(t, start, dp * tp * pp * cp)
    if ep > 1 and world % (pp * ep):
        raise t.error(
            pos["e"],
            f"p*e ({pp * ep}) does not divide the world size d*t*p*c ({world})",
            f"choose e so that p*e divides {world}",
        )
    return ModelAllocation(backend, dp, tp, pp, cp, ep, 1, world // (pp * ep)), j


def _bounded_world(t: SpecText, pos: int, world: int) -> int:
    """World sizes are GPU counts: past MAX_GPUS nothing could place them, and building their
    rank maps would only eat memory, so they are refused here, in microseconds."""
    if world > MAX_GPUS:
        raise t.error(
            pos,
            f"world size d*t*p*c = {world} is more than the {MAX_GPUS} GPUs areal-launch plans for",
            "use smaller dims",
        )
    return world


def _read_dims(t: SpecText, i: int, takes: str, owner: str) -> tuple[dict, dict, int]:
    """Read `(letter size)+` from i; `owner` is the backend, or 'attn'/'ffn' in the hybrid form.

    A dim the backend does not take passes with size 1; in attn/ffn a foreign dim never does.
    """
    s, n = t.s, t.n
    sizes: dict[str, int] = {}
    pos: dict[str, int] = {}
    while i < n:
        ch = s[i]
        if ch not in DIM_NAMES:
            if "a" <= ch <= "z":
                raise _not_a_dim(t, i, first=not sizes)
            break
        j = k = i + 1
        while k < n and s[k] in DIGITS:
            k += 1
        if k == j:
            raise t.error(j, f"{ch!r} needs a size", f"e.g. {ch}2")
        if s[j] == "0":
            fix = s[j:k].lstrip("0")
            if not fix:
                raise t.error(
                    j, f"sizes start at 1, not {ch}{s[j:k]}", f"write {ch}1 or leave {ch} out"
                )
            raise t.error(j, f"size {s[j:k]} has a leading zero", f"write {ch}{fix}")
        if k - j > MAX_SIZE_DIGITS:
            raise t.error(j, f"size of {ch!r} is too large", "sizes are GPU counts")
        if ch in sizes:
            raise t.error(
                i, f"{ch!r} given twice, first at column {t.column(pos[ch])}", "give each dim once"
            )
        size = int(s[j:k])
        if ch not in takes and (size > 1 or owner in ("attn", "ffn")):
            if owner == "attn":
                raise t.error(
                    i, f"attn does not take {ch!r}", "e goes in the ffn part; attn takes d, t, p, c"
                )
            if owner == "ffn":
                raise t.error(
                    i, f"ffn does not take {ch!r}", "c goes in the attn part; ffn takes d, t, p, e"
                )
            raise t.error(i, f"{owner} does not take {ch!r}", _not_taken(owner, ch))
        sizes[ch], pos[ch] = size, i
        i = k
    if not sizes:
        raise t.error(
            i,
            f"expected dims after {t.s[:i]!r}",
            f"e.g. {example(owner) if registry.backend_dims(owner) else HYBRID_EXAMPLE}",
        )
    return sizes, pos, i


def _not_a_dim(t: SpecText, i: int, first: bool) -> AllocationError:
    """A letter where a dim should be: say what it most likely is."""
    s = t.s
    if s.startswith("ffn", i):
        if first:
            return t.error(i, "the attn/ffn form starts with 'attn:'", f"e.g. {HYBRID_EXAMPLE}")
        return t.error(i, "missing '|' before 'ffn'", f"e.g. {HYBRID_EXAMPLE}")
    if any(s.startswith(b, i) for b in registry.backend_names()):
        return t.error(
            i,
            "a second backend with no '+' before it",
            "allocation_mode joins engines with '+'; a backend field holds one",
        )
    return t.error(
        i, f"unknown dim {s[i]!r}", "dims are d data, t tensor, p pipeline, c context, e expert"
    )


def _read_hybrid(t: SpecText, i: int, backend: str) -> tuple[ModelAllocation, int]:
    """`(attn:...|ffn:...)`: attention grid plus the expert re-partition of the same GPUs."""
    s, n = t.s, t.n
    paren = s[i] == "("
    if paren:
        i += 1
    if not s.startswith("attn:", i):
        raise t.error(i, "expected 'attn:'", f"e.g. {HYBRID_EXAMPLE}")
    attn, _, i = _read_dims(t, i + 5, "dtpc", "attn")
    if not s.startswith("|ffn:", i):
        raise t.error(i, "expected '|ffn:' after the attn dims", f"e.g. {HYBRID_EXAMPLE}")
    ffn_at = i + 1
    ffn, fpos, i = _read_dims(t, i + 5, "dtpe", "ffn")
    if paren:
        if i >= n or s[i] != ")":
            raise t.error(i, "missing ')'", f"close the attn/ffn form: {s[:i]})")
        i += 1
    dp, tp, pp, cp = attn.get("d", 1), attn.get("t", 1), attn.get("p", 1), attn.get("c", 1)
    world = _bounded_world(t, ffn_at - 1, dp * tp * pp * cp)
    if ffn.get("p", pp) != pp:
        raise t.error(
            fpos["p"],
            f"ffn p{ffn['p']} differs from attn p{pp}",
            "p must be equal in attn and ffn; leave it out of ffn to inherit it",
        )
    ep, etp = ffn.get("e", 1), ffn.get("t", 1)
    if "d" in ffn:
        edp = ffn["d"]
    elif world % (ep * etp * pp):
        raise t.error(
            ffn_at,
            f"cannot derive expert dp: attn world_size ({world}) is not "
            f"divisible by ffn ep*tp*pp ({ep * etp * pp})",
            f"choose ffn e, t, p whose product divides {world}",
        )
    else:
        edp = world // (ep * etp * pp)
    if edp * pp * etp * ep != world:
        raise t.error(
            ffn_at,
            f"ffn world size d*p*t*e ({edp * pp * etp * ep}) differs from "
            f"attn world size d*p*t*c ({world})",
            "both parts describe the same GPUs; leave ffn d out to derive it",
        )
    return ModelAllocation(backend, dp, tp, pp, cp, ep, etp, edp, True), i


def _unknown_backend(t: SpecText, i: int, j: int, word: str) -> AllocationError:
    """The text at i is not a known backend: say what it looks like and what to write."""
    s, n = t.s, t.n
    if word in DIM_NAMES and j < n and s[j] in DIGITS:
        return t.error(i, "a backend prefix is required", "e.g. sglang:d4t2 or fsdp:d8")
    if word == "attn" or s.startswith("(", i):
        return t.error(i, "a backend prefix is required", f"e.g. {HYBRID_EXAMPLE}")
    if not word:
        found = repr(s[i]) if i < n else "the end"
        return t.error(i, f"expected a backend name, found {found}", f"known: {known()}")
    for name in registry.backend_names():
        if word.startswith(name):
            cut = i + len(name)
            return t.error(
                cut, f"unknown backend {word!r}", f"put ':' after the backend: {s[:cut]}:{s[cut:]}"
            )
    import difflib  # only on this error path

    close = difflib.get_close_matches(word, registry.backend_names(), n=1)
    guess = f"; did you mean {close[0]}?" if close else ""
    return t.error(i, f"unknown backend {word!r}", f"known: {known()}{guess}")


@dataclass(frozen=True)
class Part:
    """One part of a multi-engine string: its allocation (None for AReaL's `eval`), the name
    written in brackets, its GPU group ('|' joins a group, '+' starts the next) and column."""

    alloc: Optional[ModelAllocation]
    name: Optional[str]
    group: int
    pos: int


EVAL = "eval"  # AReaL's `+eval`: an evaluation client on CPU, no training GPUs


def read_parts(t: SpecText) -> list[Part]:
    """`part ('+'|'|' part)*`: the parts of an allocation_mode string, as written.

    The grammar only: names are not checked here (launcher.planning.legacy does that)."""
    parts: list[Part] = []
    group, i = 0, 0
    while True:
        if t.s.startswith(EVAL, i) and (i + 4 == t.n or t.s[i + 4] in "+|"):
            parts.append(Part(None, None, group, i))
            j = i + 4
        else:
            alloc, name, j = read_component(t, i, names=True)
            parts.append(Part(alloc, name, group, i))
        if j == t.n:
            return parts
        ch = t.s[j]
        if ch not in "+|":
            raise t.error(
                j, f"unexpected {ch!r}", "join parts with '+' (separate GPUs) or '|' (shared GPUs)"
            )
        if ch == "+":
            group += 1
        i = j + 1
        if i == t.n:
            raise t.error(
                i,
                f"expected a part after {ch!r}",
                "e.g. sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4",
            )


def implied_names(parts: list[Part]) -> list[Optional[str]]:
    """Each part's engine name: as written, else the first unnamed inference part is rollout
    and the first unnamed training part actor; None where a name is required (a second
    unnamed part of a kind, any unnamed part among 3 or more, `eval`)."""
    counted = [p for p in parts if p.alloc is not None]
    out: list[Optional[str]] = []
    unseen = {True: True, False: True}  # first inference / first training part still unnamed
    for p in parts:
        if p.name is not None or p.alloc is None:
            out.append(p.name)
            continue
        inference = p.alloc.is_inference
        if len(counted) >= 3 or not unseen[inference]:
            out.append(None)
        else:
            out.append("rollout" if inference else "actor")
        unseen[inference] = False
    return out


def _several_engines(t: SpecText, i: int, what: str) -> AllocationError:
    """A multi-engine allocation_mode string in a per-engine field: say which fields to set."""
    fields = "rollout.backend and actor.backend"
    try:
        parts = read_parts(t)
        named = [(n, p.alloc) for n, p in zip(implied_names(parts), parts) if p.alloc]
        if all(n is not None for n, _ in named) and named:
            texts = [f"{n}.backend={a}" for n, a in named]
            fields = (
                " and ".join((", ".join(texts[:-1]), texts[-1])) if len(texts) > 1 else texts[0]
            )
    except AllocationError:
        pass
    return t.error(
        i,
        what,
        f"this field holds one engine's backend: set {fields} separately, or use allocation_mode",
    )


def parse_backend(spec: str, engine: Optional[str] = None) -> ModelAllocation:
    """Parse one engine's backend string, e.g. `sglang:d4t2`, `megatron:(attn:d4|ffn:e2)`;
    `engine`: the engine whose field it is, which the string may name (`megatron[actor]:...`)."""
    if not isinstance(spec, str):
        raise AllocationError(repr(spec), "a backend string must be text", hint="e.g. fsdp:d8")
    t = SpecText(spec)
    if not t.n:
        raise AllocationError(
            spec, "empty backend string", hint="write <backend>:<dims>, e.g. sglang:d4t2 or fsdp:d8"
        )
    t.require_lowercase()
    s = t.s
    alloc, _, i = read_component(t, 0, names=False, own=engine)
    if i < t.n:
        ch = s[i]
        if ch in "+|":
            raise _several_engines(
                t, i, f"{ch!r} joins several engines, which is allocation_mode syntax"
            )
        if ch == ")":
            raise t.error(i, "unmatched ')'", f"write {s[:i]}")
        raise t.error(i, f"unexpected {ch!r}", f"write dims together: {s[:i]}{s[i + 1 :]}")
    return alloc
