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
section (`sglang:` on a vLLM run) is one note. Each flag's key is kept (Translation's
flag_origins), so a flag the engine's parser refuses is said as the key the user wrote.
For our recipe the sections are an error that says where they go in our keys. A served teacher
of that backend gets the same section (AReaL's trainer starts its servers from it, with the
teacher's own model): `teacher.<backend>.*` and `teacher.server_args`, its model its own.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from launcher.config.peers import Context, Translation
from launcher.config.peers.edit import get, put
from launcher.config.schema import backend_of, typed
from launcher.spec import registry
from launcher.spec.entry import flag_of, left_out
from launcher.spec.errors import ConfigError

MODEL_KEYS = {"vllm": "model", "sglang": "model_path"}  # AReaL's name of the served model
OURS = {"vllm": {"distributed_executor_backend": "mp"}}  # what the launcher passes already


def translate(job: Any, context: Context, out: Translation) -> None:
    """The section of the rollout's backend applied to `job`'s rollout (an entry not ours:
    for ours the sections stay, an unknown key with unknown_hint's word on it)."""
    if context.ours_entry:
        return
    sections = {
        name: dict(get(job, name) or {})
        for name in registry.backend_names(registry.SERVE)
        if isinstance(get(job, name), dict)
    }
    backend = backend_of(get(job, "rollout.backend"))
    teacher = backend_of(get(job, "teacher.backend"))
    for name, section in sections.items():
        if section and name not in (backend, teacher):
            why = (
                f"the rollout runs {backend} (its servers take {backend}:)"
                if backend
                else "this run has no rollout"
            )
            out.notes.append(f"{name}: not read: {why}")
    if backend is not None and sections.get(backend):
        _apply(job, backend, sections[backend], out)
    if teacher is not None and sections.get(teacher):
        _apply(job, teacher, sections[teacher], out, engine="teacher")


def _apply(
    job: Any, backend: str, section: dict[str, Any], out: Translation, engine: str = "rollout"
) -> None:
    schema = registry.backend_options(backend)
    refused = registry.refused_flags(backend)
    known = {f.name for f in dataclasses.fields(schema)}
    options = dict(get(job, f"{engine}.{backend}") or {})  # what the user set: it wins
    server_args = dict(get(job, f"{engine}.server_args") or {})
    model_path = get(job, f"{engine}.model_path")
    for key, value in _areal_keys(backend, section, options).items():
        where = f"{backend}.{key}"
        if key == MODEL_KEYS.get(backend):
            if engine != "rollout":
                continue  # the teacher serves its own model (teacher.path)
            if not left_out(value) and str(value) != get(job, "model_path") and model_path is None:
                model_path = str(value)
            continue
        if left_out(value) or OURS.get(backend, {}).get(key) == value:
            continue
        if key in known:
            typed(backend, schema, {key: value}, f"{backend}'s options")  # its type, as written
            out.notes += _given(options, key, value, f"{engine}.{backend}.{key}", where)
            options.setdefault(key, value)
            continue
        flag = flag_of(key)
        if flag in refused:
            raise ConfigError(f"{where}: {flag} {refused[flag]}")
        out.notes += _given(server_args, key, value, f"{engine}.server_args.{key}", where)
        if key not in server_args:
            server_args[key] = value
            if engine == "rollout":  # the preflight checks the rollout's flags
                out.flag_origins[flag] = where
    put(job, f"{engine}.{backend}", options, backend)
    put(job, f"{engine}.server_args", server_args, backend)
    if model_path is not None and engine == "rollout":
        put(job, "rollout.model_path", model_path, f"{backend}.{MODEL_KEYS[backend]}")


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


def unknown_hint(key: str) -> str:
    """For our recipe, where AReaL's server sections go in our keys ("" for other keys)."""
    name = key.split(".")[0]
    if name not in registry.backend_names(registry.SERVE):
        return ""
    return (
        f"; {name}: is AReaL's server section, read for another trainer's entry: with our "
        f"recipe write rollout.{name}.KEY (the backend's options) or "
        f"rollout.server_args.KEY (any other flag)"
    )
