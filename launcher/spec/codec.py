"""One codec for the JSON of spec/'s dataclasses: the plan, the launch request, the cluster.

`to_json(value)` writes a dataclass as an object of its fields in declaration order (tuples as
lists, mappings as objects, nested dataclasses alike); `from_json(cls, data)` reads one back by
its fields' types (int, float, str, bool, Optional, tuples, mappings, nested dataclasses), a
missing key taking the field's default. What is not a field's name and value as they are is
data on the class, never code:

    field(metadata=json_key("from"))     the field's JSON key (WeightSync's src is "from")
    JSON_OPTIONAL = (("cpu_nodes", "groups"),)
                                         fields left out while every one of the group still
                                         holds its default (ClusterSpec writes its node groups
                                         only when it has some)

`JsonRecord` gives a dataclass `to_dict()` and `from_dict(data)` by this pair. A dataclass whose
JSON is a view rather than its fields (the plan's components: their allocation as its text and
sizes; the plan and the request: a schema number, masked secrets, the plan's run facts at the
top level) writes that frame itself and uses this for its parts.

Each class's writer and reader are made once from its fields' types: a plan of a thousand
nodes writes tens of thousands of ranks, so the per-value work is a dict built from its
attributes, nothing looked up again.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from typing import Any, Callable, Mapping, TypeVar, Union

T = TypeVar("T")
R = TypeVar("R", bound="JsonRecord")
KEY = "json_key"
Convert = Callable[[Any], Any]


def json_key(key: str) -> dict[str, str]:
    """A field's metadata naming its JSON key: `src: str = field(metadata=json_key("from"))`."""
    return {KEY: key}


def to_json(value: Any) -> Any:
    """`value` as JSON data: dataclasses as objects of their fields, tuples and lists as lists,
    mappings as objects; anything else as it is."""
    write = _writers.get(type(value))
    if write is not None:
        return write(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _class_writer(type(value))(value)
    if isinstance(value, (tuple, list)):
        return [(_writers.get(type(v)) or to_json)(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def from_json(cls: type[T], data: Mapping[str, Any]) -> T:
    """The dataclass `cls` that `to_json` wrote as `data` (the launcher's own JSON)."""
    fields = _readers.get(cls) or _class_readers(cls)
    return cls(**{name: read(data[key]) for name, key, read in fields if key in data})


class JsonRecord:
    """A dataclass written and read by to_json / from_json."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = to_json(self)
        return out

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        return from_json(cls, data)


_writers: dict[type, Convert] = {}
_readers: dict[type, tuple[tuple[str, str, Convert], ...]] = {}


def _class_writer(cls: type) -> Convert:
    """The function that writes an instance of dataclass `cls`, made once from its fields'
    types as dataclasses makes `__init__`: one dict display of its attributes, converted where
    their types say, so a plan's thousands of ranks write as fast as by hand."""
    if cls in _writers:
        return _writers[cls]
    _writers[cls] = lambda v: _writers[cls](v)  # a class that holds itself: resolved at call
    try:
        env: dict[str, Any] = {}
        exec(_writer_source(cls, env), env)  # made of field names, keys and types only
    except BaseException:
        del _writers[cls]
        raise
    _writers[cls] = env["write"]
    return _writers[cls]


def _writer_source(cls: type, env: dict[str, Any]) -> str:
    """`def write(v)` for dataclass `cls`; what it calls goes into `env`."""
    hints = typing.get_type_hints(cls)
    items = [
        f"{f.metadata.get(KEY, f.name)!r}: {_expression(hints[f.name], f'v.{f.name}', env)}"
        for f in dataclasses.fields(cls)
        if f.init
    ]
    lines = ["def write(v):", f"    out = {{{', '.join(items)}}}"]
    for group in getattr(cls, "JSON_OPTIONAL", ()):
        keys = [_key(cls, name) for name in group]
        same = " and ".join(f"out[{k!r}] == {_constant(cls, n, env)}" for k, n in zip(keys, group))
        lines += [f"    if {same}:", *(f"        del out[{k!r}]" for k in keys)]
    return "\n".join([*lines, "    return out"])


def _expression(hint: Any, x: str, env: dict[str, Any]) -> str:
    """Python source writing the value `x` of type `hint` as JSON data."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        inner = _expression(next(a for a in args if a is not type(None)), x, env)
        return x if inner == x else f"(None if {x} is None else {inner})"
    if origin in (tuple, list) and args:
        item = f"e{len(env)}"
        env[item] = None  # a name of its own
        written = _expression(args[0], item, env)
        return f"list({x})" if written == item else f"[{written} for {item} in {x}]"
    if origin in (dict, collections.abc.Mapping) and len(args) == 2:
        item = f"e{len(env)}"
        env[item] = None
        written = _expression(args[1], item, env)
        if written == item:
            return f"dict({x})"
        return f"{{str(k): {written} for k, {item} in {x}.items()}}"
    if hint in (int, float, str, bool):
        return x
    name = f"w{len(env)}"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        env[name] = _class_writer(hint)
    else:
        env[name] = to_json
    return f"{name}({x})"


def _key(cls: type, name: str) -> str:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return str(f.metadata.get(KEY, f.name))


def _constant(cls: type, name: str, env: dict[str, Any]) -> str:
    """The name, in `env`, of the JSON of field `name`'s default."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    made = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    env[f"d_{name}"] = to_json(made)
    return f"d_{name}"


def _class_readers(cls: type) -> tuple[tuple[str, str, Convert], ...]:
    """(field, JSON key, reader) of each field of dataclass `cls` (made once)."""
    hints = typing.get_type_hints(cls)
    _readers[cls] = tuple(
        (f.name, f.metadata.get(KEY, f.name), _reader(hints[f.name]))
        for f in dataclasses.fields(cls)
        if f.init
    )
    return _readers[cls]


def _reader(hint: Any) -> Convert:
    """The function that reads JSON data as a value of type `hint`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        inner = _reader(next(a for a in args if a is not type(None)))
        return lambda v: None if v is None else inner(v)
    if origin is tuple:
        item = _reader(args[0]) if args else _same
        return lambda v: tuple(item(x) for x in v)
    if origin in (dict, collections.abc.Mapping):
        value = _reader(args[1]) if len(args) == 2 else _same
        return lambda v: {str(k): value(x) for k, x in v.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return lambda v: from_json(hint, v)
    if hint in (int, float, str, bool):
        return hint
    return _same


def _same(value: Any) -> Any:
    return value
