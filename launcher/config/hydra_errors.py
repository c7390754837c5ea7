"""Hydra's and OmegaConf's failures as one line for the user who typed the override.

Hydra raises several unrelated exception types for user mistakes and spreads the useful part
over a chain of causes and several lines; each branch below recognises one mistake and says
what to type instead (the quoted form, the closest key, the options of a group).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence


def explain_hydra_error(
    exc: BaseException, overrides: Sequence[str], free_form: tuple[str, ...] = ()
) -> str:
    """One line for a Hydra/OmegaConf failure, with the quoted form to type where that is the
    fix: the first of the explainers below that recognises it, else Hydra's own words."""
    failure = Failure(exc, flatten(exc), tuple(overrides), free_form)
    for explain in EXPLAINERS:
        said = explain(failure)
        if said is not None:
            return said
    return f"invalid configuration: {failure.text}"


@dataclass(frozen=True)
class Failure:
    """What went wrong: the exception, its chain as one line, the overrides, and the dicts
    whose keys are the user's own (a new key there takes `+`)."""

    exc: BaseException
    text: str
    overrides: tuple[str, ...]
    free_form: tuple[str, ...]


def _interpolation(f: Failure) -> Optional[str]:
    return unresolved(f.exc, f.overrides)


def _unparsable(f: Failure) -> Optional[str]:
    from hydra.errors import OverrideParseException

    if not (
        isinstance(f.exc, OverrideParseException)
        or f.text.startswith("Error parsing override")
        or "Could not override ''" in f.text
    ):
        return None
    failed = _failed_override(f.exc)  # Hydra names it: blame it, not an earlier one
    first = [failed] if failed is not None and failed in f.overrides else []
    return _parse_error(f.text, [*first, *f.overrides])


def _huge_number(f: Failure) -> Optional[str]:
    if not ("Exceeds the limit" in f.text and "digits" in f.text):  # Python's int() refused it
        return None
    huge = max(f.overrides, key=lambda o: max((len(d) for d in re.findall(r"\d+", o)), default=0))
    return (
        f"{huge.partition('=')[0]}: a number far too large ({len(huge)} characters); "
        "sizes are GPU counts"
    )


def _comma_list(f: Failure) -> Optional[str]:
    bad = _first(f.overrides, lambda o: "," in o.partition("=")[2])
    if "Ambiguous value" not in f.text or bad is None:
        return None
    key, _, value = bad.partition("=")
    quoted = f"\"{key}='{value}'\"" if bad.isprintable() else "it in quotes"
    return (
        f"{shown(bad)}: a comma list is a sweep to Hydra: quote it, {quoted} (or run a sweep "
        "with -m)"
    )


def _sweep_type(f: Failure) -> Optional[str]:
    match = re.search(r"does not support sweep type : (\w+)", f.text)
    if not match:
        return None
    sweep = match.group(1).lower().replace("_sweep", "")
    bad = _first(f.overrides, lambda o: f"{sweep}(" in o) or sweep
    return (
        f"{shown(bad)}: Hydra's basic sweeper runs lists and ranges, not {sweep}(): list the "
        "values (key=a,b,c), use range(start,stop,step), or choose a sweeper that samples "
        "(hydra/sweeper=optuna)"
    )


def _exists_already(f: Failure) -> Optional[str]:
    match = re.search(r"Could not append to config\. An item is already at '([^']+)'", f.text)
    return f"{match.group(1)!r} exists already: set it without the leading +" if match else None


def _unknown_key(f: Failure) -> Optional[str]:
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = f.exc.__cause__ if f.exc.__cause__ is not None else f.exc
    if not isinstance(cause, (ConfigAttributeError, ConfigKeyError)) or not cause.full_key:
        return None
    key = str(cause.full_key)
    if key.startswith(f.free_form):  # dicts whose keys are the user's own: Hydra wants `+`
        given = _first(f.overrides, lambda o: o.startswith(key)) or key
        return f"{key!r} adds a key to {key.rsplit('.', 1)[0]}: write it as +{shown(given)}"
    in_file = re.match(r"In '([^']+)': ", f.text)  # a config file's key, not an override's
    where = f" in config {in_file.group(1)!r}" if in_file else ""
    return f"unknown config key {key!r}{where} (`areal-launch --cfg job` prints every key)"


def _bad_value(f: Failure) -> Optional[str]:
    match = re.search(r"Error merging override (\S+)", f.text)
    if not match:
        return None
    detail = f.text.split("full_key:")[0].split(match.group(1), 1)[-1].strip(" .:")
    key, _, value = match.group(1).partition("=")
    if "is not a ListConfig" in detail and not value.startswith(("{", "[")):
        return (
            f"invalid value in {match.group(1)!r}: {key} is a list of strings: write "
            f"{key}=[{value},...] ({LIST_HOW})"
        )
    return f"invalid value in {match.group(1)!r}: {detail}"


