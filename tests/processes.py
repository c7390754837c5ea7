"""Finding a run's processes from the outside, independently of the launcher's own bookkeeping."""

from __future__ import annotations

import os
import time
from pathlib import Path


def survivors(tag: str, folder: Path) -> list[int]:
    """Live processes (not zombies, not us) tagged with `tag` or holding a file in `folder`."""
    needle, inside = f"\0TEST_RUN_TAG={tag}\0".encode(), str(folder) + "/"
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (
                int(pid) == os.getpid()
                or Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
            ):
                continue
            if needle in b"\0" + Path(f"/proc/{pid}/environ").read_bytes() + b"\0" or any(
                os.readlink(f"/proc/{pid}/fd/{fd}").startswith(inside)
                for fd in os.listdir(f"/proc/{pid}/fd")
            ):
                found.append(int(pid))
        except OSError:
            continue
    return found


def wait_until(check, within_s: float, every_s: float = 0.1):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    return check()
