"""User-facing errors: values with a message for the person who typed the command.

Raised inside the pure core and printed once, as one `error:` line, by the CLI.
"""
from __future__ import annotations


class LaunchError(ValueError):
    """A mistake in what the user asked for; the message says what and how to fix it."""


class PlacementError(LaunchError):
    """GPUs cannot be given to the engines as configured."""


class ConfigError(LaunchError):
    """The composed configuration is invalid (unknown key, wrong type, conflicting options)."""


def error_line(exc: BaseException) -> str:
    """How the CLI shows a user mistake: one line (a value with a newline is shown escaped)."""
    text = " ".join(str(exc).split("\n"))
    return f"error: {text}"
