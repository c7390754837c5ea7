"""What the rollout servers serve: checked after every push, and brought back to the trainer's
current weights before each rollout (docs/architecture.md §11).

A server restarted alone comes back serving the model it started from, and says so: vLLM's
/weight_info and SGLang's /model_info answer "default" after a fresh start, while a reload
labels it with the trainer's version (v<step>; v0 for the start model). Before each rollout
phase rank 0 asks every server: one that is down is waited for (its /health, for the plan's
health timeout) rather than failing the run at once; one that answers another version than the
trainer's current one is told to load the current weights folder again, then checked like any
push, with one log line naming it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from launcher.trainer.runtime import health_ok, wait_for_servers
from recipes.grpo.rollout_client import RolloutError, RolloutServer
from recipes.grpo.weights import greedy_from_folder, strip_eos

if TYPE_CHECKING:
    from recipes.grpo.loop import Session

START_LABELS = (None, "", "default")  # what a server that loaded no push calls its weights
# The start model's label when the trainer pushes it itself (before its first update; the
# Megatron recipe's CPU check pushes its loaded weights under it too): never a fresh server's,
# so a server that kept an earlier push under a start label (another attempt's, or a reload
# that failed its check) is not taken for fresh.
START_PUSH = "v0"


def stale(served: Optional[str], current: Optional[str]) -> bool:
    """True when a server answering `served` does not serve the trainer's `current` version
    (None: nothing pushed yet, so the servers' own start model is current)."""
    return served not in START_LABELS if current is None else served != current


def restarted(server: RolloutServer, version: str, say: Callable[[str], None]) -> bool:
    """True when `server` went down or came back fresh (serving its start model) since it was
    given `version`: it is not checked now; refresh() brings it up to date before the next
    rollout. A reload that failed on a live server keeps its old label, so it is still caught."""
    if version in START_LABELS:
        return False
    try:
        served = server.weight_version()
    except RolloutError:
        served = None if health_ok(server.addr) else "down"
    if served == "down" or (served in START_LABELS and served is not None):
        say(
            f"grpo: rollout server {server.addr} restarted during the push of {version} "
            f"({'down' if served == 'down' else 'serving its start model'}): it gets the "
            "weights before the next rollout"
        )
        return True
    return False


def confirm(
    s: "Session",
    folder: Path,
    version: str,
    servers: Sequence[RolloutServer],
    say: Callable[[str], None] = print,
) -> int:
    """Each server's greedy tokens == a plain HF model's on `folder`, and their log-probs agree
    within verify_logprob_tol (equal tokens alone can hide a partly loaded model); raise on any
    difference. How many were checked (0 with verify_reload off). A server that restarted in
    the meantime is left to refresh()."""
    servers = [server for server in servers if not restarted(server, version, say)]
    if not s.opts.verify_reload:
        return 0
    eos = s.tokenizer.eos_token_id
    prompt_ids = s.tokenizer(s.opts.verify_prompt).input_ids
    expected, expected_lp = greedy_from_folder(
        folder, prompt_ids, s.opts.verify_tokens, s.dtype, s.device, eos
    )
    expected_text = s.tokenizer.decode(expected, skip_special_tokens=True)
    for server in servers:
        ids, text, logprobs = server.greedy(s.opts.verify_prompt, s.opts.verify_tokens)
        same = strip_eos(ids, eos) == expected if ids is not None else text == expected_text
        gap = max((abs(a - b) for a, b in zip(logprobs or [], expected_lp)), default=0.0)
        tol = s.opts.verify_logprob_tol
        served = server.weight_version()
        if not same or (tol is not None and gap > tol) or served not in (None, version):
            raise RuntimeError(
                f"rollout server {server.addr} does not serve {version} after its reload: "
                f"greedy {ids if ids is not None else text!r} (weight version {served}), "
                f"trainer's greedy on {folder}: {expected if ids is not None else expected_text!r}"
                f", largest log-prob difference {gap:.2e} (tolerance {tol})"
            )
    return len(servers)


def refresh(s: "Session", step: int, say: Callable[[str], None]) -> list[str]:
    """Rank 0, before step `step`'s rollout: every server up (waited for, heartbeating phase
    "wait_server") and serving `s.version`; a server that is not is given `s.policy_dir` again
    and confirmed. The addresses re-pushed."""
    fixed = []
    timeout_s = s.rt.health_timeout_s()
    for server in s.servers:
        deadline = time.monotonic() + timeout_s
        while True:  # a server that dies while it is asked is waited for again, not fatal
            try:
                if _refresh_one(s, server, step, timeout_s, say):
                    fixed.append(server.addr)
                break
            except RolloutError as exc:
                if health_ok(server.addr) or time.monotonic() > deadline:
                    raise  # up and still failing, or never back: the run's problem
                say(f"grpo: rollout server {server.addr} went down while asked ({exc})")
    return fixed


def _refresh_one(
    s: "Session", server: RolloutServer, step: int, timeout_s: float, say: Callable[[str], None]
) -> bool:
    """refresh() for one server; True when it had to be given the weights again."""
    if not health_ok(server.addr):
        s.rt.heartbeat(step, "wait_server")
        say(
            f"grpo: rollout server {server.addr} is down: waiting up to {timeout_s:.0f}s "
            "for its /health"
        )
        wait_for_servers([server.addr], timeout_s)
        s.rt.heartbeat(step, "rollout")
    served = server.weight_version()
    if not stale(served, s.version):
        return False
    version = s.version or START_PUSH
    wanted = s.version or f"the start model ({START_PUSH})"
    say(
        f"grpo: rollout server {server.addr} serves weight version {served!r}, not "
        f"{wanted}: pushing {s.policy_dir} to it again"
    )
    server.reload(s.policy_dir, version)
    confirm(s, Path(s.policy_dir), version, [server], say)
    s.version = version  # from now on every server must say so
    return True
