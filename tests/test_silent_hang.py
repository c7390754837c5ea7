"""The hang watchdog for entry points that write no heartbeats (launcher/node/silence.py,
docs/architecture.md §11): the decision over samples (ms), the ranks and stacks read from real
processes (a stand-in torchrun that ends the other ranks as soon as one ends, as torchrun does),
and two real `areal-launch` runs of tests/silent_trainer.py under torchrun on gloo: a rank that
ended while its peer waits on (with one restart), and ranks silent in a sleep.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from launcher.node.silence import ENDED, SILENT, Job, RankSample, Sample, SilentWatch, Tracker
from launcher.node.watchdog import foreign_stacks
from tests.areal_launch import run
from tests.processes import survivors, wait_until

T = 10.0  # hang_timeout_s of the decision's cases


def sample(at: float, output: int = 0, waiting: bool = False, **cpu: int) -> Sample:
    """cpu: r<rank>=ticks for each live rank (pid 100+rank)."""
    return Sample(
        at,
        output,
        tuple(RankSample(int(k[1:]), 100 + int(k[1:]), v) for k, v in cpu.items()),
        waiting,
    )


def verdicts(tracker: Tracker, *samples: Sample) -> list:
    return [tracker.observe(s) for s in samples]


def test_no_rank_yet_is_never_hung():
    assert verdicts(Tracker(T), sample(0), sample(5), sample(50)) == [None, None, None]


def test_still_output_and_cpu_for_the_timeout_is_silent_naming_the_live_ranks():
    got = verdicts(
        Tracker(T), sample(0, r0=5, r1=7), sample(9.9, r0=5, r1=7), sample(10, r0=5, r1=7)
    )
    assert got[:2] == [None, None]
    assert (got[2].kind, got[2].running, got[2].for_s) == (SILENT, (0, 1), 10)


@pytest.mark.parametrize(
    "moved",
    [
        sample(6, output=1, r0=5, r1=7),  # the log grew
        sample(6, r0=5, r1=7 + 60),  # one rank's tree worked: 10 % of a core for 6 s
        sample(6, r0=5, r1=7, waiting=True),  # a server is not healthy yet: its deadline counts
    ],
    ids=["output", "cpu", "waiting-for-a-server"],
)
def test_any_progress_restarts_the_silence_clock(moved):
    tracker = Tracker(T)
    same = [Sample(t, moved.output, moved.ranks) for t in (15.9, 16)]  # nothing moves after
    got = verdicts(tracker, sample(0, r0=5, r1=7), moved, *same)
    assert got[:3] == [None, None, None] and got[3].kind == SILENT


def test_a_rank_that_only_idles_is_silent_a_working_one_is_not():
    """Blocked in a collective, a rank's background threads still tick (AReaL's ranks: ~0.5 %
    of a core); under IDLE_SHARE of one core since the last progress is no progress."""
    idling = [sample(t, r0=5 + int(t), r1=7 + int(t)) for t in (4, 9.9, 10)]  # 1 % of a core
    got = verdicts(Tracker(T), sample(0, r0=5, r1=7), *idling)
    assert got[:3] == [None] * 3 and (got[3].kind, got[3].running) == (SILENT, (0, 1))
    working = [sample(t, r0=5, r1=7 + 50 * int(t)) for t in (4, 9.9, 10)]  # rank 1: 50 %
    assert verdicts(Tracker(T), sample(0, r0=5, r1=7), *working) == [None] * 4


def test_a_rank_that_ended_while_the_others_run_on_is_hung_after_the_timeout():
    tracker = Tracker(T)
    busy = [sample(t, output=int(t), r1=int(t)) for t in (4, 13.9)]  # rank 1 busy: not silent
    got = verdicts(
        tracker,
        sample(0, r0=1, r1=1),
        sample(3, output=3, r0=2, r1=3),
        *busy,
        sample(14, output=14, r1=14),
    )
    assert got[:4] == [None] * 4
    assert (got[4].kind, got[4].ended, got[4].running, got[4].for_s) == (ENDED, (0,), (1,), 10)
    assert tracker.pids == {0: 100, 1: 101}


def test_a_rank_that_ended_before_the_first_look_is_one_of_the_job_that_never_came():
    tracker = Tracker(T)
    first = Sample(0, 0, (RankSample(1, 101, 1),), expected=(0, 1))
    later = [Sample(t, int(t), (RankSample(1, 101, int(t)),), expected=(0, 1)) for t in (9, 10)]
    got = verdicts(tracker, first, *later)
    assert got[:2] == [None, None] and (got[2].kind, got[2].ended) == (ENDED, (0,))
    # a rank torchrun starts a moment later is not one that ended
    tracker = Tracker(T)
    both = Sample(1, 1, (RankSample(0, 100, 1), RankSample(1, 101, 1)), expected=(0, 1))
    assert verdicts(tracker, first, both) == [None, None] and tracker.ended_at == {}


def test_every_rank_ended_is_left_to_the_supervisor_and_a_rank_back_is_running_again():
    tracker = Tracker(T)
    assert verdicts(tracker, sample(0, r0=1, r1=1), sample(1), sample(30)) == [None] * 3
    tracker = Tracker(T)
    again = Sample(8, 8, (RankSample(0, 200, 0), RankSample(1, 101, 8)))  # a new rank 0
    assert (
        verdicts(
            tracker,
            sample(0, r0=1, r1=1),
            sample(4, output=4, r1=4),
            again,
            sample(12, output=12, r0=0, r1=12),
        )
        == [None] * 4
    )
    assert tracker.ended_at == {}


# ----------------------------------------------------------------------------- real processes
STAND_IN = textwrap.dedent("""
    # a stand-in torchrun: two ranks (RANK, LOCAL_RANK set); when one ends, it ends the other
    import os, subprocess, sys, time
    code = sys.argv[1]
    ranks = [subprocess.Popen([sys.executable, "-c", code],
                              env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r)})
             for r in (0, 1)]
    while all(p.poll() is None for p in ranks):
        time.sleep(0.05)
    for p in ranks:
        p.terminate()
