"""Run the peer corpus through the plan and the memory check (tests/test_memory_corpus.py)."""

from __future__ import annotations

from launcher.backends.memory_inputs import plan_memory
from launcher.memory.capacity import resolve_capacity
from launcher.memory.estimate import MemoryReport
from launcher.planning.build import build_plan
from tests.peer_corpus import Case, model_shape
from tests.plans import config


def report(case: Case) -> MemoryReport:
    """The plan's memory report for a case, as `areal-launch plan` builds it (no engine)."""
    cluster = {
        "cluster.device": "cuda",
        "cluster.num_nodes": case.nodes,
        "cluster.gpus_per_node": case.gpus_per_node,
        "cluster.gpu_type": case.gpu,
    }
    planned = build_plan(config(**{**cluster, **case.overrides}), local_gpus=0)
    capacity = resolve_capacity("cuda", None, case.gpu, detect=False)
    assert capacity.gib is not None, case.gpu
    return plan_memory(planned.plan, planned.engines, model_shape(case.model), capacity.gib)


if __name__ == "__main__":
    from tests.peer_corpus import CASES

    for name, case in CASES.items():
        try:
            r = report(case)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: ERROR {type(e).__name__}: {e}")
            continue
        ok = "ok " if r.fits is case.fits else "BAD"
        peak = max(g.total_gib for g in r.groups)
        print(
            f"{ok} {name}: fits={r.fits} want={case.fits} peak {peak} / {r.capacity_gib} "
            f"(margin {r.margin_gib})"
        )
        if r.fits is not case.fits:
            for p in r.problems[:2]:
                print("     ", p.line())
            for n, e in r.engines.items():
                print(
                    "     ",
                    n,
                    e.spec,
                    e.per_gpu_gib,
                    e.released_gib,
                    {k: v for k, v in e.parts.items() if v},
                )
