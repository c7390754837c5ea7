"""What the person at the terminal sees while a run is up.

Processes write straight into their log files (so logs are whole even if the launcher dies, and
a slow terminal never blocks a server). The console follows the files of the processes it is
told to (launcher.console=auto: the trainers; all: every process) and prints their lines
prefixed with the process name, one colour per process. On a terminal a live table below them
says what each process is doing (starting, healthy, running, exited); not on a terminal (CI,
`| tee`, a Slurm job's log) there are only plain lines. A process the launcher is stopping is
no longer echoed (its shutdown chatter stays in its log). A summary table ends the run.

Rich draws the terminal's console only: plain lines are written here, so a node agent (a Slurm
task's log is never a terminal) does not import rich (~40 ms of CPU on every node).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

COLOURS = (
    "cyan",
    "magenta",
    "green",
    "yellow",
    "blue",
    "bright_red",
    "bright_cyan",
    "bright_magenta",
    "bright_green",
    "bright_yellow",
    "bright_blue",
)


@dataclass
class FollowedLog:
    """One log file read as it grows; `partial` holds a line not yet ended by a newline."""

    name: str
    path: Path
    style: str
    offset: int = 0
    partial: bytes = b""
    muted: bool = False  # read on, show nothing: the launcher is stopping this process

    def read_lines(self, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        # progress bars redraw with \r: show what the line finally says
        return [ln.rstrip(b"\r").rsplit(b"\r", 1)[-1].decode("utf-8", "replace") for ln in lines]


# what rich leaves out of a plain line: bell, backspace, vertical tab, form feed, carriage return
_STRIPPED = dict.fromkeys((7, 8, 11, 12, 13))
SUMMARY_HEADER = ("process", "exit", "duration", "log")


def plain_line(text: str) -> str:
    """A line as the plain console prints it: no control codes that move the cursor, tabs
    expanded (as rich writes it)."""
    return text.translate(_STRIPPED).expandtabs(8)


def plain_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """The summary as plain lines: left-aligned columns two spaces apart, no trailing blanks."""
    table = [SUMMARY_HEADER, *rows]
    widths = [max(len(row[k]) for row in table) for k in range(len(SUMMARY_HEADER))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]


@dataclass
class RunConsole:
    """Prefixed log lines and the server start-up status: on `console` (rich's, a terminal's
    or the user's), else as plain text on stdout.

    If whoever reads our stdout goes away (`areal-launch | head`), the run goes on: one line
    on stderr says so, and from then on the log files alone get the output."""

    console: Optional[Console] = None
    logs: list[FollowedLog] = field(default_factory=list)
    width: int = 0
    _live: Optional[Live] = None
    closed: bool = False

    def _safely(self, show: Callable[[], Any]) -> None:
        if self.closed:
            return
        try:
            show()
        except (BrokenPipeError, SystemExit):  # rich turns a broken pipe into SystemExit(1)
            self.closed, self._live = True, None
            try:  # nothing more may reach the closed pipe, not even at exit
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            where = f" in {self.logs[0].path.parent}" if self.logs else ""
            print(
                "areal-launch: stdout was closed; the run goes on, its output is in the log "
                f"files{where}",
                file=sys.stderr,
                flush=True,
            )

    def _print(self, *parts: tuple[str, str]) -> None:
        """One line of (text, style) parts; the styles only where rich draws it."""
        console = self.console
        if console is None:
            line = plain_line("".join(text for text, _ in parts)) + "\n"

            def write() -> None:
                sys.stdout.write(line)
                sys.stdout.flush()

            self._safely(write)
            return
        from rich.text import Text

        text = Text.assemble(*parts)
        self._safely(lambda: console.print(text, soft_wrap=True, highlight=False))

    def follow(self, name: str, path: Path, offset: int = 0) -> None:
        """Echo what `name` writes to `path` from `offset` on (a requeued job's supervisor
        follows logs that earlier starts wrote to: those lines were shown then)."""
        self.logs.append(FollowedLog(name, path, COLOURS[len(self.logs) % len(COLOURS)], offset))
        self.width = max(self.width, len(name))

    def mute(self, names: set[str], muted: bool = True) -> None:
        """Stop (or resume) echoing these processes; what they wrote so far is printed first."""
        if muted:
            self.pump()
        for log in self.logs:
            if log.name in names:
                log.muted = muted

    def pump(self, final: bool = False) -> int:
        """Print every line the processes wrote since the last call; how many were read."""
        n = 0
        for log in self.logs:
            for line in log.read_lines(final):
                n += 1
                if not log.muted:
                    self._print((f"{log.name:<{self.width}} | ", log.style), (line, ""))
        return n

    def say(self, text: str, style: str = "bold") -> None:
        self._print((text, style))

    @property
    def live(self) -> bool:
        """Whether show() draws anything: a terminal that is still there."""
        return self.console is not None and self.console.is_terminal and not self.closed

    def show(self, rows: list[tuple[str, str, str]]) -> None:
        """The live table of (process, state, style) below the log lines (terminals only;
        elsewhere the state changes are `say` lines)."""
        if not self.live:
            return
        from rich.live import Live
        from rich.table import Table
        from rich.text import Text

        table = Table.grid(padding=(0, 2))
        for name, state, style in rows:
            table.add_row(Text(name, "bold"), Text(state, style))
        if self._live is None:
            self._live = Live(table, console=self.console, transient=True, refresh_per_second=4)
            self._safely(self._live.start)
        else:
            self._live.update(table)

    def summary(self, rows: list[tuple[str, str, str, str]]) -> None:
        """The end of a run: process, exit, duration, log, one row each."""
        console = self.console
        if console is None:
            for line in plain_table(rows):
                self._print((line, ""))
            return
        from rich.table import Table

        table = Table(*SUMMARY_HEADER[:3], box=None, pad_edge=False, header_style="bold")
        table.add_column(SUMMARY_HEADER[3], overflow="fold")  # a path is never cut short
        for row in rows:
            table.add_row(*row)
        self._safely(lambda: console.print(table, soft_wrap=True, highlight=False))

    def end_status(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def root_cause(
        self,
        reason: str,
        log: Optional[Path],
        tail: list[str],
        kind: str = "log",
        title: str = "",
        first: tuple[str, list[str]] = ("", []),
    ) -> None:
        """A failure: its reason, then `first` (a heading and the lines of an earlier
        traceback the reason names first), then `tail`, which is (kind) the end of `log`, the
        failing rank's traceback, or the hung ranks' stacks (also in `log`)."""
        if title:  # a failure the run survives
            self.say(f"{title}: {reason}", "bold yellow")
        else:
            self.say(f"root cause: {reason}", "bold red")
        self._indented(*first)
        heading = {
            "traceback": "its traceback:",
            "stacks": f"the ranks' stacks (also in {log}):",
        }.get(kind, f"last {len(tail)} lines of {log}:")
        self._indented(heading, tail)

    def _indented(self, heading: str, lines: list[str]) -> None:
        """`heading`, then `lines` indented below it (nothing when there are none)."""
        if not lines:
            return
        self.say(heading, "red")
        for line in lines:
            self._print(("  " + line, ""))


def plain_console() -> RunConsole:
    """Prefixed lines, no control codes: a scheduler's log file or a pipe, not a terminal."""
    return RunConsole()


def tail(path: Path, lines: int = 20) -> list[str]:
    """The last `lines` lines of a log file (reads only its end)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return []
    text = data.decode("utf-8", "replace").splitlines()
    return [ln.rstrip("\r").rsplit("\r", 1)[-1] for ln in text[-lines:]]