""")
RANK = textwrap.dedent("""
    import os, subprocess, sys, time
    def idle_in_rank():
        time.sleep(600)
    if os.environ["RANK"] == "1":  # a helper of rank 1 burns CPU: rank 1's tree is busy
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
    print("rank", os.environ["RANK"], "up", flush=True)
    idle_in_rank()
""")


@pytest.fixture
def stand_in(tmp_path):
    """A stand-in torchrun with two ranks, its log, and a cleanup that leaves nothing."""
    log = tmp_path / "job.log"
    tag = uuid.uuid4().hex
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "TEST_RUN_TAG": tag}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", STAND_IN, RANK], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    assert wait_until(lambda: log.read_text().count(" up") == 2, 30), log.read_text()
    yield proc, log
    for pid in survivors(tag, tmp_path):
        os.kill(pid, 9)
    proc.kill()
    proc.wait()


def test_the_watch_finds_the_ranks_counts_their_trees_cpu_and_stands_down_for_heartbeats(stand_in):
    proc, log = stand_in
    job = Job("actor", (proc.pid,), (log,))
    watch = SilentWatch(0.5)
    got = []
    for _ in range(15):  # 1.5 s, three times the timeout
        watch._next = 0.0  # each call samples
        got.append(watch.check([job], set, waiting=False))
        time.sleep(0.1)
    tracker = watch.trackers["actor"]
    assert set(tracker.pids) == {0, 1} and proc.pid not in tracker.pids.values()
    # rank 0 idles, but rank 1's helper (a child, RANK inherited) burns CPU in rank 1's tree:
    # the job is not silent
    assert got == [None] * 15 and tracker.cpu[1] > tracker.cpu[0] + 50
    watch.rearm()
    watch._next = 0.0
    assert watch.check([job], lambda: {tracker.pids[0]}, waiting=False) is None
    assert watch.reporting == {"actor"} and watch.trackers == {}


def test_foreign_stacks_come_one_rank_at_a_time_while_their_torchrun_is_stopped(
    stand_in, monkeypatch
):
    proc, log = stand_in
    watch = SilentWatch(60)
    watch.check([Job("actor", (proc.pid,), (log,))], set, waiting=False)
    pids = dict(watch.trackers["actor"].pids)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no py-spy: faulthandler's path
    stacks = foreign_stacks(pids, lambda rank: log)
    # without the stop, the stand-in would have ended rank 1 as soon as rank 0 ended
    assert [s.rank for s in stacks] == [0, 1]
    assert [s.main[0].func for s in stacks] == ["idle_in_rank", "idle_in_rank"], log.read_text()
    assert proc.wait(timeout=10) is not None  # it went on (SIGCONT) and saw its ranks end
    text = log.read_text()
    assert text.count("Current thread") == 2
    assert (
        text.index("stacks of rank 0")
        < text.index("Current thread")
        < text.index("stacks of rank 1")
    )


def test_a_rank_without_faulthandler_is_not_signalled_and_the_line_says_why(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        [stacks] = foreign_stacks({3: quiet.pid}, lambda rank: None)
        assert quiet.poll() is None  # not ended: an unhandled signal would kill it for nothing
        assert stacks.where() == (
            "rank 3: no Python stack came back (py-spy is not installed; "
            "faulthandler is off in its environment (PYTHONFAULTHANDLER))"
        )
    finally:
        quiet.kill()
        quiet.wait()


# ----------------------------------------------------------------------------- areal-launch
HANG_S = 3
# the watchdog's bound: from going wrong to the run's end took 4.1-4.4 s here (2 cores, load 5:
# the timeout, a check a second, the dumps, the stop); 5x that
MARGIN_S = 20


def foreign_run(
    entry: str, run_dir: Path, tag: str, *extra: str, timeout: float = 150
) -> subprocess.CompletedProcess:
    """`areal-launch` of an entry that writes no heartbeats: two ranks on gloo, HANG_S, every
    process tagged with `tag`."""
    return run(
        "rollout=none",
        "cluster.device=cpu",
        "actor.backend=fsdp:d2",
        f"trainer.entry={entry}",
        f"launcher.hang_timeout_s={HANG_S}",
        f"+launcher.env.TEST_RUN_TAG={tag}",
        f"hydra.run.dir={run_dir}",
        *extra,
        timeout=timeout,
    )


def launch(
    tmp_path: Path, mode: str, *extra: str
) -> tuple[subprocess.CompletedProcess, float, str, str]:
    run_dir, tag = tmp_path / "run", uuid.uuid4().hex
    out = foreign_run(
        "tests/silent_trainer.py", run_dir, tag, f"+launcher.env.SILENT_MODE={mode}", *extra
    )
    ended = time.time()
    assert survivors(tag, tmp_path) == []  # nothing left running
    said = out.stdout + out.stderr
    assert out.returncode == 1, said[-4000:]
    log = (run_dir / "logs" / "actor-node0.log").read_text()
    [root] = [ln for ln in said.splitlines() if ln.startswith("root cause:")]
    went_wrong = float(re.findall(r" at (\d+\.\d+)$", log, re.M)[-1])
    assert ended - went_wrong < HANG_S + MARGIN_S, (ended - went_wrong, said[-3000:])
    return out, ended - went_wrong, root, log


@pytest.mark.torch
@pytest.mark.timeout(200)
def test_a_rank_that_returned_while_its_peer_waits_fails_the_run_with_the_peers_stack(tmp_path):
    out, _, root, log = launch(tmp_path, "ended", "launcher.max_restarts=1")
    said = out.stdout + out.stderr
    assert re.search(
        r"restart 1 of 1: hung: rank 0 of trainer job actor ended "
        r"\((pid \d+|before the first look)\) \d+ s ago and rank 1 still runs",
        said,
    ), said[-3000:]
    assert "trainers started again (restart 1)" in said  # then the same again, past the limit
    assert re.match(
        r"root cause: hung: rank 0 of trainer job actor ended \((pid \d+|before the "
        r"first look)\) \d+ s ago"
        r" and rank 1 still runs \(launcher.hang_timeout_s=3; the entry writes no "
        r"heartbeats\): rank 1 stopped in wait_for_peer \(tests/silent_trainer.py:"
        r"\d+\) \(after 1 restart\(s\)",
        root,
    ), root
    assert log.count("in wait_for_peer") >= 2 and "stacks of rank 0" not in log


@pytest.mark.torch
@pytest.mark.timeout(200)
def test_silent_ranks_fail_the_run_within_the_timeout_with_every_ranks_stack(tmp_path):
    _, _, root, log = launch(tmp_path, "silent")
    # rank 0's exception came first (tests/test_first_error.py), then the hang it led to
    first, _, hang = root.partition("; then ")
    assert re.fullmatch(
        r"root cause: rank 0 of actor-node0 raised RuntimeError: weight update failed "
        r"\(tests/silent_trainer.py:\d+ in main\)",
        first,
    ), root
    assert hang.startswith(
        f"hung: no output and no work (CPU) from trainer job actor "
        f"(ranks 0, 1) for {HANG_S} s (launcher.hang_timeout_s={HANG_S}; "
    ), root
    # rank 0 raised, and a thread keeps it alive; rank 1 sleeps
    assert "rank 0 stopped in _shutdown (" in root and "rank 1 stopped in sleep_for_ever (" in root
    assert "RuntimeError: weight update failed" in log
    assert (
        log.index("stacks of rank 0")
        < log.index("in _shutdown")
        < log.index("stacks of rank 1")
        < log.rindex("in sleep_for_ever")
    )


def test_silence_while_a_server_on_another_node_is_not_up_yet_is_waiting_not_a_hang(tmp_path):
    """A trainer of someone else's waits silently for the run's servers (AReaL asks
    name_resolve); on a node without them the clock waits until the other node's server
    answers /health (here it comes up 5 s in), then silence counts again."""
    import http.server
    import threading

    from launcher.node.agent import remote_health
    from launcher.node.console import plain_console
    from launcher.node.supervisor import materialize_node, supervise
    from launcher.spec.process import ProcessSpec, host_placeholder
    from tests.hand_requests import request_for

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ProcessSpec(
        "rollout-0",
        "rollout",
        "server",
        0,
        ("true",),
        ports=(port,),
        health_url=f"http://{host_placeholder(0)}:{port}/health",
    )
    tag = uuid.uuid4().hex
    trainer = ProcessSpec(
        "actor-node1",
        "actor",
        "trainer",
        1,
        (sys.executable, "-c", STAND_IN, "import time; time.sleep(600)"),
        env={"TEST_RUN_TAG": tag, "PYTHONFAULTHANDLER": "1"},
    )
    request = dataclasses.replace(
        request_for(tmp_path / "run", [server, trainer], device="cpu"),
        hang_timeout_s=1.0,
        health_timeout_s=120.0,  # far past the bound below: waiting for it would fail the test
    )
    hosts = ["127.0.0.1", "127.0.0.1"]
    assert remote_health(request, 1, hosts) == [f"http://127.0.0.1:{port}/health"]
    assert remote_health(request, 0, hosts) == []  # no trainer there

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", port), Health)
    up = threading.Timer(5.0, httpd.serve_forever)
    begun = time.monotonic()
    up.start()
    try:
        result = supervise(
            request,
            materialize_node(request, 1, hosts, None),
            node=1,
            out=plain_console(),
            remote_health=remote_health(request, 1, hosts),
        )
    finally:
        httpd.shutdown()
        up.cancel()
    took = time.monotonic() - begun
    assert result.exit_code == 1 and result.reason.startswith("hung: no output and no work"), (
        result.reason
    )
    # not before the server was up, and soon after: 5.5 s here (2 cores, load 5), 5x that
    assert 5 < took < 30, took
    assert survivors(tag, tmp_path) == []
