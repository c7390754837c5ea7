"""The memory check against peers' published configurations (tests/peer_corpus.py): none that
runs is refused, at least 90 % of the corpus agrees, every out-of-memory report is refused or
warned of, and each refusal says where and what to change.

Plan-level: each case is the plan `areal-launch plan` builds from its overrides (typed config,
placement, engines, backends' options) and the memory report of it; no engine starts.
"""

from __future__ import annotations

import pytest

from tests.corpus_check import report
from tests.peer_corpus import CASES, PEERS

WORKING = [n for n, c in CASES.items() if c.fits]
FAILING = [n for n, c in CASES.items() if not c.fits]


def test_the_corpus_has_forty_cases_from_five_peers_each_with_its_source():
    assert len(CASES) >= 40
    assert {c.peer for c in CASES.values()} == set(PEERS)
    assert all(c.source.startswith("https://github.com/") for c in CASES.values())
    assert WORKING and FAILING


@pytest.mark.parametrize("name", WORKING)
def test_a_published_working_configuration_is_not_refused(name):
    found = report(CASES[name])
    assert found.fits is True, "\n".join(p.line() for p in found.problems)


def test_every_out_of_memory_report_is_refused_or_warned_and_each_refusal_names_a_fix():
    """A refusal needs the estimate's low end to overflow: the reports it explains whatever
    the engine's kernels (`explained`) are refused, the others warned of (their high end
    overflows), none called sure (docs/benchmarks.md says which term decides each)."""
    found = {n: report(CASES[n]) for n in FAILING}
    assert all(r.sure is False for r in found.values()), [n for n, r in found.items() if r.sure]
    refused = {n: r for n, r in found.items() if r.fits is False}
    assert set(refused) == {n for n in FAILING if CASES[n].explained}
    assert len(refused) >= 2
    for name, got in found.items():
        if name not in refused:
            assert got.risks and got.risks[0].term, name
    for name, got in refused.items():
        named = [p for p in got.problems if p.engine == CASES[name].overflows]
        assert named and named[0].gpu is not None, [p.line() for p in got.problems]
        assert named[0].fix, named[0].line()
        assert named[0].low_gib is not None and named[0].low_gib > named[0].have_gib


def test_at_least_nine_in_ten_cases_agree():
    """Plan-level arithmetic, no process started: milliseconds a case (bench_memory.py)."""
    agree = [report(c).fits is c.fits for c in CASES.values()]
    assert sum(agree) >= 0.9 * len(agree), [n for n, ok in zip(CASES, agree) if not ok]
