"""The root cause is the first error (launcher/node/tracebacks.py, docs/architecture.md §11):
tracebacks read out of logs (milliseconds), as a log grows, ordered across processes; a real
run of a plain trainer that raises (its own error); and one real `areal-launch` run of
tests/caught_error_trainer.py under torchrun on gloo, whose rank 0 logs a caught exception and
then blocks with rank 1 in collectives, as AReaL 1.0.4's trainer did.
"""

from __future__ import annotations

import itertools
import json
import textwrap
import uuid

import pytest

from launcher.node.tracebacks import MAX_PARTIAL, FirstErrors, LogReader, parse
from tests.processes import survivors
from tests.test_local_runner import python_trainer
from tests.test_local_runner import run as run_specs
from tests.test_silent_hang import HANG_S, foreign_run

AREAL_LOG = textwrap.dedent("""\
    [AReaL] 20261203-14:26:17.617 [FSDPEngine Rank 1] INFO: step 2 done
    [AReaL] 20261203-14:26:17.618 [FSDPEngine Rank 0] INFO: step 2 done
    \x1b[31m[AReaL] 20261203-14:26:18.020 [FSDPEngine Rank 0] ERROR: update_weights failed
    Traceback (most recent call last):
      File "/src/areal/engine/fsdp_engine.py", line 812, in update_weights
        self.rollout.pause()
      File "/src/areal/core/remote_inf_engine.py", line 301, in pause
        raise RuntimeError(f"Failed after {retries} retries: {url}")
        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    RuntimeError: Failed after 3 retries: http://10.0.0.3:30000/areal_pause_generation\x1b[0m
    [AReaL] 20261203-14:26:18.021 [FSDPEngine Rank 1] INFO: waiting for the weights
""")


# ----------------------------------------------------------------------------- parsing (ms)
def test_a_caught_exception_logged_by_a_ranks_logger_is_that_ranks_with_its_last_line():
    [tb] = parse(AREAL_LOG)
    assert tb.exception == "RuntimeError: Failed after 3 retries: " + (
        "http://10.0.0.3:30000/areal_pause_generation"
    )  # its colours gone
    assert tb.where() == " (core/remote_inf_engine.py:301 in pause)"
    assert tb.rank((0, 1)) == 0 and not tb.collateral
    assert tb.lines[0] == "Traceback (most recent call last):" and len(tb.lines) == 7


def test_torchs_rank_prefixes_keep_two_ranks_tracebacks_apart_and_a_peers_is_collateral():
    text = textwrap.dedent("""\
        [rank1]: Traceback (most recent call last):
        [rank0]: Traceback (most recent call last):
        [rank1]:   File "/w/train.py", line 45, in main
        [rank0]:   File "/w/train.py", line 47, in main
        [rank1]:     raise RuntimeError(f"rank {rank} fails on purpose")
        [rank0]:     dist.all_reduce(total)
        [rank1]: RuntimeError: rank 1 fails on purpose
        W1203 14:26:35.228000 17697 torch/distributed/elastic/multiprocessing/api.py:1028] ...
        [rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer
    """)
    first, peer = parse(text)
    assert (first.exception, first.rank((0, 1)), first.collateral) == (
        "RuntimeError: rank 1 fails on purpose",
        1,
        False,
    )
    assert (peer.rank((0, 1)), peer.collateral, peer.frame.line) == (0, True, 47)


def test_torchruns_reports_log_levels_and_chained_exceptions():
    text = textwrap.dedent("""\
        Traceback (most recent call last):
          File "/w/run.py", line 9, in <module>
        INFO: a line of another writer in between
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        ============================================================
        Traceback (most recent call last):
          File "/w/a.py", line 3, in load
        KeyError: 'model'

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "/w/a.py", line 5, in load
        ValueError: no model
    """)
    report, key, value = parse(text)
    assert report.exception.endswith("ChildFailedError:") and report.collateral
    assert (key.exception, key.collateral, value.exception) == (
        "KeyError: 'model'",
        False,
        "ValueError: no model",
    )
    assert parse("Traceback (most recent call last):\n" + "noise\n" * 20 + "ValueError: x\n") == []


