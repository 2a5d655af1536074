"""``@tool`` signatures: JSON Schema from the annotations, validation, conversion.

:func:`compile_signature` reads a typed function once, when it is decorated,
and gives a :class:`ToolSignature`: the JSON Schema the model is shown, and
:meth:`ToolSignature.bind`, which checks the model's JSON arguments against
that schema and turns them into the Python values the parameters are
annotated with (an ``Enum`` member, a ``date``, a ``Path``, a ``tuple``...).
The function never sees a raw string where it asked for a ``date``.

=====================================  ===========================================
annotation                             JSON Schema (the function receives)
=====================================  ===========================================
``str`` ``int`` ``float`` ``bool``     ``string`` ``integer`` ``number`` ``boolean``
``Literal["a", 1]``                    ``enum`` (the literal value)
``Enum`` subclass (str / int values)   ``enum`` of the values (the member)
``datetime.date``                      ``string``, ``format: date`` (a ``date``)
``datetime.datetime``                  ``string``, ``format: date-time`` (a ``datetime``)
``pathlib.Path``                       non-empty ``string`` (a ``Path``)
``list[T]``, ``Sequence[T]``           ``array`` of ``T`` (a ``list``)
``set[T]``, ``frozenset[T]``           ``array`` of ``T`` (a ``set`` / ``frozenset``)
``tuple[T, ...]``                      ``array`` of ``T`` (a ``tuple``)
``tuple[A, B]``                        ``array`` with ``prefixItems`` (a ``tuple``)
``dict[str, T]``, ``Mapping[str, T]``  ``object`` of ``T`` values (a ``dict``)
``TypedDict``                          closed ``object`` with its keys (a ``dict``)
attrs class, dataclass                 closed ``object`` with its fields (an instance)
``A | B``, ``Optional[A]``             ``anyOf`` (the first member that fits)
``Any``, ``object``, no annotation     any JSON value, passed unchanged
``Annotated[T, "text"]``               ``T`` with that ``description``
``Annotated[T, Param(...)]``           ``T`` with a description and bounds
=====================================  ===========================================

Anything else (``bytes``, ``dict[int, str]``, an arbitrary class...) is a
:class:`TypeError` at decoration time naming the function, the parameter and
the type: a tool that cannot describe its input must not fail at call time.

A parameter whose annotation does not admit ``None`` treats a JSON ``null`` as
"not given": the default applies (a required one is ``missing_arg``).

The validator covers the part of JSON Schema these schemas use: ``type``,
``enum``, ``anyOf``, ``format`` (``date``, ``date-time``), ``minimum`` /
``maximum``, ``minLength``, ``items`` / ``prefixItems`` / ``minItems`` /
``maxItems``, ``properties`` / ``required`` / ``additionalProperties``.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, Sequence
from collections.abc import Set as AbstractSet
from pathlib import PurePath
from typing import Annotated, Any, Literal, NotRequired, Required, Union

import attrs
from attrs import field, frozen

from lich._converter import json_type_name
from lich.guards import ToolError

__all__ = [
    "Param",
    "ToolSignature",
    "compile_signature",
    "doc_summary",
    "param_docs",
    "validate_args",
]

_NoneType = type(None)
_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SUPPORTED = (
    "str, int, float, bool, Literal, Enum, datetime.date, datetime.datetime, pathlib.Path, "
    "list, set, frozenset, tuple, dict[str, ...], TypedDict, attrs classes, dataclasses, "
    "unions of these, Any"
)


def _check_bound(instance: Param, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        raise TypeError(f"Param {attribute.name} must be a finite number, got {value!r}")


@frozen
class Param:
    """Describes one ``@tool`` parameter, as ``Annotated`` metadata::

        @tool
        def top(limit: Annotated[int, Param("how many rows", minimum=1, maximum=100)] = 10):
            ...

    ``description`` becomes the parameter's schema ``description`` (a plain
    string in ``Annotated`` does the same, and either wins over the
    docstring). ``minimum`` and ``maximum`` are inclusive bounds for an
    ``int`` or ``float``; they are in the schema and checked before the call
    (``invalid_arg: limit: must be >= 1, got 0``). Bounds on any other type
    are a ``TypeError`` when the tool is decorated.
    """

    description: str | None = None
    minimum: float | None = field(default=None, kw_only=True, validator=_check_bound)
    maximum: float | None = field(default=None, kw_only=True, validator=_check_bound)

    def __attrs_post_init__(self) -> None:
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"Param minimum {self.minimum} is above maximum {self.maximum}")


# --------------------------------------------------------------------- compiling types

_Convert = Callable[[Any, str], Any]


def _same(value: Any, where: str) -> Any:
    return value


@frozen
class _Node:
    """One annotation, compiled: its schema and how a valid JSON value becomes the Python one."""

    schema: dict[str, Any]
    convert: _Convert = _same


class _Unsupported(Exception):
    """``tp`` (maybe deep inside a parameter's annotation) has no JSON form."""

    def __init__(self, tp: Any, why: str = "") -> None:
        super().__init__(tp, why)
        self.tp = tp
        self.why = why


def _show(tp: Any) -> str:
    if tp is _NoneType:
        return "None"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__
    return str(tp).replace("typing.", "")


def _scalar_kind(value: Any) -> str:
    """The JSON type of a literal or enum value (``integer`` for an integral float too)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, float) and not value.is_integer():
        return "number"
    return "integer" if isinstance(value, int | float) else "string"


def _json_equal(a: Any, b: Any) -> bool:
    # ``True == 1`` in Python, not in JSON; ``3 == 3.0`` in both.
    return bool(a == b) and (isinstance(a, bool) == isinstance(b, bool))


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"enum": values}
    kinds = {_scalar_kind(v) for v in values}
    if kinds == {"integer", "number"}:
        kinds = {"number"}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema


def _choice(pairs: list[tuple[Any, Any]]) -> _Convert:
    """Convert a JSON value to the Python value paired with it (validated to be one of them)."""

    def convert(value: Any, where: str) -> Any:
        return next(py for js, py in pairs if _json_equal(js, value))

    return convert


def _literal(args: tuple[Any, ...]) -> _Node:
    pairs: list[tuple[Any, Any]] = []
    for value in args:
        if isinstance(value, enum.Enum):
            pairs.append((_enum_value(type(value), value), value))
        elif value is None or isinstance(value, str | int | bool):
            pairs.append((value, value))
        else:
            raise _Unsupported(Literal[value], f"the literal {value!r} is not a JSON value")
    return _Node(_enum_schema([js for js, _ in pairs]), _choice(pairs))


def _enum_value(cls: type[enum.Enum], member: enum.Enum) -> Any:
    value = member.value
    if isinstance(value, str | int | bool) or (isinstance(value, float) and math.isfinite(value)):
        return value
    raise _Unsupported(
        cls, f"{cls.__qualname__}.{member.name} = {value!r} is not a JSON string or number"
    )


def _enum(cls: type[enum.Enum]) -> _Node:
    members = list(cls)
    if not members:
        raise _Unsupported(cls, f"{cls.__qualname__} has no members")
    pairs = [(_enum_value(cls, m), m) for m in members]
    return _Node(_enum_schema([js for js, _ in pairs]), _choice(pairs))


_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATETIME_RE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})?"
)


def _parse_date(text: str) -> datetime.date | None:
    """``YYYY-MM-DD`` as a date, else ``None`` (a malformed or impossible date)."""
    if not _DATE_RE.fullmatch(text):
        return None
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        return None


def _parse_datetime(text: str) -> datetime.datetime | None:
    """An RFC 3339 date-time as a datetime, else ``None``.

    More lenient than RFC 3339 where models often are: the seconds and the
    offset may be left out (no offset gives a naive datetime), and the
    separator may be a space.
    """
    if not _DATETIME_RE.fullmatch(text):
        return None
    try:
        return datetime.datetime.fromisoformat(f"{text[:10]}T{text[11:]}".upper())
    except ValueError:
        return None


# format -> (parser, what the error message says was expected)
_FORMATS: dict[str, tuple[Callable[[str], object | None], str]] = {
    "date": (_parse_date, "a date (YYYY-MM-DD)"),
    "date-time": (
        _parse_datetime,
        "a date-time (YYYY-MM-DDTHH:MM:SS, optionally with an offset such as Z or +02:00)",
    ),
}


def _parsed(parse: Callable[[str], object | None]) -> _Convert:
    def convert(value: Any, where: str) -> Any:
        result = parse(value)
        if result is None:  # validated before, so only a caller skipping validation gets here
            raise ToolError(f"invalid_arg: {where}: cannot parse {value!r}")
        return result

    return convert


def _array(item: _Node, collect: Callable[[Any], Any]) -> _Node:
    schema: dict[str, Any] = {"type": "array"}
    if item.schema:
        schema["items"] = item.schema

    def convert(value: Any, where: str) -> Any:
        return collect(item.convert(v, f"{where}[{i}]") for i, v in enumerate(value))

    return _Node(schema, convert)


def _tuple(args: tuple[Any, ...], seen: tuple[Any, ...]) -> _Node:
    if len(args) == 2 and args[1] is Ellipsis:
        return _array(_compile(args[0], seen), tuple)
    if not args:  # tuple[()]
        return _Node({"type": "array", "maxItems": 0}, lambda value, where: ())
    nodes = [_compile(a, seen) for a in args]
    schema = {
        "type": "array",
        "prefixItems": [n.schema for n in nodes],
        "minItems": len(nodes),
        "maxItems": len(nodes),
        "items": False,
    }

    def convert(value: Any, where: str) -> Any:
        pairs = enumerate(zip(nodes, value, strict=True))  # validated: as many as there are nodes
        return tuple(n.convert(v, f"{where}[{i}]") for i, (n, v) in pairs)

    return _Node(schema, convert)


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if key.isidentifier() else f"{where}[{json.dumps(key)}]"


def _mapping(tp: Any, args: tuple[Any, ...], seen: tuple[Any, ...]) -> _Node:
    if args and args[0] not in (str, Any):
        raise _Unsupported(tp, "JSON object keys are strings; use dict[str, ...]")
    value = _compile(args[1], seen) if args else _Node({})
    schema: dict[str, Any] = {"type": "object"}
    if value.schema:
        schema["additionalProperties"] = value.schema

    def convert(obj: Any, where: str) -> Any:
        return {k: value.convert(v, _key(where, k)) for k, v in obj.items()}

    return _Node(schema, convert)


# A default with no JSON form is left out of the schema (the function still gets it).
_NO_DEFAULT: Any = object()


def _json_default(value: Any) -> Any:
    """``value`` as JSON for a schema ``default``, or :data:`_NO_DEFAULT` when it has none."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or isinstance(value, str | int | bool):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _NO_DEFAULT
    if isinstance(value, datetime.date):  # and datetime
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, set | frozenset):
        try:
            value = sorted(value)  # a stable schema for a set of strings or numbers
        except TypeError:
            return _NO_DEFAULT
    if isinstance(value, list | tuple):
        items = [_json_default(v) for v in value]
        return _NO_DEFAULT if any(i is _NO_DEFAULT for i in items) else items
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        entries = {k: _json_default(v) for k, v in value.items()}
        return _NO_DEFAULT if any(v is _NO_DEFAULT for v in entries.values()) else entries
    return _NO_DEFAULT


