"""PortReserver: ports free now, and never handed to two launches on one host at once."""

import signal
import socket
import subprocess
import sys

import pytest

from launcher.node.ports import PortReserver
from launcher.spec.errors import LaunchError

HOLDER = """
import sys
from launcher.node.ports import PortReserver
r = PortReserver(base_port=int(sys.argv[1]))
print(*[r.take() for _ in range(int(sys.argv[2]))], flush=True)
sys.stdin.read()  # hold the ports until the test closes our stdin
"""


def free_base() -> int:
    """A port that is free and not locked right now, to count up from."""
    with PortReserver() as r:
        return r.take()


def hold(base: int, count: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(base), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_taken_port_can_be_bound_by_a_server():
    with PortReserver() as r:
        port = r.take()
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_two_processes_taking_at_once_from_one_base_get_disjoint_ports():
    base = free_base()
    holders = [hold(base, 20) for _ in range(2)]
    try:
        taken = [set(map(int, h.stdout.readline().split())) for h in holders]
    finally:
        for h in holders:
            h.stdin.close()
            h.wait(timeout=10)
    assert all(len(t) == 20 for t in taken)
    assert not taken[0] & taken[1]


def test_base_port_counts_up_and_skips_a_bound_port():
    base = free_base()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", base))
        busy.listen()
        with PortReserver(base_port=base) as r:
            first = r.take()
    assert first > base
    assert first - base < 50


def test_port_locked_by_another_process_is_skipped_until_released():
    base = free_base()
    holder = hold(base, 1)
    try:
        held = int(holder.stdout.readline())
        with PortReserver(base_port=held) as r:
            assert r.take() != held
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    with PortReserver(base_port=held) as r:
        assert r.take() == held


def test_ports_of_a_sigkilled_process_are_free_again():
    base = free_base()
    holder = hold(base, 3)
    held = [int(p) for p in holder.stdout.readline().split()]
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with PortReserver(base_port=held[0]) as r:
        assert r.take() == held[0]


def test_release_gives_ports_back_within_one_process():
    base = free_base()
    r = PortReserver(base_port=base)
    port = r.take()
    assert PortReserver(base_port=port).take() != port
    r.release()
    assert PortReserver(base_port=port).take() == port


def test_base_port_out_of_range_is_a_launch_error():
    with pytest.raises(LaunchError, match="base_port=70000"):
        PortReserver(base_port=70000)
