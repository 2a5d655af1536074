"""``@tool`` schemas: every supported annotation, the conversion of JSON arguments
into the annotated Python values, the validator's messages, and the TypeError for
an annotation with no JSON form."""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, NewType, NotRequired, TypedDict

import attrs
import jsonschema
import pytest

from lich import Param, ToolContext, tool
from lich._schema import validate_args
from lich.tools import Tool, ToolExecutor, ToolRegistry
from lich.types import ToolCall, ToolResult


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Options(TypedDict):
    name: str
    size: NotRequired[Annotated[int, "in bytes"]]


@attrs.frozen
class Point:
    x: int = attrs.field(validator=attrs.validators.ge(0))
    _label: str = "origin"  # attrs passes it as ``label``


@dataclasses.dataclass
class Box:
    width: float
    tags: list[str] = dataclasses.field(default_factory=list)


class Node(TypedDict):
    children: list[Node]


class Plain:
    """A class with no JSON form."""


class Shape(enum.Enum):
    SQUARE = (1, 1)


UserId = NewType("UserId", int)
_OPAQUE = object()  # a default with no JSON form


class _ForeignMetadata:
    """Another library's ``Annotated`` metadata; its repr is stable, as test ids must be
    (pytest-xdist compares the ids its workers collect)."""

    def __repr__(self) -> str:
        return "ForeignMetadata()"


def assert_valid_schema(t: Tool) -> None:
    jsonschema.Draft202012Validator.check_schema(dict(t.parameters))


def schema_of(annotation: Any) -> dict[str, Any]:
    """The property schema ``@tool`` makes for one parameter ``x: annotation``."""

    def f(x: Any) -> str:
        return ""

    f.__annotations__ = {"x": annotation, "return": str}
    made = tool(f)
    assert_valid_schema(made)
    prop: dict[str, Any] = made.parameters["properties"]["x"]
    return prop


async def call(t: Tool, args: dict[str, Any], tmp_path: Path) -> ToolResult:
    registry = ToolRegistry()
    registry.register(t)
    return await ToolExecutor(registry, work_dir=tmp_path).execute(ToolCall("1", t.name, args))


# ------------------------------------------------------------------ schemas


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (UserId, {"type": "integer"}),
        (Color, {"enum": ["red", "green"], "type": "string"}),
        (Level, {"enum": [1, 2], "type": "integer"}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Literal[Color.RED, Color.GREEN], {"enum": ["red", "green"], "type": "string"}),
        (date, {"type": "string", "format": "date"}),
        (datetime, {"type": "string", "format": "date-time"}),
        (Path, {"type": "string", "minLength": 1}),
        (PurePosixPath, {"type": "string", "minLength": 1}),
        (
            tuple[int, str],
            {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
             "minItems": 2, "maxItems": 2, "items": False},
        ),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (tuple[()], {"type": "array", "maxItems": 0}),
        (tuple, {"type": "array"}),
        (list, {"type": "array"}),
        (Sequence[Color], {"type": "array", "items": {"enum": ["red", "green"], "type": "string"}}),
        (set[str], {"type": "array", "items": {"type": "string"}}),
        (list[list[int]],
         {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}),
        (list[int | None], {"type": "array", "items": {"anyOf": [{"type": "integer"},
                                                                 {"type": "null"}]}}),
        (dict, {"type": "object"}),
        (dict[str, Any], {"type": "object"}),
        (Mapping[str, date], {"type": "object",
                              "additionalProperties": {"type": "string", "format": "date"}}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (int | None, {"type": "integer"}),  # a parameter's null means "not given"
        (typing.Optional[date], {"type": "string", "format": "date"}),  # noqa: UP045
        (
            Options,
            {"type": "object",
             "properties": {"name": {"type": "string"},
                            "size": {"type": "integer", "description": "in bytes"}},
             "required": ["name"], "additionalProperties": False},
        ),
        (
            Point,
            {"type": "object",
             "properties": {"x": {"type": "integer"},
                            "label": {"type": "string", "default": "origin"}},
             "required": ["x"], "additionalProperties": False},
        ),
        (
            Box,
            {"type": "object",
             "properties": {"width": {"type": "number"},
                            "tags": {"type": "array", "items": {"type": "string"}}},
             "required": ["width"], "additionalProperties": False},
        ),
        (Annotated[int, "how many"], {"type": "integer", "description": "how many"}),
        (
            Annotated[float, Param("a share", minimum=0, maximum=1)],
            {"type": "number", "description": "a share", "minimum": 0, "maximum": 1},
        ),
        (Annotated[int, Param(minimum=1)], {"type": "integer", "minimum": 1}),
        (Annotated[str, "other libraries' metadata is ignored", _ForeignMetadata()],
         {"type": "string", "description": "other libraries' metadata is ignored"}),
        (Annotated[int, "a limit"] | None, {"type": "integer", "description": "a limit"}),
        (Any, {}),
        (object, {}),
    ],
    ids=repr,
)
def test_schema_for_each_supported_annotation(annotation: Any, expected: dict[str, Any]) -> None:
    assert schema_of(annotation) == expected


