"""A frame of a Python stack as a log prints it: where a traceback was raised
(node/tracebacks.py) or where a hung rank waits (node/watchdog.py). Its own module so that the
supervisor reads first errors without importing the hang watches (a run without
launcher.hang_timeout_s never uses them; every node's agent pays its imports)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str

    def short(self) -> str:
        return f"{self.func} ({'/'.join(Path(self.path).parts[-2:])}:{self.line})"
