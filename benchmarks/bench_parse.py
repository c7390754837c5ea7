"""How fast is a backend string parsed? (goal: <= 20 µs per spec; the peer takes ~27 ms)

Times `parse_backend` over thousands of distinct specs (plain and MoE hybrid, random dim order
and spacing), so no cache could answer; there is none, every call is a full parse. Also times
the error path and `parse_allocation_mode`. For a ratio in the same run, parses the same specs
with an Earley grammar in Lark (the peer's approach), once with the parser built ahead and
once built per call as the peer does; skipped when lark is not installed.

    .venv/bin/python benchmarks/bench_parse.py [--specs 4000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.config.peers.areal_allocation import parse_allocation_mode
from launcher.spec import registry
from launcher.spec.alloc import AllocationError, parse_backend

# Our own Earley grammar for the same language (parse only: no validation, so it is flattered).
EARLEY_GRAMMAR = r"""
    start: BACKEND ":" (dims | hybrid)
    hybrid: "("? "attn" ":" dims "|" "ffn" ":" dims ")"?
    dims: DIM+
    DIM: /[dtpce][1-9][0-9]*/
    BACKEND: "sglang" | "vllm" | "fsdp" | "megatron" | "archon"
    %import common.WS
    %ignore WS
"""

INVALID = [
    "fsdp:d4p2",
    "d4t2",
    "sglang.d4t2",
    "sglang:d4+fsdp:d8",
    "FSDP:d8",
    "deepspeed:d8",
    "fsdp:d04",
    "megatron:attn:d8|ffn:e3t2",
    "megatron:d2e3",
    "",
    "fsdp:d4d2",
    "sglan:d4",
]


BACKEND_DIMS = {name: registry.backend_dims(name) or "" for name in registry.backend_names()}


def specs(count: int, rnd: random.Random) -> list[str]:
    """Distinct valid specs: a third MoE hybrid, the rest plain; shuffled dims, some spaces."""
    out: set[str] = set()
    while len(out) < count:
        backend = rnd.choice(sorted(BACKEND_DIMS))
        sizes = [1, 2, 2, 4, 8, 16]
        if backend in ("megatron", "archon") and rnd.random() < 0.5:
            d, p, t, c = (rnd.choice(sizes) for _ in range(4))
            e = rnd.choice([k for k in (1, 2, 4, 8) if (d * t * c) % k == 0])
            attn = f"d{d}p{p}t{t}c{c}"
            forms = [f"(attn:{attn}|ffn:e{e})", f"attn:{attn}|ffn:p{p}e{e}"]
            text = f"{backend}:" + rnd.choice(forms)
        else:
            dims = [f"{k}{rnd.choice(sizes)}" for k in BACKEND_DIMS[backend] if k != "e"]
            rnd.shuffle(dims)
            text = f"{backend}:" + "".join(dims[: rnd.randint(1, len(dims))])
            if backend in ("megatron", "archon") and rnd.random() < 0.3:
                text += "e1"
        if rnd.random() < 0.2:
            text = text.replace(":", " : ", 1)
        try:
            parse_backend(text)
        except AllocationError:
            continue
        out.add(text)
    return sorted(out, key=lambda _: rnd.random())


def per_call_us(fn, items: list[str], repeat: int) -> float:
    """Best of `repeat` passes over all items, in microseconds per item."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for item in items:
            fn(item)
        best = min(best, time.perf_counter() - start)
    return best / len(items) * 1e6


def rejecting(fn):
    def call(text: str) -> None:
        try:
            fn(text)
        except AllocationError:
            pass

    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--specs", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rnd = random.Random(1)
    valid = specs(args.specs, rnd)
    hybrid = [s for s in valid if "attn" in s]
    plain = [s for s in valid if "attn" not in s]
    modes = [
        f"{a}+{b}"
        for a, b in zip(
            (s for s in plain if s.startswith(("sglang", "vllm"))),
            (s for s in plain if s.startswith("fsdp")),
        )
    ]
    rows = [
        ("parse_backend, all specs", per_call_us(parse_backend, valid, args.repeat), len(valid)),
        ("parse_backend, plain", per_call_us(parse_backend, plain, args.repeat), len(plain)),
        ("parse_backend, MoE hybrid", per_call_us(parse_backend, hybrid, args.repeat), len(hybrid)),
        (
            "parse_backend, rejected specs",
            per_call_us(rejecting(parse_backend), INVALID * 50, args.repeat),
            len(INVALID) * 50,
        ),
        (
            "parse_allocation_mode, 2 parts",
            per_call_us(parse_allocation_mode, modes, args.repeat),
            len(modes),
        ),
    ]
    ours = rows[0][1]
    try:
        from lark import Lark
    except ImportError:
        Lark = None
    if Lark is not None:
        earley = Lark(EARLEY_GRAMMAR, parser="earley", ambiguity="explicit")
        rows.append(
            (
                "Lark Earley, parser built once",
                per_call_us(earley.parse, valid, args.repeat),
                len(valid),
            )
        )
        few = valid[:100]
        rows.append(
            (
                "Lark Earley, parser built per call (peer)",
                per_call_us(
                    lambda s: Lark(EARLEY_GRAMMAR, parser="earley", ambiguity="explicit").parse(s),
                    few,
                    1,
                ),
                len(few),
            )
        )
    print(f"{'case':45s} {'specs':>6s} {'µs/spec':>10s} {'x ours':>8s}")
    for name, us, n in rows:
        print(f"{name:45s} {n:6d} {us:10.2f} {us / ours:8.2f}")


if __name__ == "__main__":
    main()
