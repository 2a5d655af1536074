"""lich.settings: one way to turn a raw table into checked values, every problem at once."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from attrs import field, frozen

from lich.settings import (
    TOOL_LIMIT_KEYS,
    ConfigError,
    ToolSettings,
    at_least,
    between,
    each,
    each_value,
    greater_than,
    json_type_name,
    non_empty,
    one_of,
    setting,
    structure_settings,
    tool_limits,
    url,
)


def _user_id(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"expected a string or an integer, got {json_type_name(value)}")
    return str(value)


@frozen
class Limits:
    retries: int = setting(3, check=between(0, 10))
    delay_s: float = setting(0.5, check=greater_than(0))


@frozen
class Endpoint:
    url: str = setting(check=url("http", "https"))
    limits: Limits = Limits()
    users: tuple[str, ...] = setting((), parse=each(_user_id, what="an array of ids"))


@frozen
class PluginSettings:
    name: str = setting("bot", check=non_empty)
    mode: Literal["fast", "safe"] = "safe"
    level: str = setting("info", check=one_of("info", "debug"))
    count: int = setting(1, check=at_least(1))
    tags: tuple[str, ...] = ()
    endpoints: tuple[Endpoint, ...] = ()
    extra: Mapping[str, Any] = field(factory=dict)
    primary: Endpoint | None = None


def problems(
    raw: Any, cls: type[Any] = PluginSettings, path: str = "$.plugin_settings.p"
) -> list[str]:
    with pytest.raises(ConfigError) as info:
        structure_settings(raw, cls, path)
    return info.value.problems


def test_good_values_and_defaults() -> None:
    settings = structure_settings(
        {"name": "x", "mode": "fast", "count": 2, "tags": ["a", "b"],
         "endpoints": [{"url": "https://e.example", "users": [12, "ann"],
                        "limits": {"retries": 0, "delay_s": 2}}],
         "extra": {"anything": [1, {"goes": True}]}},
        PluginSettings,
    )
    assert settings.tags == ("a", "b")
    (endpoint,) = settings.endpoints
    assert endpoint.users == ("12", "ann")
    assert endpoint.limits == Limits(retries=0, delay_s=2.0)
    assert isinstance(endpoint.limits.delay_s, float)
    assert settings.extra == {"anything": [1, {"goes": True}]}
    assert structure_settings(None, PluginSettings) == PluginSettings()
    assert structure_settings({}, PluginSettings) == PluginSettings()


def test_every_problem_of_nested_classes_is_listed_with_its_path() -> None:
    found = problems({
        "name": " ",
        "mode": "reckless",
        "level": "loud",
        "count": 0,
        "tags": "a,b",
        "extra": [],
        "endpoints": [
            {"url": "ftp://x", "limits": {"retries": 11, "delay_s": "soon"}, "users": [1, True]},
            "not a table",
            {"limits": {"retrys": 2}},
        ],
        "primary": {"url": "http://ok.example", "users": "ann"},
        "colour": "blue",
        "nmae": "typo",
    })
    assert sorted(found) == sorted([
        "$.plugin_settings.p.name: must not be empty",
        "$.plugin_settings.p.mode: must be one of 'fast', 'safe', got 'reckless'",
        "$.plugin_settings.p.level: must be one of 'info', 'debug', got 'loud'",
        "$.plugin_settings.p.count: must be at least 1, got 0",
        "$.plugin_settings.p.tags: expected an array, got string",
        "$.plugin_settings.p.extra: expected a table, got array",
        "$.plugin_settings.p.endpoints[0].url: expected a http or https URL, got 'ftp://x'",
        "$.plugin_settings.p.endpoints[0].limits.retries: must be between 0 and 10, got 11",
        "$.plugin_settings.p.endpoints[0].limits.delay_s: expected a number, got string",
        "$.plugin_settings.p.endpoints[0].users[1]: "
        "expected a string or an integer, got boolean",
        "$.plugin_settings.p.endpoints[1]: expected a table, got string",
        "$.plugin_settings.p.endpoints[2].url: required key missing",
        "$.plugin_settings.p.endpoints[2].limits.retrys: unknown key (did you mean 'retries'?)",
        "$.plugin_settings.p.primary.users: expected an array of ids, got string",
        "$.plugin_settings.p.colour: unknown key",
        "$.plugin_settings.p.nmae: unknown key (did you mean 'name'?)",
    ])


@pytest.mark.parametrize(("raw", "problem"), [
    ({"count": True}, "count: expected an integer, got boolean"),
    ({"count": 1.5}, "count: expected an integer, got number"),
    ({"count": "2"}, "count: expected an integer, got string"),
    ({"name": 3}, "name: expected a string, got integer"),
    ({"tags": [1]}, "tags[0]: expected a string, got integer"),
    ({"tags": {"a": 1}}, "tags: expected an array, got object"),
    ({"endpoints": [{"url": "http://x", "limits": {"delay_s": True}}]},
     "endpoints[0].limits.delay_s: expected a number, got boolean"),
    ({"endpoints": [{"url": "http://x", "limits": {"delay_s": float("nan")}}]},
     "endpoints[0].limits.delay_s: must be greater than 0, got nan"),
])
def test_types_are_strict(raw: dict[str, Any], problem: str) -> None:
    assert problems(raw, path="$") == [f"$.{problem}"]


def test_a_table_is_required_at_the_top() -> None:
    assert problems([1, 2], path="$.plugin_settings.p") == [
        "$.plugin_settings.p: expected a table, got array"]
    assert problems("x", path="$.x") == ["$.x: expected a table, got string"]


def test_checks_guard_direct_construction_too() -> None:
    with pytest.raises(ValueError, match=r"^count: must be at least 1, got 0$"):
        PluginSettings(count=0)
    with pytest.raises(ValueError, match=r"^retries: must be between 0 and 10, got -1$"):
        Limits(retries=-1)


def test_a_class_level_check_is_reported_at_its_table() -> None:
    @frozen
    class Window:
        lo: int = 0
        hi: int = 10

        def __attrs_post_init__(self) -> None:
            if self.lo > self.hi:
                raise ValueError(f"hi: must be at least lo ({self.lo}), got {self.hi}")

    assert problems({"lo": 5, "hi": 1}, Window, "$.w") == ["$.w.hi: must be at least lo (5), got 1"]


def test_settings_do_not_change_how_records_are_read() -> None:
    # The converter is shared with the transcripts; settings hooks must not leak into them.
    from lich.serialization import message_from_dict

    message = message_from_dict({"role": "user", "content": "hi"})
    assert message.content == "hi"


def test_the_converter_is_private_and_set_up_in_one_module() -> None:
    import lich
    import lich.serialization

    assert "converter" not in lich.serialization.__all__
    root = Path(lich.__file__).parent
    registering = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "_converter.py"
        and re.search(r"\.register_(un)?structure_hook", path.read_text(encoding="utf-8"))
    )
    assert registering == [], "only lich/_converter.py may register converter hooks"


def test_each_value_parses_a_table_with_free_keys() -> None:
    @frozen
    class Routes:
        ports: Mapping[str, int] = setting(factory=dict, parse=each_value(_port))

    assert structure_settings({"ports": {"web": 80, "db": 5432}}, Routes).ports == {
        "web": 80, "db": 5432}
    assert sorted(problems({"ports": {"web": "80", "db": 0, "ok": 1}}, Routes, "$.r")) == [
        "$.r.ports.db: must be a port number, got 0",
        "$.r.ports.web: expected an integer, got string",
    ]
    assert problems({"ports": [80]}, Routes, "$.r") == ["$.r.ports: expected a table, got array"]


def _port(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {json_type_name(value)}")
    if not 0 < value < 65536:
        raise ValueError(f"must be a port number, got {value}")
    return value


def test_a_tool_settings_class_extends_the_executor_keys() -> None:
    @frozen
    class QuerySettings(ToolSettings):
        max_rows: int = setting(1000, check=at_least(1))

    settings = structure_settings({"max_rows": 5, "timeout_s": 2}, QuerySettings, "$.tools.q")
    assert (settings.max_rows, settings.timeout_s, settings.max_output_chars) == (5, 2.0, None)
    assert sorted(problems({"max_rows": 0, "timeout_s": 0, "max_output_chars": 1.5, "rows": 1},
                           QuerySettings, "$.tools.q")) == [
        "$.tools.q.max_output_chars: expected an integer, got number",
        "$.tools.q.max_rows: must be at least 1, got 0",
        "$.tools.q.rows: unknown key",  # too far from max_rows for a hint
        "$.tools.q.timeout_s: must be greater than 0, got 0.0",
    ]


def test_tool_limits_reads_only_the_executor_keys() -> None:
    assert tool_limits({"timeout_s": 3, "own": "x"}, "t") == ToolSettings(timeout_s=3.0)
    assert tool_limits(None, "t") == ToolSettings()
    assert TOOL_LIMIT_KEYS == ("timeout_s", "max_output_chars", "runs_inline")
    with pytest.raises(ConfigError) as info:
        tool_limits({"max_output_chars": "many", "own": object()}, "t")
    assert info.value.problems == ["$.tools.t.max_output_chars: expected an integer, got string"]
    with pytest.raises(ConfigError, match=r"^\$\.tools\.t: expected a table, got array$"):
        tool_limits([1], "t")
