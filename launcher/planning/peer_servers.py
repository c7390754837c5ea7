"""AReaL's `vllm:` and `sglang:` sections: the rollout servers' options, as AReaL's launcher
turns them into a server's command line (AReaL's vLLMConfig/SGLangConfig.build_args).

AReaL writes every key of the section as `--kebab-case value`: true is the bare flag; null,
false, "" and an empty list are left out. Here, for the section of the backend the rollout
runs, a key our backend's Options declares sets `rollout.<backend>.KEY` and every other key
becomes a flag in `rollout.server_args`; what the user set in our keys wins (a note says so
where the values differ). AReaL's own keys are not flags: the model (`vllm.model`,
`sglang.model_path`, the rollout's model_path unless rollout.model_path is set),
`sglang.enable_multithread_load` (AReaL passes it inside --model-loader-extra-config) and
`sglang.dp_size` (AReaL's attention-DP size: rollout.sglang.attn_dp_size). The other
section (`sglang:` on a vLLM run) is one note. `origins` names each flag's key, so a flag the
engine's parser refuses is said as the key the user wrote (launcher.node.preflight).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from launcher.config.schema import LaunchConfig, typed
from launcher.spec import registry
from launcher.spec.entry import flag_of, left_out
from launcher.spec.errors import ConfigError

MODEL_KEYS = {"vllm": "model", "sglang": "model_path"}  # AReaL's name of the served model
OURS = {"vllm": {"distributed_executor_backend": "mp"}}  # what the launcher passes already


@dataclass(frozen=True)
class Applied:
    """The config with the section applied, what was not honoured (one note each), and
    where each flag it added was written (`--max-num-seqs` -> `vllm.max_num_seqs`)."""

    spec: LaunchConfig
    notes: tuple[str, ...] = ()
    origins: Mapping[str, str] = field(default_factory=dict)


def apply(
    spec: LaunchConfig, rollout_backend: Optional[str], sections: Mapping[str, Mapping[str, Any]]
) -> Applied:
    """`spec` with the section of the rollout's backend (None: no rollout) applied."""
    backend = rollout_backend
    notes = [
        f"{name}: not read: "
        + (
            f"the rollout runs {backend} (its servers take {backend}:)"
            if backend
            else "this run has no rollout"
        )
        for name, section in sections.items()
        if section and name != backend
    ]
    if backend is None or not sections.get(backend):
        return Applied(spec, tuple(notes))
    section = dict(sections[backend])
    rollout = spec.rollout
    known = {f.name for f in dataclasses.fields(registry.backend_options(backend))}
    options = dict(getattr(rollout, backend) or {})  # what the user set: it wins
    server_args = dict(rollout.server_args)
    refused = registry.refused_flags(backend)
    model_path: Optional[str] = rollout.model_path
    origins: dict[str, str] = {}
    for key, value in _areal_keys(backend, section, options).items():
        where = f"{backend}.{key}"
        if key == MODEL_KEYS.get(backend):
            if not left_out(value) and str(value) != spec.model_path and model_path is None:
                model_path = str(value)
            continue
        if left_out(value) or OURS.get(backend, {}).get(key) == value:
            continue
        if key in known:
            typed(
                backend, registry.backend_options(backend), {key: value}, f"{backend}'s options"
            )  # its type checked, named as written
            notes += _given(options, key, value, f"rollout.{backend}.{key}", where)
            options.setdefault(key, value)
            continue
        flag = flag_of(key)
        if flag in refused:
            raise ConfigError(f"{where}: {flag} {refused[flag]}")
        notes += _given(server_args, key, value, f"rollout.server_args.{key}", where)
        if key not in server_args:
            server_args[key] = value
            origins[flag] = where
    new = dataclasses.replace(rollout, server_args=server_args, model_path=model_path)
    setattr(new, backend, options)  # the backend's sub-key (schema._with_backend_options)
    return Applied(dataclasses.replace(spec, rollout=new), tuple(notes), origins)


def _areal_keys(
    backend: str, section: dict[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The section with AReaL's SGLang keys that are no flag of that name as AReaL means
    them: enable_multithread_load inside --model-loader-extra-config, dp_size the
    attention-DP size (1, SGLang's default, is no flag)."""
    if backend != "sglang":
        return section
    out = dict(section)
    if out.pop("enable_multithread_load", None):
        out["model_loader_extra_config"] = json.dumps(
            {"enable_multithread_load": True}, separators=(",", ":")
        )
    dp = out.get("dp_size")
    if dp is not None and (out.get("enable_dp_attention") or options.get("enable_dp_attention")):
        out.pop("dp_size")
        out.setdefault("attn_dp_size", dp)
    elif dp == 1:
        out.pop("dp_size")
    return out


def _given(ours: Mapping[str, Any], key: str, value: Any, our_key: str, where: str) -> list[str]:
    if key in ours and ours[key] != value:
        return [f"{where}={value} not used: {our_key}={ours[key]} is"]
    return []


def flag_origins(rollout: Any, peer: Mapping[str, str]) -> dict[str, str]:
    """Every flag the user gave the rollout's servers, with where it was written: AReaL's
    section (`peer`, from apply), `rollout.server_args.<key>`, `rollout.extra_args`. What the
    preflight names when the engine's own parser refuses one."""
    origins = dict(peer)
    for key in rollout.server_args:
        origins.setdefault(flag_of(str(key)), f"rollout.server_args.{key}")
    for arg in rollout.extra_args:
        if str(arg).startswith("-"):
            origins.setdefault(str(arg).partition("=")[0], "rollout.extra_args")
    return origins