def test_a_processes_rank_is_its_only_one_else_the_line_says_which_it_may_be(tmp_path):
    log = tmp_path / "actor-node0.log"
    log.write_text(
        "rank 3 waits\n"
        'Traceback (most recent call last):\n  File "t.py", line 2, in f\nOSError: disk full\n'
    )
    for ranks, summary in (
        ((4, 5), "actor-node0 (one of ranks 4, 5) raised OSError: disk full (t.py:2 in f)"),
        ((4,), "rank 4 of actor-node0 raised OSError: disk full (t.py:2 in f)"),
        ((), "actor-node0 raised OSError: disk full (t.py:2 in f)"),
    ):
        reader = LogReader("actor-node0", log, ranks, 0)
        reader.read(1.0, 1 << 20, itertools.count())
        assert reader.found[0].summary() == summary  # "rank 3" names a rank not of this process


def test_a_growing_log_is_read_from_its_starts_offset_a_traceback_across_reads_included(tmp_path):
    log = tmp_path / "rollout-0.log"
    log.write_text(
        'Traceback (most recent call last):\n  File "old.py", line 1, in f\n'
        "ValueError: a past start's\n"
    )
    reader = LogReader("rollout-0", log, (), log.stat().st_size)
    with open(log, "a") as f:
        f.write('serving\nTraceback (most recent call last):\n  File "s.py", line 7, in h')
        f.flush()
        reader.read(1.0, 1 << 20, itertools.count())
        assert reader.found == []
        f.write("andle\nConnectionResetError: [Errno 104] Connection reset by peer\n")
        f.write('Traceback (most recent call last):\n  File "s.py", line 9, in g\nMemoryError\n')
        f.flush()
        reader.read(2.0, 1 << 20, itertools.count())
    assert [(p.traceback.exception, p.seen) for p in reader.found] == [
        ("ConnectionResetError: [Errno 104] Connection reset by peer", 2.0),
        ("MemoryError", 2.0),
    ]  # the first of all, and the first that is not a peer's consequence: reading stops
    assert reader.done and reader.found[0].traceback.where() == " (s.py:7 in handle)"


def test_a_line_that_never_ends_is_not_kept_whole(tmp_path):
    log = tmp_path / "actor.log"
    log.write_bytes(b"\r 50%" * 200_000)  # a progress bar's redraws, 1 MB, no newline yet
    reader = LogReader("actor", log, (0,), 0)
    reader.read(1.0, 1 << 20, itertools.count())
    assert reader.found == [] and len(reader.partial) == MAX_PARTIAL
    with open(log, "ab") as f:
        f.write(b"\nTraceback (most recent call last):\nMemoryError\n")
    reader.read(2.0, 1 << 20, itertools.count())
    assert [p.traceback.exception for p in reader.found] == ["MemoryError"]


def test_the_first_is_the_earliest_seen_before_the_failure_or_the_failing_processes_own(tmp_path):
    logs = {}
    for name, exception in (("rollout-0", "ValueError: bad"), ("actor", "OSError: gone")):
        logs[name] = tmp_path / f"{name}.log"
        logs[name].write_text(f"Traceback (most recent call last):\n{exception}\n")
    errors = FirstErrors()
    errors.follow("actor", logs["actor"], 0, (0,))
    errors.follow("rollout-0", logs["rollout-0"], 0)
    errors._next = 0.0
    errors.read()  # both seen in one read: the server's first (a trainer's follows from it)
    seen = errors.readers["actor"].found[0].seen
    assert errors.first(seen + 1, "actor").process == "rollout-0"
    assert errors.first(seen, "actor").process == "actor"  # seen after the failure: not first
    assert errors.first(seen, None) is None


