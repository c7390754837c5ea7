"""The first exception a run's processes printed, read from their logs as they grow
(docs/architecture.md §11).

A hang or an exit is often the consequence of an earlier error: a trainer catches an
exception on rank 0 (`RuntimeError: Failed after 3 retries ...`), logs it and goes on into a
collective, where both ranks then wait for ever; a server's traceback comes before the
trainer's exit it led to. So the supervisor reads each process's log as it grows (from the
offset where the process's start began, at most every READ_EVERY_S) and keeps its first Python
traceback with when it was seen; the failure's line then names the earliest one printed before
the failure, ahead of the failure itself.

A traceback is Python's: `Traceback (most recent call last):`, indented frames, then the
exception's line (its "last line"). Its rank: torch's `[rank<N>]:` prefix (torch.distributed
prefixes the lines of an uncaught exception so), else the rank that the line introducing it
names (a log record's header: loggers that carry the rank in their name, "[FSDPEngine Rank
0] ERROR: ..."), else the process's only rank; otherwise the line says which ranks it may be.
Tracebacks that follow another failure (failures.COLLATERAL: a peer gone), torchrun's reports
of its workers and signals (REPORTS) count only when no other was printed.
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from launcher.node.failures import COLLATERAL, TRACEBACK_LINES
from launcher.node.frames import Frame

READ_EVERY_S = 0.25
READ_LIMIT = 4 << 20  # bytes of one log per read: a flood of output never stalls the loop
FINAL_LIMIT = 64 << 20  # what the read at a failure reads at most, per log
TRACEBACK = "Traceback (most recent call last):"
REPORTS = ("ChildFailedError", "SignalException", "KeyboardInterrupt", "SystemExit")
MAX_STRAY = 10  # lines in a traceback that are neither frames nor its end (another writer's)
MAX_KEPT = 200  # lines of one traceback kept
MAX_EXCEPTION = 300  # characters of its last line in the failure's line
MAX_PARTIAL = 64 << 10  # of a line not ended yet (a progress bar's redraws): its end is kept
_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::.*)?$")
_RANK_NAMED = re.compile(r"\brank[\s_:=#]*(\d+)\b", re.I)


@dataclass(frozen=True)
class Traceback:
    """One traceback as printed: its last line, its lines, where it was raised."""

    exception: str  # "RuntimeError: Failed after 3 retries"
    lines: tuple[str, ...]
    frame: Optional[Frame] = None  # the innermost frame: where it was raised
    prefix_rank: Optional[int] = None  # torch's [rank<N>]: on its lines
    intro: str = ""  # the line before it (a log record's header, "Exception in thread ...")

    @property
    def collateral(self) -> bool:
        name = self.exception.partition(":")[0].rsplit(".", 1)[-1]
        return name in REPORTS or any(c in self.exception for c in COLLATERAL)

    def rank(self, ranks: Sequence[int]) -> Optional[int]:
        """Which of a process's ranks printed it (None: the log does not say)."""
        if self.prefix_rank is not None:
            return self.prefix_rank
        named = _RANK_NAMED.search(self.intro)
        if named is not None and int(named.group(1)) in ranks:
            return int(named.group(1))
        return ranks[0] if len(ranks) == 1 else None

    def where(self) -> str:
        """` (<dir>/<file>:<line> in <function>)`, where it was raised ("" if unknown)."""
        f = self.frame
        return "" if f is None else f" ({'/'.join(Path(f.path).parts[-2:])}:{f.line} in {f.func})"


@dataclass
class _Open:
    rank: Optional[int]
    intro: str
    lines: list[str]
    frame: Optional[Frame] = None
    stray: int = 0


def _clean(raw: str) -> str:
    """A log line as a terminal would end up showing it: no colours, the last \\r redraw."""
    return _ANSI.sub("", raw.rstrip("\r\n")).rsplit("\r", 1)[-1]


def _ends(line: str) -> bool:
    """Whether an unindented line inside a traceback is its exception's line: a class name
    (`ValueError`, `socket.timeout`), not a word or a log level (`INFO:`)."""
    m = _EXCEPTION.match(line.rstrip())
    if m is None:
        return False
    name = m.group(1)
    return "." in name or (name[0].isupper() and not name.isupper())


@dataclass
class TracebackParser:
    """Python tracebacks out of a process's output, a line at a time (pure). Lines carrying
    torch's [rank<N>]: prefix are each rank's own stream."""

    intro: dict[Optional[int], str] = field(default_factory=dict)  # last non-blank, per stream
    open: dict[Optional[int], _Open] = field(default_factory=dict)

    @property
    def idle(self) -> bool:
        return not self.open

    def feed(self, raw: str) -> Optional[Traceback]:
        line = _clean(raw)
        m = _PREFIX.match(line)
        stream = int(m.group(1)) if m else None
        if m:
            line = line[m.end() :]
        block = self.open.get(stream)
        if line.startswith(TRACEBACK):
            self.open[stream] = _Open(stream, self.intro.get(stream, ""), [line])
            return None
        if block is None:
            if line.strip():
                self.intro[stream] = line
            return None
        if line[:1].isspace() and line.strip():
            frame = _FRAME.match(line)
            if frame is not None:
                block.frame = Frame(frame.group(1), int(frame.group(2)), frame.group(3))
            if len(block.lines) < MAX_KEPT:
                block.lines.append(line)
            return None
        if line.strip() and _ends(line):
            del self.open[stream]
            self.intro[stream] = line
            return Traceback(
                line.strip()[:MAX_EXCEPTION],
                (*block.lines, line),
                block.frame,
                block.rank,
                block.intro,
            )
        block.stray += 1
        if block.stray > MAX_STRAY:
            del self.open[stream]
        return None


