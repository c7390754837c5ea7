"""The supervisor's wait between two looks at its processes: woken by a child's exit or a
signal, else backing off while nothing happens.

A fixed 50 ms poll cost each node's supervisor ~8 ms of CPU a second with nothing to do: on
one machine hosting 32 plan nodes (the scale benchmark) a quarter of a core, taken from the
start of the nodes still starting. Here a child's exit (SIGCHLD) and every signal Python
handles (a stop, a requeue's USR1) write to a pipe (signal.set_wakeup_fd) that the wait
selects on, so a failure is seen at once; otherwise the wait doubles from FAST_S up to IDLE_S,
and drops back to FAST_S whenever the loop saw something change (`busy`). What only a poll can
see (another node's files, a health probe's thread, new log lines) is seen within IDLE_S.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from types import TracebackType
from typing import Any, Optional, Sequence

FAST_S = 0.05  # after a change: a restart's or a start's next steps come quickly
IDLE_S = 0.5  # the longest wait with nothing changing; bounds what only a poll can see


def _noop(_signum: int, _frame: object) -> None:
    """SIGCHLD's handler: its only job is the wakeup fd's byte (C-level, before this runs)."""


class Wakeup:
    """`with Wakeup() as w: ... w.wait(busy)`: in the main thread, the wait ends at a child's
    exit or a signal; elsewhere (a test's thread) it is a plain FAST_S sleep."""

    def __init__(self, fast_s: float = FAST_S, idle_s: float = IDLE_S):
        self.fast_s, self.idle_s = fast_s, idle_s
        self.timeout = fast_s
        self._fds: Optional[tuple[int, int]] = None
        self._old_fd = -1
        self._old_chld: Any = None

    def __enter__(self) -> "Wakeup":
        if threading.current_thread() is not threading.main_thread():
            return self
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self._old_chld = signal.signal(signal.SIGCHLD, _noop)
        self._old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._fds = (r, w)
        return self

    def __exit__(
        self,
        _t: Optional[type[BaseException]],
        _e: Optional[BaseException],
        _tb: Optional[TracebackType],
    ) -> None:
        if self._fds is None:
            return
        signal.set_wakeup_fd(self._old_fd)
        signal.signal(signal.SIGCHLD, self._old_chld)
        for fd in self._fds:
            os.close(fd)
        self._fds = None

    def wait(self, busy: bool, fds: Sequence[int] = ()) -> list[int]:
        """Wait for a wakeup, one of `fds` readable, or the current timeout; which of `fds`
        are readable."""
        self.timeout = self.fast_s if busy else min(self.timeout * 2, self.idle_s)
        if self._fds is None:
            ready, _, _ = select.select(list(fds), [], [], self.fast_s) if fds else ([], 0, 0)
            if not fds:
                time.sleep(self.fast_s)
            return list(ready)
        r = self._fds[0]
        ready, _, _ = select.select([r, *fds], [], [], self.timeout)
        if ready:
            self.timeout = self.fast_s
        if r in ready:
            try:
                while os.read(r, 512):
                    pass
            except BlockingIOError:
                pass
        return [fd for fd in ready if fd != r]
