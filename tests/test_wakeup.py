"""The supervisor's and keeper's wait (launcher/node/wakeup.py): woken at once by a child's exit
or a signal, backing off while nothing happens, and leaving the process's signal setup as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from launcher.node.wakeup import Wakeup


def test_a_child_exit_ends_a_long_wait() -> None:
    with Wakeup(fast_s=0.01, idle_s=30) as wake:
        for _ in range(20):  # nothing happens: the wait grows to its idle bound
            wake.timeout = wake.idle_s
        child = subprocess.Popen(["sleep", "0.3"])
        begun = time.monotonic()
        wake.wait(busy=False)
        took = time.monotonic() - begun
        assert child.wait() == 0
    assert took < 15, f"the wait outlasted the child's exit by {took:.1f} s"  # 30 s without it


def test_a_signal_ends_a_long_wait_and_its_handler_runs() -> None:
    seen: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda s, _f: seen.append(s))
    try:
        with Wakeup(fast_s=0.01, idle_s=30) as wake:
            wake.timeout = wake.idle_s
            killer = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -USR1 {os.getpid()}"])
            wake.wait(busy=False)
            killer.wait()
        assert seen == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_idle_waits_back_off_and_a_busy_one_is_short_again() -> None:
    with Wakeup(fast_s=0.001, idle_s=0.008) as wake:
        timeouts = []
        for _ in range(5):
            wake.wait(busy=False)
            timeouts.append(wake.timeout)
        assert timeouts == [0.002, 0.004, 0.008, 0.008, 0.008]
        wake.wait(busy=True)
        assert wake.timeout == 0.001


def test_a_readable_fd_is_returned_and_the_setup_restored() -> None:
    before_chld = signal.getsignal(signal.SIGCHLD)
    r, w = os.pipe()
    try:
        with Wakeup(fast_s=0.01, idle_s=30) as wake:
            os.write(w, b"x")
            assert wake.wait(False, (r,)) == [r]
        assert signal.getsignal(signal.SIGCHLD) == before_chld
        assert signal.set_wakeup_fd(-1) == -1  # none left behind
    finally:
        os.close(r)
        os.close(w)