def test_unannotated_parameters_take_any_json_value_unchanged() -> None:
    seen: list[Any] = []

    @tool
    def anything(value, other: Any = None) -> str:  # type: ignore[no-untyped-def]
        """Anything."""
        seen.append((value, other))
        return ""

    assert_valid_schema(anything)
    assert anything.parameters["properties"] == {"value": {}, "other": {}}
    args = {"value": {"a": [1, "x", None]}, "other": None}
    anything.execute(args, ToolContext(work_dir=Path()))
    assert seen == [({"a": [1, "x", None]}, None)]


def test_descriptions_from_annotated_win_over_the_docstring() -> None:
    @tool
    def described(a: Annotated[int, "from Annotated"], b: int,
                  c: Annotated[int, Param("from Param")]) -> str:
        """Described.

        :param a: from the docstring
        :param b: from the docstring
        :param c: from the docstring
        """
        return ""

    props = described.parameters["properties"]
    assert [props[k]["description"] for k in "abc"] == [
        "from Annotated", "from the docstring", "from Param"
    ]


def test_defaults_are_shown_in_their_json_form() -> None:
    @tool
    def defaults(color: Color = Color.GREEN, day: date = date(2024, 2, 29),
                 at: datetime = datetime(2024, 1, 2, 3, 4, tzinfo=UTC),
                 where: Path = Path("notes"), pair: tuple[int, str] = (1, "a"),
                 tags: frozenset[str] = frozenset({"b", "a"}),
                 opaque: Any = _OPAQUE, nothing: int | None = None) -> str:
        """Defaults."""
        return ""

    assert_valid_schema(defaults)
    props = defaults.parameters["properties"]
    assert {k: p.get("default") for k, p in props.items()} == {
        "color": "green",
        "day": "2024-02-29",
        "at": "2024-01-02T03:04:00+00:00",
        "where": "notes",
        "pair": [1, "a"],
        "tags": ["a", "b"],  # sorted, so the schema is the same on every run
        "opaque": None,  # no JSON form: left out of the schema
        "nothing": None,
    }
    assert "required" not in defaults.parameters


# ------------------------------------------------------------------ conversion