# ----------------------------------------------------------------------------- real runs
def test_a_trainer_that_raises_is_named_with_its_own_exception_and_traceback(tmp_path):
    tag = uuid.uuid4().hex
    code = "def main():\n    raise ValueError('no data in /data/train')\nmain()\n"
    exit_code, status, output = run_specs([python_trainer(code, tag)], tmp_path / "run")
    assert exit_code == 1 and status["root_cause"] == "actor"
    assert status["reason"] == (
        "actor exited with code 1: rank 0 raised ValueError: no data in /data/train "
        "(<string>:2 in main)"
    ), output
    assert status["tail"][-1] == "ValueError: no data in /data/train"
    assert "its traceback:" in output and "first_error" not in status
    assert survivors(tag, tmp_path) == []


def test_a_peers_end_is_not_named_as_the_exits_own_error(tmp_path):
    tag = uuid.uuid4().hex
    code = (
        "import sys\n"
        "print('Traceback (most recent call last):', file=sys.stderr)\n"
        "print('RuntimeError: [pair.cc:553] Connection closed by peer', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    exit_code, status, _ = run_specs([python_trainer(code, tag)], tmp_path / "run")
    assert (exit_code, status["reason"]) == (1, "actor exited with code 1")
    assert status["tail"][-1].endswith("Connection closed by peer")  # its log's end, as before


@pytest.fixture(scope="module")
def caught(tmp_path_factory):
    """One run of the stand-in: rank 0's exception caught and logged, then both ranks wait."""
    folder = tmp_path_factory.mktemp("caught")
    run_dir, tag = folder / "run", uuid.uuid4().hex
    out = foreign_run("tests/caught_error_trainer.py", run_dir, tag, timeout=300)
    left = survivors(tag, folder)
    return out, run_dir, left


@pytest.mark.torch
@pytest.mark.timeout(400)
def test_the_root_cause_of_a_hang_names_rank_0s_caught_exception_then_the_hang(caught):
    out, _, _ = caught
    said = out.stdout + out.stderr
    assert out.returncode == 1, said[-4000:]
    [root] = [ln for ln in said.splitlines() if ln.startswith("root cause:")]
    first, _, then = root.partition("; then ")
    assert first == (
        "root cause: rank 0 of actor-node0 raised RuntimeError: Failed after 3 retries posting "
        "http://127.0.0.1:9/areal_pause_generation: <urlopen error [Errno 111] Connection "
        "refused> (tests/caught_error_trainer.py:44 in pause_generation)"
    ), root
    assert then.startswith(
        f"hung: no output and no work (CPU) from trainer job actor (ranks 0, 1) for {HANG_S} s"
    ), root
    # the ranks' stacks are of the wait the error led to, not of how they left it
    assert then.endswith(
        "rank 0 waits in barrier (a collective); rank 1 waits in recv (a collective)"
    ), root


@pytest.mark.torch
@pytest.mark.timeout(400)
def test_the_first_errors_traceback_is_shown_and_in_the_status(caught):
    out, run_dir, _ = caught
    said = out.stdout + out.stderr
    shown = said.split("the first error's traceback (actor-node0, also in ")[1].splitlines()
    assert shown[1:3] == ["  Traceback (most recent call last):", "    File " + shown[2][9:]]
    assert "the ranks' stacks" in said.split("the first error's traceback")[1]
    [status] = [json.loads(p.read_text()) for p in (run_dir / "status").glob("*.json")]
    first = status["first_error"]
    assert (first["process"], first["rank"], first["where"]) == (
        "actor-node0",
        0,
        "tests/caught_error_trainer.py:44 in pause_generation",
    )
    assert first["exception"].startswith("RuntimeError: Failed after 3 retries posting")
    assert first["traceback"][-1] == first["exception"]
    assert status["reason"].startswith("rank 0 of actor-node0 raised RuntimeError")


@pytest.mark.torch
@pytest.mark.timeout(400)
def test_nothing_of_the_caught_run_is_left(caught):
    _, run_dir, left = caught
    assert left == []
    assert (
        "[FSDPEngine Rank 0] ERROR: update_weights failed"
        in (run_dir / "logs" / "actor-node0.log").read_text()
    )
