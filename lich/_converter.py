"""The one cattrs converter, private: every JSON/TOML form of lich's data goes through it.

All of its hooks are registered here, once, so no other module changes it as a
side effect of being imported. :mod:`lich.serialization` (messages, events,
transcripts) and :mod:`lich.settings` (configuration and plugin settings) are
the two public ways in.

What it adds to cattrs' defaults:

* strict scalars: JSON and TOML carry types, so a string where a number belongs
  (or 1.5 where an integer belongs, or ``true`` where a number belongs) is an
  error to report, never a value to coerce;
* strict collections: an array field refuses a string (cattrs would iterate its
  characters) and a table field refuses anything but a table;
* attrs classes refuse anything but a table, and run the field checks and
  parsers that :func:`lich.settings.setting` attaches, per field, so that
  every problem of a configuration is reported at once with its path;
* the message and event types leave their empty defaults out when written.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs
from cattrs.cols import (
    homogenous_tuple_structure_factory,
    is_any_set,
    is_mapping,
    is_sequence,
    list_structure_factory,
    mapping_structure_factory,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from lich.suggest import did_you_mean
from lich.types import (
    AssistantMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    Usage,
    json_type_name,
)

__all__ = ["CHECK", "PARSE", "converter", "describe_errors", "json_type_name"]

#: attrs field metadata keys set by :func:`lich.settings.setting`.
CHECK = "lich.settings.check"
PARSE = "lich.settings.parse"

converter = cattrs.Converter(forbid_extra_keys=True)


# ------------------------------------------------------------------ scalars

_EXPECTED = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _strict(kind: type[Any], accept: tuple[type[Any], ...]) -> None:
    def hook(value: Any, _: Any) -> Any:
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, accept):
            raise TypeError(f"expected {_EXPECTED[kind]}, got {json_type_name(value)}")
        return float(value) if kind is float else value

    converter.register_structure_hook(kind, hook)


_strict(str, (str,))
_strict(int, (int,))
_strict(float, (int, float))
_strict(bool, (bool,))

# Free-form JSON (tool arguments, raw tables): passed through untouched, but it must be
# an object.
converter.register_structure_hook_func(
    lambda t: t == dict[str, Any], lambda value, _: _object(value)
)


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {json_type_name(value)}")
    return dict(value)


def _literal_factory(t: Any) -> Callable[[Any, Any], Any]:
    choices = typing.get_args(t)
    listed = ", ".join(repr(c) for c in choices)

    def hook(value: Any, _: Any) -> Any:
        # 1 == True and 1.0 == 1: compare the type too, so `true` is no choice of 1.
        if not any(value == c and type(value) is type(c) for c in choices):
            raise ValueError(f"must be one of {listed}, got {value!r}")
        return value

    return hook


def _is_literal(t: Any) -> bool:
    origin: Any = typing.get_origin(t)
    return origin is typing.Literal


converter.register_structure_hook_factory(_is_literal, _literal_factory)


# -------------------------------------------------------------- collections


def _is_array(t: Any) -> bool:
    if t in (str, bytes):
        return False
    origin = typing.get_origin(t) or t
    if origin is tuple:
        args = typing.get_args(t)
        return len(args) == 2 and args[1] is Ellipsis  # tuple[X, ...]; fixed tuples differ
    return bool(is_sequence(t) or is_any_set(t))


def _array_factory(t: Any) -> Callable[[Any, Any], Any]:
    origin = typing.get_origin(t) or t
    if origin is tuple:
        inner = homogenous_tuple_structure_factory(t, converter)
        finish: Callable[[Any], Any] = lambda x: x  # noqa: E731
    else:
        (item,) = typing.get_args(t) or (Any,)
        inner = list_structure_factory(list[item], converter)  # type: ignore[valid-type]
        finish = frozenset if origin in (frozenset, typing.AbstractSet) else (
            set if is_any_set(t) else (lambda x: x))

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, list | tuple | set | frozenset):
            raise TypeError(f"expected an array, got {json_type_name(value)}")
        return finish(inner(value, t))

    return hook


def _table_factory(t: Any) -> Callable[[Any, Any], Any]:
    inner = mapping_structure_factory(t, converter)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a table, got {json_type_name(value)}")
        return inner(value, t)

    return hook


converter.register_structure_hook_factory(_is_array, _array_factory)
converter.register_structure_hook_factory(
    lambda t: t != dict[str, Any] and is_mapping(t), _table_factory
)


# ------------------------------------------------------------- attrs classes


def _field_hook(field: attrs.Attribute[Any]) -> Callable[[Any, Any], Any]:
    parse: Callable[[Any], Any] | None = field.metadata.get(PARSE)
    check: Callable[[Any], None] | None = field.metadata.get(CHECK)
    kind = field.type

    def hook(value: Any, _: Any) -> Any:
        out = parse(value) if parse is not None else converter.structure(value, kind)  # type: ignore[arg-type]
        if check is not None:
            check(out)
        return out

    return hook


def _lazy_hook() -> Callable[[Any, Any], Any]:
    """A field's structure hook, looked up when a value first needs it (for the field's
    type, which the generated function passes along with the value).

    cattrs generates an attrs class's structure function with every field's hook
    resolved up front, and each table or array field's hook is itself a generated
    (compiled) function: LichConfig alone has a dozen, and a one-shot run's file sets
    three or four keys. Resolving on first use generates only those of the keys
    present (B2-cold in docs/performance.md); the hook is the same either way.
    """
    resolved: Callable[[Any, Any], Any] | None = None

    def hook(value: Any, kind: Any) -> Any:
        nonlocal resolved
        if resolved is None:
            resolved = converter.get_structure_hook(kind)
        return resolved(value, kind)

    return hook


def _attrs_factory(cls: type[Any]) -> Callable[[Any, Any], Any]:
    attrs.resolve_types(cls)
    overrides = {
        f.name: override(struct_hook=_field_hook(f)
                         if PARSE in f.metadata or CHECK in f.metadata else _lazy_hook())
        for f in attrs.fields(cls)
        # Left to cattrs as they are: a field with an attrs converter (no hook is no
        # error there) and a bare Final (dispatched on its default's type).
        if f.init and f.type is not None and f.type is not typing.Final
        and (f.converter is None or PARSE in f.metadata or CHECK in f.metadata)
    }
    inner = make_dict_structure_fn(cls, converter, **overrides)  # type: ignore[arg-type]

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a table, got {json_type_name(value)}")
        return inner(value, cls)

    return hook


converter.register_structure_hook_factory(attrs.has, _attrs_factory)


# ---------------------------------------------------- messages and results

# Small outputs: the empty defaults of the common types are left out. Each function is
# generated (compiled) when a value of its type is first written, not at import: a
# one-shot run without tools writes no tool call or result.
_OMIT_IF_DEFAULT: dict[type[Any], str] = {
    ToolCall: "args_error",
    AssistantMessage: "tool_calls",
    ToolMessage: "is_error",
    ToolResult: "error",
    Usage: "estimated",
}


def _small_output(base: type[Any]) -> None:
    field = _OMIT_IF_DEFAULT[base]

    def matches(t: Any) -> bool:
        # A subclass is written as its base is (as a class-registered hook would be).
        return isinstance(t, type) and issubclass(t, base)

    def factory(_: Any) -> Callable[[Any], Any]:
        overrides: dict[str, Any] = {field: override(omit_if_default=True)}
        return make_dict_unstructure_fn(base, converter, **overrides)

    converter.register_unstructure_hook_factory(matches, factory)


for _base in _OMIT_IF_DEFAULT:
    _small_output(_base)


# ------------------------------------------------------------------- errors

_UNKNOWN = "\x00unknown\x00"


def describe_errors(exc: BaseException, path: str = "$") -> list[str]:
    """Flatten a structuring failure into ``"<$.path>: <message>"`` lines, one per problem.

    An unknown key is a line of its own, with the closest known key when there is one.
    A check whose message starts with its field's name (as attrs validators' messages
    do) has that name moved into the path.
    """
    if not isinstance(exc, cattrs.BaseValidationError):
        return [f"{path}: {_message(exc, None)}"]
    out: list[str] = []
    for line in cattrs.transform_error(exc, path=path, format_exception=_message):
        message, _, where = line.rpartition(" @ ")
        where = _bare_keys(where)
        if message.startswith(_UNKNOWN):
            keys, known = message.removeprefix(_UNKNOWN).split("\x00")
            out.extend(f"{where}.{k}: unknown key{did_you_mean(k, known.split())}"
                       for k in keys.split())
            continue
        name, sep, rest = message.partition(": ")
        if sep and name.isidentifier():
            if where.rsplit(".", 1)[-1] != name:
                where = f"{where}.{name}"  # a class-level check naming its field
            message = rest
        out.append(f"{where}: {message}")
    return out


def _bare_keys(path: str) -> str:
    # cattrs writes table keys as ['key']; a TOML user writes them as .key.
    return _KEY_IN_BRACKETS.sub(lambda m: f".{m.group(1)}", path)


def _message(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        known = [a.name for a in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
        return f"{_UNKNOWN}{' '.join(sorted(exc.extra_fields))}\x00{' '.join(known)}"
    if isinstance(exc, KeyError):
        return "required key missing"
    if isinstance(exc, TypeError | ValueError) and str(exc):
        return str(exc)
    return cattrs.v.format_exception(exc, type_)


_KEY_IN_BRACKETS = re.compile(r"\['([A-Za-z0-9_-]+)'\]")