def parse(text: str) -> list[Traceback]:
    """Every traceback in `text`, in order."""
    parser = TracebackParser()
    return [tb for line in text.splitlines() if (tb := parser.feed(line)) is not None]


@dataclass(frozen=True)
class Printed:
    """A traceback a process of the run printed, and when the supervisor saw it."""

    process: str
    log: Path
    ranks: tuple[int, ...]  # the process's ranks (a trainer's); () for a server or worker
    traceback: Traceback
    seen: float  # time.monotonic() of the read that found it
    order: int  # among those seen in the same read

    @property
    def rank(self) -> Optional[int]:
        return self.traceback.rank(self.ranks) if self.ranks else None

    def summary(self, own: bool = False) -> str:
        """`rank 0 of actor-node0 raised RuntimeError: ... (x.py:40 in f)`; own: the process
        is named already (`rank 0 raised ...`)."""
        rank, tb = self.rank, self.traceback
        if not self.ranks:
            who = "" if own else self.process
        elif rank is not None:
            who = f"rank {rank}" if own else f"rank {rank} of {self.process}"
        else:
            which = f"one of ranks {', '.join(map(str, self.ranks))}"
            who = which if own else f"{self.process} ({which})"
        return f"{who} raised {tb.exception}{tb.where()}".lstrip()

    def to_dict(self) -> dict[str, Any]:
        tb = self.traceback
        return {
            "process": self.process,
            "rank": self.rank,
            "exception": tb.exception,
            "where": tb.where().strip(" ()"),
            "log": str(self.log),
            "traceback": list(tb.lines[-TRACEBACK_LINES:]),
        }


@dataclass
class LogReader:
    """One process's log from its start's offset: its first traceback (first of all and first
    that is not collateral; reading stops once it has that one)."""

    process: str
    path: Path
    ranks: tuple[int, ...]
    offset: int
    partial: bytes = b""
    parser: TracebackParser = field(default_factory=TracebackParser)
    found: list[Printed] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return any(not p.traceback.collateral for p in self.found)

    def read(self, now: float, limit: int, order: Iterator[int]) -> None:
        """What the log gained since the last read, at most `limit` bytes (`now`: this read's
        time.monotonic(); `order`: numbers the tracebacks found, across logs)."""
        if self.done:
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(limit)
        except OSError:
            return
        self.offset += len(data)
        whole, _, partial = (self.partial + data).rpartition(b"\n")
        self.partial = partial[-MAX_PARTIAL:]
        lines = whole.decode("utf-8", "replace").split("\n") if whole else []
        if self.parser.idle and TRACEBACK.encode() not in whole:
            lines = lines[-3:]  # nothing opens here: only the intro of what may follow counts
        for line in lines:
            tb = self.parser.feed(line)
            if tb is None or (self.found and tb.collateral):
                continue
            self.found.append(Printed(self.process, self.path, self.ranks, tb, now, next(order)))
            if self.done:
                return


@dataclass
class FirstErrors:
    """This node's processes' logs, each read as it grows (see module doc)."""

    readers: dict[str, LogReader] = field(default_factory=dict)
    _next: float = 0.0
    _order: Iterator[int] = field(default_factory=itertools.count)

    def follow(self, process: str, log: Path, offset: int, ranks: Sequence[int] = ()) -> None:
        """Read `process`'s log from `offset` (a new start replaces its last one's reader)."""
        self.readers[process] = LogReader(process, log, tuple(ranks), offset)

    def read(self, final: bool = False) -> None:
        """What the logs gained, at most every READ_EVERY_S; final: now, and more of it (at a
        failure: the failing process's last words)."""
        now = time.monotonic()
        if not final and now < self._next:
            return
        self._next = now + READ_EVERY_S
        for reader in self.readers.values():
            reader.read(now, FINAL_LIMIT if final else READ_LIMIT, self._order)

    def first(self, before: float, own: Optional[str] = None) -> Optional[Printed]:
        """The earliest traceback seen before `before` (time.monotonic()), any of `own`'s (the
        failing process: its traceback comes just before its end); not collateral if one is
        not."""
        found = [
            p for r in self.readers.values() for p in r.found if r.process == own or p.seen < before
        ]
        if not found:
            return None
        # in one read, a server's first: its failure is what a trainer's follows
        return min(found, key=lambda p: (p.traceback.collateral, p.seen, bool(p.ranks), p.order))
