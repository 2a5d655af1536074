"""JSON Schema from a typed Python signature, and a small validator for it.

Only the part of JSON Schema that tool parameters use: ``string``,
``integer``, ``number``, ``boolean``, ``array`` (with ``items``), ``object``,
``enum``, ``required`` and ``additionalProperties: false``.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

from lich.types import json_type_name

__all__ = ["doc_summary", "param_docs", "schema_for_signature", "validate_args"]

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for_type(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if origin is Literal:
        values = list(args)
        kinds = {_SCALARS.get(type(v)) for v in values}
        schema: dict[str, Any] = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if origin in (list, tuple, Sequence, set, frozenset) or tp in (list, tuple):
        item = args[0] if args else Any
        return {"type": "array", "items": _schema_for_type(item)} if item is not Any else {
            "type": "array"
        }
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        return {"type": "object"}
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return _schema_for_type(members[0])
        return {"anyOf": [_schema_for_type(m) for m in members]}
    return {}


def param_docs(doc: str | None) -> dict[str, str]:
    """Parameter descriptions from ``:param x:`` lines or a Google-style ``Args:`` block."""
    if not doc:
        return {}
    out: dict[str, str] = {}
    for match in re.finditer(r":param\s+(\w+):\s*(.+)", doc):
        out[match.group(1)] = match.group(2).strip()
    block = re.search(r"^\s*(?:Args|Arguments|Parameters):\s*\n((?:\s+.+\n?)+)", doc, re.M)
    if block:
        for line in block.group(1).splitlines():
            m = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)", line)
            if m:
                out.setdefault(m.group(1), m.group(2).strip())
    return out


def doc_summary(doc: str | None) -> str:
    """The docstring up to its first blank line, on one line."""
    if not doc:
        return ""
    first = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(first.split())


def schema_for_signature(
    fn: Callable[..., Any], skip: Callable[[str, Any], bool]
) -> dict[str, Any]:
    """A JSON Schema object for ``fn``'s parameters, leaving out those ``skip`` names."""
    hints = typing.get_type_hints(fn)
    docs = param_docs(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name, Any)
        if skip(name, hint):
            continue
        prop = _schema_for_type(hint)
        if name in docs:
            prop["description"] = docs[name]
        if param.default is inspect.Parameter.empty:
            required.append(name)
        elif param.default is not None:
            prop["default"] = param.default
        properties[name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _type_error(value: Any, expected: str) -> str | None:
    allowed = _JSON_TYPES.get(expected)
    if allowed is None:
        return None
    if isinstance(value, bool) and expected != "boolean":
        return f"expected {expected}, got boolean"
    if expected == "integer" and isinstance(value, float) and value.is_integer():
        return None
    if not isinstance(value, allowed):
        return f"expected {expected}, got {json_type_name(value)}"
    return None


def _check(value: Any, schema: Mapping[str, Any], where: str) -> str | None:
    if "anyOf" in schema:
        if all(_check(value, s, where) for s in schema["anyOf"]):
            return f"invalid_arg: {where}: matches none of the allowed types"
        return None
    expected = schema.get("type")
    if isinstance(expected, str):
        problem = _type_error(value, expected)
        if problem:
            return f"invalid_arg: {where}: {problem}"
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(map(repr, schema["enum"]))
        return f"invalid_arg: {where}: must be one of {allowed}"
    items = schema.get("items")
    if expected == "array" and isinstance(items, Mapping):
        for i, item in enumerate(value):
            problem = _check(item, items, f"{where}[{i}]")
            if problem:
                return problem
    return None


def validate_args(args: Mapping[str, Any], schema: Mapping[str, Any]) -> str | None:
    """The first problem with ``args`` against ``schema`` as a coded message, or ``None``."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in args or args[name] is None:
            return f"missing_arg: {name}"
    if schema.get("additionalProperties") is False:
        for name in args:
            if name not in properties:
                return f"unexpected_arg: {name}"
    for name, value in args.items():
        sub = properties.get(name)
        if sub is None or value is None:
            continue
        problem = _check(value, sub, name)
        if problem:
            return problem
    return None