def _record(
    tp: Any,
    fields: list[tuple[str, Any, Any]],
    seen: tuple[Any, ...],
    build: Callable[[dict[str, Any]], Any],
) -> _Node:
    """A closed object: ``fields`` are (key, annotation, default or ``_NO_DEFAULT``)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    nodes: dict[str, _Node] = {}
    for key, hint, default in fields:
        node = _compile(hint, (*seen, tp))
        nodes[key] = node
        prop = dict(node.schema)
        if default is _NO_DEFAULT:
            required.append(key)
        else:
            shown = _json_default(default)
            if shown is not _NO_DEFAULT and shown is not None:
                prop["default"] = shown
        properties[key] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False

    def convert(obj: Any, where: str) -> Any:
        values = {k: nodes[k].convert(v, _key(where, k)) for k, v in obj.items()}
        try:
            return build(values)
        except (TypeError, ValueError) as exc:  # e.g. an attrs validator refusing the value
            raise ToolError(f"invalid_arg: {where}: {exc}") from exc

    return _Node(schema, convert)


def _class_hints(tp: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp, include_extras=True)
    except Exception as exc:  # a name that only exists under TYPE_CHECKING, a typo...
        raise _Unsupported(tp, f"its annotations cannot be resolved ({exc})") from exc


def _typeddict(tp: Any, seen: tuple[Any, ...]) -> _Node:
    hints = _class_hints(tp)
    fields = []
    for key, hint in hints.items():
        # Under string annotations Python 3.11 cannot see NotRequired in
        # ``__required_keys__``; the resolved hint still carries it.
        marker = typing.get_origin(hint)
        required = marker is Required or (
            marker is not NotRequired and key in tp.__required_keys__
        )
        fields.append((key, hint, _NO_DEFAULT if required else None))
    return _record(tp, fields, seen, dict)


def _attrs_or_dataclass(tp: type, seen: tuple[Any, ...]) -> _Node:
    hints = _class_hints(tp)
    fields: list[tuple[str, Any, Any]] = []
    if attrs.has(tp):
        for a in attrs.fields(tp):
            if not a.init:
                continue
            default = a.default
            if default is attrs.NOTHING:
                default = _NO_DEFAULT
            elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = None  # optional, but no JSON default to show
            fields.append((a.alias, hints.get(a.name, a.type or Any), default))
    else:
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = None
            else:
                default = _NO_DEFAULT
            fields.append((f.name, hints.get(f.name, Any), default))
    return _record(tp, fields, seen, lambda values: tp(**values))


def _union(args: tuple[Any, ...], seen: tuple[Any, ...], top: bool) -> _Node:
    nullable = _NoneType in args
    nodes = [_compile(a, seen) for a in args if a is not _NoneType]
    if nullable and not top:
        nodes.append(_Node({"type": "null"}))
    if len(nodes) == 1:
        return nodes[0]

    def convert(value: Any, where: str) -> Any:
        # The first member that takes the value as it is (3 is an int, not a float),
        # then the first that takes it at all (3.0 for an int).
        for strict in (True, False):
            for node in nodes:
                if _check(value, node.schema, where, strict=strict) is None:
                    return node.convert(value, where)
        raise ToolError(f"invalid_arg: {where}: matches none of the allowed types")

    return _Node({"anyOf": [n.schema for n in nodes]}, convert)


def _annotated(args: tuple[Any, ...], seen: tuple[Any, ...], top: bool) -> _Node:
    inner, *metadata = args
    node = _compile(inner, seen, top=top)
    schema = dict(node.schema)
    for meta in metadata:
        if isinstance(meta, str):
            schema["description"] = meta
        elif isinstance(meta, Param):
            if meta.description is not None:
                schema["description"] = meta.description
            for key in ("minimum", "maximum"):
                bound = getattr(meta, key)
                if bound is None:
                    continue
                if schema.get("type") not in ("integer", "number"):
                    raise _Unsupported(inner, f"Param({key}=...) applies to int and float only")
                schema[key] = bound
        # Other metadata belongs to other libraries; it does not change the schema.
    return _Node(schema, node.convert)


def _compile(tp: Any, seen: tuple[Any, ...], *, top: bool = False) -> _Node:
    """``tp`` as a schema and a converter; ``top`` for a parameter's own annotation.

    A parameter's ``Optional`` is left out of its schema (``null`` there means
    "not given"); deeper down, ``None`` in a union is ``{"type": "null"}``.
    """
    if tp is Any or tp is object:
        return _Node({})
    if tp is None or tp is _NoneType:
        return _Node({"type": "null"})
    if isinstance(tp, typing.NewType):
        return _compile(tp.__supertype__, seen, top=top)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        return _annotated(args, seen, top)
    if origin in (Required, NotRequired):
        return _compile(args[0], seen, top=top)
    if origin is Literal:
        return _literal(args)
    if origin in (Union, types.UnionType):
        return _union(args, seen, top)
    if isinstance(tp, type):
        if tp in seen:
            raise _Unsupported(tp, f"{tp.__qualname__} refers to itself")
        if tp in _SCALARS:
            kind = _SCALARS[tp]
            if tp is int:
                return _Node({"type": kind}, lambda v, where: int(v))  # 3.0 is an integer
            if tp is float:
                return _Node({"type": kind}, lambda v, where: float(v))
            return _Node({"type": kind})
        if issubclass(tp, enum.Enum):
            return _enum(tp)
        # datetime is a date subclass: ask for exactly these two.
        if tp is datetime.datetime:
            return _Node({"type": "string", "format": "date-time"}, _parsed(_parse_datetime))
        if tp is datetime.date:
            return _Node({"type": "string", "format": "date"}, _parsed(_parse_date))
        if issubclass(tp, PurePath):
            path_type = tp
            return _Node({"type": "string", "minLength": 1}, lambda v, where: path_type(v))
        if typing.is_typeddict(tp):
            return _typeddict(tp, seen)
        if attrs.has(tp) or dataclasses.is_dataclass(tp):
            return _attrs_or_dataclass(tp, seen)
    base = origin or tp
    if base is tuple:
        if origin is None:  # a bare ``tuple``
            return _array(_Node({}), tuple)
        return _tuple(args, seen)
    if base in (list, Sequence, MutableSequence):
        return _array(_compile(args[0], seen) if args else _Node({}), list)
    if base in (set, frozenset, AbstractSet):
        collect = frozenset if base is frozenset else set
        return _array(_compile(args[0], seen) if args else _Node({}), collect)
    if base in (dict, Mapping, MutableMapping):
        return _mapping(tp, args, seen)
    raise _Unsupported(tp)


def _admits_none(hint: Any) -> bool:
    """Whether a parameter annotated ``hint`` may be called with ``None``."""
    hint = _strip_annotated(hint)
    if hint is Any or hint is object or hint is None or hint is _NoneType:
        return True
    origin = typing.get_origin(hint)
    if origin is Literal:
        return None in typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_admits_none(a) for a in typing.get_args(hint))
    return False


def _strip_annotated(hint: Any) -> Any:
    while typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    return hint


# --------------------------------------------------------------------- signatures


@frozen
class ToolSignature:
    """A function's parameters, compiled: the schema and the binding of JSON arguments."""

    schema: dict[str, Any]
    #: Parameters left out of the schema (the :class:`ToolContext` ones).
    skipped: tuple[str, ...]
    _nodes: Mapping[str, _Node]
    _nullable: frozenset[str]

    def bind(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``args`` validated against the schema and converted, as keyword arguments.

        Raises :class:`~lich.guards.ToolError` (``missing_arg: x``,
        ``invalid_arg: x: ...``, ``unexpected_arg: x``) before anything is
        converted, so the function only ever sees values of its own types.
        """
        problem = validate_args(args, self.schema)
        if problem:
            raise ToolError(problem)
        kwargs: dict[str, Any] = {}
        for name, value in args.items():
            if value is None:
                if name in self._nullable:
                    kwargs[name] = None
                continue  # null is "not given": the parameter's default applies
            kwargs[name] = self._nodes[name].convert(value, name)
        return kwargs


def compile_signature(
    fn: Callable[..., Any], skip: Callable[[str, Any], bool]
) -> ToolSignature:
    """Compile ``fn``'s parameters, leaving out those ``skip(name, annotation)`` picks.

    Raises :class:`TypeError` naming the function and the parameter when an
    annotation has no JSON form, cannot be resolved, or a parameter cannot be
    passed by name.
    """
    label = f"@tool {fn.__qualname__}"
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # NameError for a TYPE_CHECKING-only import, mostly
        raise TypeError(
            f"{label}: cannot resolve its annotations ({type(exc).__name__}: {exc}); "
            "names used in a tool's annotations must be importable at run time"
        ) from exc
    docs = param_docs(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    skipped: list[str] = []
    nodes: dict[str, _Node] = {}
    nullable: set[str] = set()
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name, Any)  # unannotated: any JSON value, as in Python typing
        if skip(name, _strip_annotated(hint)):
            skipped.append(name)
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(
                f"{label}: parameter {name!r} is positional-only; "
                "tool arguments are passed by name"
            )
        try:
            node = _compile(hint, (), top=True)
        except _Unsupported as exc:
            inner = "" if exc.tp is hint else f" ({_show(exc.tp)} inside it)"
            why = f": {exc.why}" if exc.why else f"; supported: {_SUPPORTED}"
            raise TypeError(
                f"{label}: parameter {name!r} is annotated {_show(hint)}, which has no JSON "
                f"Schema form{inner}{why}"
            ) from None
        prop = dict(node.schema)
        if "description" not in prop and name in docs:
            prop["description"] = docs[name]
        if param.default is inspect.Parameter.empty:
            required.append(name)
        else:
            shown = _json_default(param.default)
            if shown is not _NO_DEFAULT and shown is not None:
                prop["default"] = shown
        properties[name] = prop
        nodes[name] = node
        if _admits_none(hint):
            nullable.add(name)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return ToolSignature(schema, tuple(skipped), nodes, frozenset(nullable))


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


# --------------------------------------------------------------------- validation

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (_NoneType,),
}


def _type_error(value: Any, expected: str, strict: bool = False) -> str | None:
    """Why ``value`` is not of JSON type ``expected``, or ``None``.

    ``strict`` (used to pick a union member) wants the value's own kind: an
    integral float is no ``integer`` then, and an int no ``number``.
    """
    allowed = _JSON_TYPES.get(expected)
    if allowed is None:
        return None
    if isinstance(value, bool) and expected != "boolean":
        return f"expected {expected}, got boolean"
    if strict and expected == "number" and isinstance(value, int):
        return "expected number, got integer"  # so that ``float | int`` gives 3 to the int
    if expected == "integer" and isinstance(value, float) and value.is_integer() and not strict:
        return None  # JSON has one number type: 3.0 is an integer
    if not isinstance(value, allowed):
        return f"expected {expected}, got {json_type_name(value)}"
    return None


def _shown(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")


def _label(schema: Mapping[str, Any]) -> str | None:
    """A short name for an ``anyOf`` member in an error message, if it has one."""
    kind = schema.get("type")
    if not isinstance(kind, str) or "enum" in schema:
        return None
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if isinstance(fmt, str) else kind


def _any_of_problem(
    value: Any, members: Sequence[Mapping[str, Any]], where: str, strict: bool
) -> str | None:
    problems = [_check(value, m, where, strict) for m in members]
    if any(p is None for p in problems):
        return None
    # Only one member has the value's JSON type: its problem is the useful one.
    typed = [
        p for m, p in zip(members, problems, strict=True)
        if isinstance(m.get("type"), str) and _type_error(value, m["type"]) is None
    ]
    if len(typed) == 1:
        return typed[0]
    labels = [_label(m) for m in members]
    if not typed and all(labels):
        names = list(dict.fromkeys(typing.cast(list[str], labels)))
        expected = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        return f"invalid_arg: {where}: expected {expected}, got {json_type_name(value)}"
    return f"invalid_arg: {where}: matches none of the allowed types"


def _check(
    value: Any, schema: Mapping[str, Any], where: str, strict: bool = False
) -> str | None:
    if "anyOf" in schema:
        return _any_of_problem(value, schema["anyOf"], where, strict)
    expected = schema.get("type")
    if isinstance(expected, str):
        problem = _type_error(value, expected, strict)
        if problem:
            return f"invalid_arg: {where}: {problem}"
    if "enum" in schema and not any(_json_equal(value, v) for v in schema["enum"]):
        allowed = ", ".join(map(repr, schema["enum"]))
        return f"invalid_arg: {where}: must be one of {allowed}"
    if isinstance(value, str):
        return _check_string(value, schema, where)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _check_number(value, schema, where)
    if isinstance(value, list):
        return _check_array(value, schema, where, strict)
    if isinstance(value, dict):
        return _check_object(value, schema, where, strict)
    return None


def _check_string(value: str, schema: Mapping[str, Any], where: str) -> str | None:
    least = schema.get("minLength")
    if isinstance(least, int) and len(value) < least:
        return f"invalid_arg: {where}: must not be empty" if least == 1 else (
            f"invalid_arg: {where}: expected at least {least} characters"
        )
    fmt = _FORMATS.get(schema.get("format", ""))
    if fmt is not None and fmt[0](value) is None:
        return f"invalid_arg: {where}: expected {fmt[1]}, got {_shown(value)}"
    return None


def _check_number(value: float, schema: Mapping[str, Any], where: str) -> str | None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and value < low:
        return f"invalid_arg: {where}: must be >= {low}, got {value}"
    if high is not None and value > high:
        return f"invalid_arg: {where}: must be <= {high}, got {value}"
    return None


def _check_array(
    value: list[Any], schema: Mapping[str, Any], where: str, strict: bool
) -> str | None:
    least, most = schema.get("minItems"), schema.get("maxItems")
    if least is not None and least == most and len(value) != least:
        return f"invalid_arg: {where}: expected {least} items, got {len(value)}"
    if least is not None and len(value) < least:
        return f"invalid_arg: {where}: expected at least {least} items, got {len(value)}"
    if most is not None and len(value) > most:
        return f"invalid_arg: {where}: expected at most {most} items, got {len(value)}"
    prefix: Sequence[Mapping[str, Any]] = schema.get("prefixItems", ())
    for i, (item, sub) in enumerate(zip(value, prefix, strict=False)):
        problem = _check(item, sub, f"{where}[{i}]", strict)
        if problem:
            return problem
    rest = schema.get("items")
    if rest is False and len(value) > len(prefix):
        return f"invalid_arg: {where}: expected at most {len(prefix)} items, got {len(value)}"
    if isinstance(rest, Mapping):
        for i in range(len(prefix), len(value)):
            problem = _check(value[i], rest, f"{where}[{i}]", strict)
            if problem:
                return problem
    return None


def _check_object(
    value: dict[str, Any], schema: Mapping[str, Any], where: str, strict: bool
) -> str | None:
    properties: Mapping[str, Any] = schema.get("properties", {})
    for key in schema.get("required", ()):
        if key not in value:
            return f"invalid_arg: {where}: missing key {key!r}"
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        sub = properties.get(key)
        if sub is None:
            if extra is False:
                return f"invalid_arg: {where}: unexpected key {key!r}"
            if not isinstance(extra, Mapping):
                continue
            sub = extra
        problem = _check(item, sub, _key(where, key), strict)
        if problem:
            return problem
    return None


def validate_args(args: Mapping[str, Any], schema: Mapping[str, Any]) -> str | None:
    """The first problem with ``args`` against ``schema`` as a coded message, or ``None``.

    A ``null`` argument counts as not given: ``missing_arg`` when required,
    otherwise it is not checked further.
    """
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
