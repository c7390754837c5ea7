"""AReaL's teacher, as AReaL 1.x and 2.0 write it, in our keys (docs/architecture.md §17).

AReaL 1.x's teacher is an actor-like engine: `teacher.backend: fsdp:d1p1t4` beside the actor's
keys; that is our teacher as written. AReaL 2.0's `TeacherConfig` chooses an engine:

    teacher.engine_type        rollout (AReaL's default) or train
    teacher.rollout.backend    a serving backend (vllm:d1t2): teacher.backend, so the teacher
                               is a serving component (servers, no weight sync)
    teacher.train.backend      the former actor-like teacher: teacher.backend, and the train
                               section's keys our schema has (path, dtype, mb_spec, ...) as ours
    <section>.scheduling_spec  teacher.scheduling_spec / scheduling_strategy (areal.py reads it)
    teacher.path               teacher.model_path (its own model)
    teacher.offload: true      teacher.offload.weight (a served teacher releases its weights)
    rl_loss_weight,            the recipe's options of the same name for our recipe (the
    distill_loss_weight        distillation term); an entry not ours reads them itself

Every key stays the entry's as written (config.handoff): this only writes ours.
"""

from __future__ import annotations

from typing import Any

from launcher.config.peers import Context, Translation
from launcher.config.peers.areal_allocation import explicit_keys
from launcher.config.peers.edit import drop_empty, get, has, put, take
from launcher.spec.errors import ConfigError

ENGINE_TYPES = ("rollout", "train")
SECTION_KEYS = ("scheduling_spec", "scheduling_strategy")  # read by areal.py as the teacher's
TRAIN_KEYS = ("dtype", "gradient_checkpointing", "mb_spec")  # AReaL's and ours alike
LOSS_WEIGHTS = ("rl_loss_weight", "distill_loss_weight")  # the recipe's, for our recipe


def translate(job: Any, context: Context, out: Translation) -> None:
    """The teacher section in `job` as ours (see the module's table); AReaL 1.x's as it is."""
    if get(job, "teacher") is None:
        return
    two = any(has(job, f"teacher.{k}") for k in ("engine_type", *ENGINE_TYPES))
    if two:
        _engine(job, context, out)
    path = take(job, "teacher.path")
    if path:
        put(job, "teacher.model_path", str(path), "teacher.path")
        out.spellings["teacher.model_path"] = "teacher.path"
    _offload(job, out)
    if context.ours_entry:
        for key in LOSS_WEIGHTS:
            value = take(job, f"teacher.{key}")
            if value is not None:
                put(job, f"recipe.{key}", value, f"teacher.{key}")
                out.spellings[f"recipe.{key}"] = f"teacher.{key}"


def _engine(job: Any, context: Context, out: Translation) -> None:
    """AReaL 2.0's choice of engine: its section's backend is the teacher's."""
    kind = str(take(job, "teacher.engine_type") or "rollout")
    if kind not in ENGINE_TYPES:
        raise ConfigError(f"teacher.engine_type={kind!r}: choose rollout or train")
    key = f"teacher.{kind}"
    backend = take(job, f"{key}.backend")
    if not backend:
        raise ConfigError(
            f"teacher.engine_type={kind} needs {key}.backend, e.g. "
            f"{key}.backend={'vllm:d1t2' if kind == 'rollout' else 'fsdp:d4'} (AReaL 2.0's "
            "teacher runs on the engine its section names)"
        )
    given = get(job, "teacher.backend")
    if "teacher.backend" in explicit_keys(context.overrides):
        out.warnings.append(f"teacher.backend={given} wins over {key}.backend={backend}")
    elif given is not None:
        raise ConfigError(
            f"teacher.backend={given} (AReaL 1.x's teacher) and {key}.backend={backend} "
            f"(AReaL 2.0's) are both set: keep one"
        )
    else:
        put(job, "teacher.backend", str(backend), f"{key}.backend")
        out.spellings["teacher.backend"] = f"{key}.backend"
    moved = [*SECTION_KEYS, "path", *(TRAIN_KEYS if kind == "train" else ())]
    written = dict((context.raw or {}).get("teacher") or {})  # teacher.X the file set itself
    explicit = explicit_keys(context.overrides)
    for name in moved:
        value = take(job, f"{key}.{name}")
        if value is not None and name not in written and f"teacher.{name}" not in explicit:
            for leaf, part in _leaves(name, value):  # a typed node takes its keys one by one
                put(job, f"teacher.{leaf}", part, f"{key}.{leaf}")
            out.spellings[f"teacher.{name}"] = f"{key}.{name}"
    drop_empty(job, key)  # what is left is the entry's (AReaL's engine keys)
    other = "train" if kind == "rollout" else "rollout"
    if get(job, f"teacher.{other}"):
        out.notes.append(
            f"teacher.{other}: not read: teacher.engine_type={kind} runs teacher.{kind}"
        )


def _leaves(key: str, value: Any) -> list[tuple[str, Any]]:
    """(dotted key, value) of each leaf of a training key's value (`mb_spec: {...}`); a
    scheduling key is AReaL's whole (areal.py reads it)."""
    if not isinstance(value, dict) or key in SECTION_KEYS or not value:
        return [(key, value)]
    return [leaf for k, v in value.items() for leaf in _leaves(f"{key}.{k}", v)]


def _offload(job: Any, out: Translation) -> None:
    """AReaL's `teacher.offload: true` (release the teacher between steps) as ours."""
    value = get(job, "teacher.offload")
    if not isinstance(value, bool):
        return
    take(job, "teacher.offload")
    if value:
        put(job, "teacher.offload.weight", True, "teacher.offload")
        out.spellings["teacher.offload.weight"] = "teacher.offload"
