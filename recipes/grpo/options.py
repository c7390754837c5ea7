"""The recipe's options: defaults from launcher/conf/recipe/grpo.yaml (the one place they are
written), then the plan's `recipe` dict, then `key=value` arguments. A key the recipe does not
know is an error, so a typo on the command line is not silently ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

import launcher
from launcher.spec.errors import ConfigError

if TYPE_CHECKING:  # the launcher imports this module for its schema: no urllib, no http there
    from launcher.trainer.runtime import RuntimePlan

DEFAULTS_FILE = Path(launcher.__file__).parent / "conf" / "recipe" / "grpo.yaml"


@dataclass
class GRPOOptions:
    """The recipe's options, typed. The launcher checks `recipe.*` against this schema at plan
    time (a typo is an error before anything starts); the values live in grpo.yaml."""

    steps: int
    prompts_per_step: int
    samples_per_prompt: int
    max_new_tokens: int
    temperature: float
    lr: float
    max_grad_norm: float
    kl_coef: float
    distill_loss_weight: float
    rl_loss_weight: float
    seed: int
    weights_dir: Optional[str]
    keep_versions: int
    verify_reload: bool
    verify_prompt: str
    verify_tokens: int
    verify_logprob_tol: Optional[float]
    save_every: int
    keep_checkpoints: int


_TYPES = {
    "int": int,
    "float": float,
    "bool": bool,
    "str": str,
    "Optional[str]": str,
    "Optional[float]": float,
}


def _coerce(name: str, value: Any, kind: str) -> Any:
    """Values from the command line arrive as text; give them the field's type."""
    if value is None:
        return None
    base = _TYPES[kind]
    if base is bool and isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"recipe.{name}={value}: expected true or false")
        return value.lower() in ("true", "1", "yes")
    try:
        return base(value)
    except (TypeError, ValueError):
        raise ConfigError(f"recipe.{name}={value}: expected {kind}") from None


def parse_args(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`key=value` pairs (trainer.args; `null` means None), and the `--flag [value]` engine
    flags the launcher appends for engines with their own trainers (megatron, archon), which
    this FSDP recipe has no use for: returned so the caller can say it ignores them."""
    out: dict[str, Any] = {}
    flags: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("-"):
            flags.append(arg)
            if (
                "=" not in arg
                and i < len(argv)
                and not argv[i].startswith("-")
                and "=" not in argv[i]
            ):
                flags.append(argv[i])
                i += 1
            continue
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ConfigError(f"{arg!r}: recipe arguments are key=value, e.g. steps=5")
        out[key.removeprefix("recipe.")] = None if value in ("null", "None") else value
    return out, flags


def load_options(rt: RuntimePlan, argv: list[str]) -> tuple[GRPOOptions, list[str]]:
    """The options, and the engine flags found in `argv` (ignored by this recipe)."""
    defaults = {
        k: v
        for k, v in (yaml.safe_load(DEFAULTS_FILE.read_text()) or {}).items()
        if k != "defaults"
    }  # Hydra's defaults list, not an option
    merged = rt.recipe_options(defaults)
    given, flags = parse_args(argv)
    merged.update(given)
    fields = {f.name: str(f.type) for f in dataclasses.fields(GRPOOptions)}
    unknown = sorted(set(merged) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown recipe option(s) {', '.join(unknown)}; "
            f"the grpo recipe takes: {', '.join(fields)}"
        )
    missing = sorted(set(fields) - set(merged))
    if missing:
        raise ConfigError(f"recipe option(s) {', '.join(missing)} missing from {DEFAULTS_FILE}")
    return GRPOOptions(**{k: _coerce(k, merged[k], fields[k]) for k in fields}), flags