def _no_such_config(f: Failure) -> Optional[str]:
    from hydra.errors import MissingConfigException

    if not isinstance(f.exc, MissingConfigException):
        return None
    wanted, options = str(f.exc.missing_cfg_file), list(f.exc.options or [])
    if not options:
        where = ", ".join(re.findall(r"path=(\S+)", f.text)) or "the config search path"
        return f"no primary config {wanted!r} (--config-name): looked up in {where}"
    close = difflib.get_close_matches(wanted.rpartition("/")[2], options, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"no config {wanted!r}: choose one of {' '.join(options)}{hint}"


EXPLAINERS: tuple[Callable[[Failure], Optional[str]], ...] = (
    _interpolation,
    _unparsable,
    _huge_number,
    _comma_list,
    _sweep_type,
    _exists_already,
    _unknown_key,
    _bad_value,
    _no_such_config,
)


def unresolved(exc: BaseException, overrides: Sequence[str] = ()) -> Optional[str]:
    """An interpolation that failed (`${oc.env:NOPE}`, `${nope}`) as one line naming its key
    (the exception's, else the first override that interpolates); None when `exc` is none."""
    chain: list[BaseException] = []
    link: Optional[BaseException] = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    cur = next(
        (
            c
            for c in chain
            if type(c).__name__.startswith("Interpolation") or "resolving interpolation" in str(c)
        ),
        None,
    )
    if cur is None:
        return None
    given = _first(overrides, lambda o: "${" in o)
    key = next((str(k) for c in chain for k in [getattr(c, "full_key", None)] if k), None) or (
        given.lstrip("+").partition("=")[0] if given else "a value"
    )
    message = str(cur).splitlines()[0].strip()
    fix = ""
    if "oc.env" in message or "Environment variable" in message:
        fix = " (export it, or give a default: ${oc.env:NAME,default})"
    return f"{key}: cannot resolve: {message}{fix}"


def _parse_error(text: str, overrides: Sequence[str]) -> str:
    bad = _first(overrides, lambda o: any(c in o for c in "()[]"))
    if bad is not None and bad.isprintable():
        key, _, value = bad.partition("=")
        if value.startswith("[") and not value.endswith("]"):  # split by the shell at a space
            return (
                f"cannot parse override {bad!r}: the list is not closed; {key} is a list of "
                f"strings, one argument: '{key}={value},...]' ({LIST_HOW})"
            )
        if value.startswith("[") and value.endswith("]"):  # a list: quote each element
            items = ",".join(f"'{v.strip()}'" for v in value[1:-1].split(",") if v.strip())
            return (
                f"cannot parse override {bad!r}: quote each list element that holds "
                f"'=', ':' or brackets: type \"{key}=[{items}]\""
            )
        bare = value.replace("(", "").replace(")", "")
        alt = f", or without parentheses: {key}={bare}" if "(" in value and "[" not in value else ""
        return (
            f"cannot parse override {bad!r}: Hydra's override grammar needs quotes around "
            f"values with ( ) or [ ]: type \"{key}='{value}'\"{alt}"
        )
    odd = _first(overrides, lambda o: not o.isascii())
    if odd is not None:
        key, _, value = odd.partition("=")
        if key.isascii():
            quoted = f"\"{key}='{value}'\"" if odd.isprintable() else "the value in quotes"
            return (
                f"cannot parse override {shown(odd)}: Hydra's override grammar takes "
                f"other than ASCII only in quotes: type {quoted}"
            )
        return f"cannot parse override {shown(odd)}: a config key is ASCII (--cfg job lists them)"
    word = _first(overrides, lambda o: o.startswith("=") or "=" not in o and not o.startswith("~"))
    if word is not None:
        return f"cannot parse override {shown(word)}: overrides are KEY=VALUE (or group=option)"
    return f"cannot parse override: {text}"


LIST_HOW = (
    "no spaces, or the whole override in quotes for the shell; an element that holds "
    "'=', ':' or brackets in quotes: \"k=['--config','a=b']\""
)


def _failed_override(exc: BaseException) -> Optional[str]:
    """The override Hydra's parser failed on (OverrideParseException.override)."""
    cur: Optional[BaseException] = exc
    seen: set[int] = set()
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        found = getattr(cur, "override", None)
        if isinstance(found, str):
            return found
        cur = cur.__cause__ or cur.__context__
    return None


def flatten(exc: BaseException) -> str:
    """Hydra wraps the useful message in __cause__; join the chain into one line."""
    parts, seen = [], set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts.append(str(cur))
        cur = cur.__cause__ or cur.__context__
    return " ".join(" ".join(parts).split())


def shown(text: str) -> str:
    """A value as one printable line (a newline inside would break the one-line promise)."""
    return repr(text) if not text.isprintable() else text


def _first(items: Sequence[str], pred: Callable[[str], bool]) -> Optional[str]:
    return next((i for i in items if pred(i)), None)