async def test_the_function_receives_values_of_its_annotated_types(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    @tool
    def typed(color: Color, level: Level, day: date, at: datetime, where: Path,
              pair: tuple[int, str], nums: tuple[int, ...], tags: set[str],
              frozen: frozenset[int], mode: Literal["a", 3], opts: Options, point: Point,
              box: Box, counts: dict[str, int], ratio: float, n: int, who: UserId,
              nested: list[tuple[Color, date]], ctx: ToolContext) -> str:
        """Typed."""
        seen.update({k: v for k, v in locals().items() if k not in ("ctx", "seen")})
        return "ok"

    assert_valid_schema(typed)
    args = {
        "color": "green", "level": 2, "day": "2024-02-29", "at": "2024-01-02T03:04:05Z",
        "where": "sub/file.txt", "pair": [1, "a"], "nums": [1, 2.0], "tags": ["x", "x", "y"],
        "frozen": [3], "mode": 3.0, "opts": {"name": "n", "size": 2.0},
        "point": {"x": 1.0, "label": "p"}, "box": {"width": 2}, "counts": {"a": 1.0},
        "ratio": 1, "n": 4.0, "who": 7, "nested": [["red", "2024-01-01"]],
    }
    result = await call(typed, args, tmp_path)
    assert result == ToolResult(ok=True, output="ok"), result
    expected = {
        "color": Color.GREEN, "level": Level.HIGH, "day": date(2024, 2, 29),
        "at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        "where": Path("sub/file.txt"), "pair": (1, "a"), "nums": (1, 2), "tags": {"x", "y"},
        "frozen": frozenset({3}), "mode": 3, "opts": {"name": "n", "size": 2},
        "point": Point(1, "p"), "box": Box(2.0), "counts": {"a": 1}, "ratio": 1.0, "n": 4,
        "who": 7, "nested": [(Color.RED, date(2024, 1, 1))],
    }
    assert seen == expected
    # Equal is not enough: 4.0 == 4 and 1 == 1.0, and an IntEnum equals its value.
    types_seen = {k: type(v) for k, v in seen.items()}
    assert types_seen == {k: type(v) for k, v in expected.items()}
    assert type(seen["nums"][1]) is int
    assert type(seen["opts"]["size"]) is int
    assert type(seen["point"].x) is int
    assert type(seen["box"].width) is float
    assert type(seen["counts"]["a"]) is int


@pytest.mark.parametrize(
    ("annotation", "value", "expected"),
    [
        (int | str, "3", "3"),
        (int | str, 3, 3),
        (float | int, 3, 3),  # the member that takes the value as it is
        (float | int, 3.5, 3.5),
        (int | float, 3.0, 3.0),
        (date | str, "2024-01-02", date(2024, 1, 2)),
        (date | str, "soon", "soon"),
        (list[int] | Color, "red", Color.RED),
        (list[int | None], [1, None], [1, None]),
        (datetime, "2024-01-02 03:04", datetime(2024, 1, 2, 3, 4)),  # no offset: naive
        (datetime, "2024-01-02t03:04:05.25+02:00",
         datetime(2024, 1, 2, 3, 4, 5, 250000, tzinfo=timezone(timedelta(hours=2)))),
    ],
    ids=repr,
)
def test_unions_and_lenient_date_times_convert(annotation: Any, value: Any, expected: Any) -> None:
    seen: list[Any] = []

    def f(x: Any) -> str:
        seen.append(x)
        return ""

    f.__annotations__ = {"x": annotation, "return": str}
    result = tool(f).execute({"x": value}, ToolContext(work_dir=Path()))
    assert result == ToolResult(ok=True, output="")
    assert seen == [expected]
    assert type(seen[0]) is type(expected)


async def test_null_means_not_given_unless_the_annotation_admits_none(tmp_path: Path) -> None:
    seen: list[Any] = []

    @tool
    def nulls(a: int = 5, b: int | None = 5, c: Color = Color.RED,
              d: Literal["x", None] = "x") -> str:
        """Nulls."""
        seen.append((a, b, c, d))
        return ""

    result = await call(nulls, {"a": None, "b": None, "c": None, "d": None}, tmp_path)
    assert result.ok, result
    assert seen == [(5, None, Color.RED, None)]


# ------------------------------------------------------------------ bad values


class _Limits(TypedDict):
    name: str


@tool
def checked(
    color: Color = Color.RED,
    level: Level = Level.LOW,
    day: date | None = None,
    at: datetime | None = None,
    where: Path | None = None,
    pair: tuple[int, str] | None = None,
    nums: tuple[int, ...] = (),
    opts: _Limits | None = None,
    point: Point | None = None,
    limit: Annotated[int, Param(minimum=1, maximum=10)] = 1,
    either: int | str = 0,
    maybe: list[int | None] | None = None,
    counts: dict[str, int] | None = None,
    mode: Literal[1, "a"] = 1,
) -> str:
    """Every argument is checked before the call."""
    raise AssertionError("the function must not be called with a bad argument")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"color": "blue"}, "invalid_arg: color: must be one of 'red', 'green'"),
        ({"color": 1}, "invalid_arg: color: expected string, got integer"),
        ({"level": True}, "invalid_arg: level: expected integer, got boolean"),
        ({"level": 3}, "invalid_arg: level: must be one of 1, 2"),
        ({"day": "2024-02-30"}, "invalid_arg: day: expected a date (YYYY-MM-DD), got '2024-02-30'"),
        ({"day": "tomorrow"}, "invalid_arg: day: expected a date (YYYY-MM-DD), got 'tomorrow'"),
        ({"day": "20240101"}, "invalid_arg: day: expected a date (YYYY-MM-DD), got '20240101'"),
        ({"day": 20240101}, "invalid_arg: day: expected string, got integer"),
        ({"at": "2024-01-02"}, "invalid_arg: at: expected a date-time (YYYY-MM-DDTHH:MM:SS, "
                               "optionally with an offset such as Z or +02:00), got '2024-01-02'"),
        ({"at": "2024-01-02T25:00:00Z"}, "invalid_arg: at: expected a date-time "
                                         "(YYYY-MM-DDTHH:MM:SS, optionally with an offset such "
                                         "as Z or +02:00), got '2024-01-02T25:00:00Z'"),
        ({"where": ""}, "invalid_arg: where: must not be empty"),
        ({"pair": [1]}, "invalid_arg: pair: expected 2 items, got 1"),
        ({"pair": [1, "a", 2]}, "invalid_arg: pair: expected 2 items, got 3"),
        ({"pair": [1, 2]}, "invalid_arg: pair[1]: expected string, got integer"),
        ({"pair": "1,a"}, "invalid_arg: pair: expected array, got string"),
        ({"nums": [1, "2"]}, "invalid_arg: nums[1]: expected integer, got string"),
        ({"opts": {}}, "invalid_arg: opts: missing key 'name'"),
        ({"opts": {"name": 1}}, "invalid_arg: opts.name: expected string, got integer"),
        ({"opts": {"name": "n", "extra": 1}}, "invalid_arg: opts: unexpected key 'extra'"),
        ({"point": {"x": -1}}, "invalid_arg: point: 'x' must be >= 0: -1"),
        ({"limit": 0}, "invalid_arg: limit: must be >= 1, got 0"),
        ({"limit": 11}, "invalid_arg: limit: must be <= 10, got 11"),
        ({"limit": 2.5}, "invalid_arg: limit: expected integer, got number"),
        ({"either": True}, "invalid_arg: either: expected integer or string, got boolean"),
        ({"maybe": [1, "x"]}, "invalid_arg: maybe[1]: expected integer or null, got string"),
        ({"counts": {"a b": "x"}}, 'invalid_arg: counts["a b"]: expected integer, got string'),
        ({"mode": True}, "invalid_arg: mode: must be one of 1, 'a'"),  # true is not 1 in JSON
        ({"other": 1}, "unexpected_arg: other"),
    ],
    ids=repr,
)
async def test_bad_values_are_named_errors_before_the_call(
    tmp_path: Path, args: dict[str, Any], error: str
) -> None:
    assert_valid_schema(checked)
    result = await call(checked, args, tmp_path)
    assert result == ToolResult(ok=False, output="", error=error)


def test_the_validator_agrees_with_jsonschema() -> None:
    # Every value here is either valid for both or refused by both (date-times are
    # left out: the validator accepts a missing offset, which RFC 3339 does not).
    validator = jsonschema.Draft202012Validator(
        dict(checked.parameters), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    cases: list[dict[str, Any]] = [
        {"color": "red"}, {"color": "blue"}, {"level": 2}, {"level": 2.0}, {"level": True},
        {"day": "2024-02-29"}, {"day": "2023-02-29"}, {"day": "2024-1-1"},
        {"where": "a"}, {"where": ""}, {"pair": [1, "a"]}, {"pair": [1, "a", "b"]},
        {"pair": ["a", 1]}, {"pair": []}, {"nums": []}, {"nums": [1, 2, 3]}, {"nums": [1.5]},
        {"opts": {"name": "n"}}, {"opts": {"name": "n", "x": 1}}, {"opts": {}},
        {"point": {"x": 1, "label": "a"}}, {"point": {"y": 1}}, {"limit": 10}, {"limit": 10.5},
        {"limit": 0}, {"either": "s"}, {"either": [1]}, {"maybe": [None, 2]},
        {"maybe": [None, 2.5]}, {"counts": {"a": 1}}, {"counts": {"a": [1]}}, {"mode": "a"},
        {"mode": False}, {"mode": 1.0}, {"unknown": 1},
    ]
    for args in cases:
        ours = validate_args(args, checked.parameters) is None
        theirs = validator.is_valid(args)
        assert ours == theirs, (args, ours, theirs)


# ------------------------------------------------------------------ decoration-time errors


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (bytes, "is annotated bytes, which has no JSON Schema form; supported: str, int"),
        (Plain, "is annotated Plain, which has no JSON Schema form; supported:"),
        (time, "is annotated time, which has no JSON Schema form"),
        (list[bytes], "is annotated list[bytes], which has no JSON Schema form (bytes inside it)"),
        (dict[int, str], "dict[int, str], which has no JSON Schema form: JSON object keys are "
                         "strings; use dict[str, ...]"),
        (Literal[b"x"], "the literal b'x' is not a JSON value"),
        (Shape, "Shape.SQUARE = (1, 1) is not a JSON string or number"),
        (Annotated[str, Param(minimum=1)], "Param(minimum=...) applies to int and float only"),
        (Node, "Node refers to itself"),
        (Callable[[], int], "which has no JSON Schema form"),
        (Options | bytes, "(bytes inside it)"),
    ],
    ids=repr,
)
def test_an_annotation_with_no_json_form_is_a_type_error_naming_the_parameter(
    annotation: Any, message: str
) -> None:
    def fetch(ok: int, x: Any) -> str:
        return ""

    fetch.__annotations__ = {"ok": int, "x": annotation, "return": str}
    with pytest.raises(TypeError) as caught:
        tool(fetch)
    text = str(caught.value)
    assert text.startswith("@tool test_an_annotation_with_no_json_form_is_a_type_error_naming_"
                           "the_parameter.<locals>.fetch: parameter 'x' "), text
    assert message in text


def test_other_signature_problems_are_type_errors_at_decoration() -> None:
    def positional(a: int, /) -> str:
        return ""

    with pytest.raises(TypeError, match=r"^@tool .*positional: parameter 'a' is "
                                        r"positional-only; tool arguments are passed by name$"):
        tool(positional)

    def unresolved(a: NotImportedAtRunTime) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(TypeError, match=r"^@tool .*unresolved: cannot resolve its annotations "
                                        r"\(NameError: .*NotImportedAtRunTime"):
        tool(unresolved)


def test_param_checks_its_own_arguments() -> None:
    with pytest.raises(ValueError, match="minimum 2 is above maximum 1"):
        Param(minimum=2, maximum=1)
    with pytest.raises(TypeError, match="must be a finite number"):
        Param(minimum="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a finite number"):
        Param(maximum=float("inf"))
