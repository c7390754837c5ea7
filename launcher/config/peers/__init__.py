"""The peers' vocabularies, translated at the edge into ours (docs/architecture.md §2).

A config written for AReaL or RLinf works as written: each peer has one adapter here that reads
the peer's keys out of the composed config and writes ours in their place, with one `note:`
where the meaning is not word for word. Nothing after this package sees a peer's key: the
schema (launcher.config.schema) holds our vocabulary only, and planning, memory, backends,
runners and nodes never name a peer. A peer's new release is a change in its adapter.

An adapter is a module with `translate(job, context, out)`: it edits `job` (the composed
config without Hydra's node, every node open) in place, taking its keys out and putting ours
in, and says in `out` what the user should know and how to name a key as the config wrote it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from launcher.spec.errors import ConfigError, UserError
from launcher.spec.request import Folders


@dataclass(frozen=True)
class Context:
    """What an adapter may read beside the config: the command line's overrides, the peer's
    file as written (None: a config of ours), the runner chosen, whether the entry is one of
    our recipes, the launcher's environment, and the name the user gave the config."""

    overrides: tuple[str, ...] = ()
    raw: Optional[Mapping[str, Any]] = None
    runner: str = "local"
    ours_entry: bool = True
    environ: Mapping[str, str] = field(default_factory=dict)
    config_name: str = "config"


@dataclass
class Translation:
    """What the adapters did: notes (read, not honoured word for word) and warnings (kept in
    the plan), our keys as the config wrote them (messages name the key the user has), the
    flags a peer's section gave the servers (key -> where), and what an entry not ours gets
    beside its config (shared folders and the overrides that name them, `{run_dir}` standing for
    the run folder; trainer environment)."""

    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    spellings: dict[str, str] = field(default_factory=dict)
    flag_origins: dict[str, str] = field(default_factory=dict)
    folders: Folders = Folders()
    entry_overrides: tuple[str, ...] = ()
    trainer_env: dict[str, str] = field(default_factory=dict)

    def restated(self, exc: UserError) -> UserError:
        """`exc` with its message as_written: the same error where nothing changes, else
        one of its kind (a ConfigError where its kind takes more than a message)."""
        text = self.as_written(str(exc))
        if text == str(exc):
            return exc
        try:
            return type(exc)(text)
        except TypeError:  # AllocationError takes the spec, the column, the hint
            return ConfigError(text)

    def as_written(self, text: str) -> str:
        """`text` with each of our keys in the spelling the config used (longest first)."""
        for ours in sorted(self.spellings, key=len, reverse=True):
            text = re.sub(rf"(?<![\w.]){re.escape(ours)}(?![\w])", self.spellings[ours], text)
        return text


def translate(job: Any, context: Context) -> Translation:
    """`job` with every peer's keys translated into ours, in place; what the adapters did."""
    from launcher.config.peers import areal, rlinf
    from launcher.config.peers.edit import resolve_in_place

    resolve_in_place(job)
    out = Translation()
    for adapter in (areal, rlinf):
        adapter.translate(job, context, out)
    return out


def runner_choice(cfg: Any, overrides: tuple[str, ...]) -> Optional[str]:
    """The runner a peer's key chooses (AReaL's `scheduler.type`), where it is not the one
    `launcher=` chose; None: nothing to change. The composer composes again with it."""
    from launcher.config.peers import areal

    return areal.runner_choice(cfg, overrides)


def unknown_hint(key: str) -> str:
    """A peer's word on a key our recipe does not take ("" for most)."""
    from launcher.config.peers import areal

    return areal.unknown_hint(key)
