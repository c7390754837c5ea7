"""Ports that two launches on one host never both get.

Finding a free port and binding it later is a race: two launchers can find the same one before
either server binds it. So each port we hand out is *locked*, not just found free: an exclusive
`flock` on `/tmp/areal-launch-ports/<port>.lock`, held by the launcher until `release()` or its
exit (the kernel drops flocks of a dead process, even after SIGKILL, so nothing goes stale).
A port is taken only if its lock is ours AND binding it succeeds right now (so ports used by
anything else on the host are skipped). We do not hold the bound socket: the server binds it
later, and other launchers respect the lock in the meantime.

Without `base_port` we start at a random port below the kernel's ephemeral range, so outgoing
connections (which take ephemeral ports) do not grab a port between `take()` and the server's
bind, and two launchers rarely even contend for the same lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
from pathlib import Path
from typing import Callable, Optional

from launcher.spec.errors import LaunchError, UserError
from launcher.spec.limits import MAX_PORT, MIN_PORT

LOCK_DIR = Path(os.environ.get("AREAL_LAUNCH_PORT_DIR", "/tmp/areal-launch-ports"))
LOWEST = 10000  # below this live well-known services; we stay out of their way
DEFAULT_BASE_PORT = 30000  # where counted ports start (plans, Slurm nodes) without base_port


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    """True if nothing on this host listens on (or holds) the port now, on any address."""
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind((addr, port))
        except OSError as e:
            if family == socket.AF_INET6 and e.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                continue  # no IPv6 on this host: the IPv4 check decides
            return False
    return True


def counted_ports(base: int) -> Callable[[], int]:
    """Ports counted up from `base`, for plans and for nodes that are not this machine (nothing
    to reserve here); UserError past 65535 (launcher.base_port is too high)."""
    counter = iter(range(base, MAX_PORT + 1))

    def take() -> int:
        port = next(counter, None)
        if port is None:
            raise UserError(f"the run needs ports past {MAX_PORT}: set a lower launcher.base_port")
        return port

    return take


class PortReserver:
    """Hands out ports reserved across processes on this host until release() or exit.

    `take()` returns the next port, counting up from `base_port` (or a random start), that is
    neither locked by another launch nor bound by anyone. Use as a context manager to release
    all ports at the end of a run.
    """

    def __init__(
        self, base_port: Optional[int] = None, lock_dir: Path = LOCK_DIR, lock: bool = True
    ):
        """lock=False (dry runs): skip ports others hold, but take no lock and write nothing."""
        self.lock_dir = Path(lock_dir)
        self.locking = lock
        self._ceiling = 65535
        floor: int = base_port if base_port is not None else LOWEST
        if base_port is None:
            top = _ephemeral_low()
            if top - LOWEST < 1000:  # an odd port range: use the whole space
                top = 65535
            base_port = random.randrange(LOWEST, top)
            floor, self._ceiling = LOWEST, top - 1
        if not MIN_PORT <= base_port <= MAX_PORT:
            raise UserError(
                f"launcher.base_port={base_port}: choose a port from {MIN_PORT} "
                f"to {MAX_PORT} (or leave it unset: free ports are chosen)"
            )
        self.base_port = base_port
        self._floor = floor
        self._next = base_port
        self._held: dict[int, int] = {}  # port -> fd of its lock file

    def take(self) -> int:
        """A port free now and locked for this launch; LaunchError (this machine's, not the
        user's) if none is left."""
        if self.locking:
            self._ensure_dir()
        tried = 0
        span = self._ceiling - min(self._floor, self._ceiling) + 1
        while tried < span:
            port = self._next
            self._next = port + 1 if port < self._ceiling else self._floor
            tried += 1
            if port in self._held:
                continue
            fd = self._lock(port)
            if fd is None:
                continue
            if _bindable(port):
                self._held[port] = fd
                return port
            if fd >= 0:
                os.close(fd)
        raise LaunchError(
            f"no free port from {self._floor} to {self._ceiling} "
            "(set launcher.base_port=<another start>)"
        )

    def release(self) -> None:
        """Give every taken port back (closing a lock file drops its flock)."""
        for fd in self._held.values():
            if fd >= 0:
                os.close(fd)
        self._held.clear()

    def _lock(self, port: int) -> Optional[int]:
        path = self.lock_dir / f"{port}.lock"
        if not self.locking:  # dry run: is another launch holding it? (opens, never creates)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                return -1
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return -1
            except OSError:
                return None
            finally:
                os.close(fd)
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def _ensure_dir(self) -> None:
        if self.lock_dir.is_dir():
            return
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        try:  # shared by every user of the host, like /tmp itself
            os.chmod(self.lock_dir, 0o1777)
        except OSError:
            pass

    def __enter__(self) -> "PortReserver":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass
