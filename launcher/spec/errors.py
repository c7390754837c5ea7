"""The launcher's errors, split by whose they are (docs/architecture.md §14).

A `UserError` is a mistake in what the user asked for (a flag, an override, a value, a run that
does not exist): found before anything starts, so the message says what to change. A
`LaunchError` that is no `UserError` is a failure where the run runs (a process that dies, a
scheduler that refuses, a cluster that does not answer): nothing the user typed is wrong, the
message says what failed. `UserError` is a kind of `LaunchError`, so `except LaunchError`
catches everything the launcher says, and `except UserError` only the mistakes.

The CLI prints either as one `error:` line with exit code 2.
"""

from __future__ import annotations


class LaunchError(ValueError):
    """A failure on a node or at run time; also the base of every error the launcher says."""


class UserError(LaunchError):
    """A mistake in what the user asked for; the message says what and how to fix it."""


class PlacementError(UserError):
    """GPUs cannot be given to the engines as configured."""


class ConfigError(UserError):
    """The composed configuration is invalid (unknown key, wrong type, conflicting options)."""


def restated(exc: LaunchError, message: str) -> LaunchError:
    """`message` (`exc` said again in its context) as the same kind of error: a mistake stays
    a UserError, a failure a LaunchError."""
    return (UserError if isinstance(exc, UserError) else LaunchError)(message)


def error_line(exc: BaseException) -> str:
    """How the CLI shows an error: one line. A newline becomes a space; any other character
    that is not printable (a carriage return, \\x1c, \\u2028: line breaks to some readers) is
    shown escaped, so a value of any kind cannot break the line."""
    text = " ".join(str(exc).split("\n"))
    if not text.isprintable():
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return f"error: {text}"
