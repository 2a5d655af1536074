"""The plugin: registration through the entry point, order, schemas, limits, cheap import,
and an end-to-end agent run using the tools."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lich.agent import Agent, build_tool_registry, load_plugins
from lich.config import ConfigError, LichConfig
from lich.hooks import hookimpl
from lich.testing import Reply, ScriptedChat, make_test_config
from lich.tools import Tool
from lich.types import ToolCall, ToolMessage, ToolResult
from lich_builtin_tools import CORE_TOOL_NAMES, DOCS_TOOL_NAMES, builtin_tools


def test_the_twelve_core_tools_in_reference_order() -> None:
    names = [t.name for t in builtin_tools(docs_resolver=lambda w, e: None)]
    assert names == list(CORE_TOOL_NAMES)
    assert len(names) == 12
    with_docs = [t.name for t in builtin_tools(docs_resolver=lambda w, e: Path("."))]
    assert with_docs == [*CORE_TOOL_NAMES, *DOCS_TOOL_NAMES]


def test_schemas_are_valid_and_closed() -> None:
    for item in builtin_tools(docs_resolver=lambda w, e: Path(".")):
        schema = dict(item.parameters)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False, item.name
        assert set(schema.get("required", ())) <= set(schema["properties"]), item.name
        assert item.description


def test_whole_number_parameters_are_declared_integer() -> None:
    # Every numeric parameter of the builtin tools is a count, a line or a time in ms:
    # declared `number`, a model may send 2.5 lines; `integer` says what is meant.
    for item in builtin_tools(docs_resolver=lambda w, e: Path(".")):
        for name, prop in dict(item.parameters)["properties"].items():
            assert prop.get("type") != "number", f"{item.name}.{name}"
    integers = {(item.name, name) for item in builtin_tools(docs_resolver=lambda w, e: Path("."))
                for name, prop in dict(item.parameters)["properties"].items()
                if prop.get("type") == "integer"}
    assert {("read_file", "offset"), ("read_file", "limit"), ("list_dir", "depth"),
            ("terminal", "timeout_ms"), ("grep_files", "max_results")} <= integers


def test_each_tool_declares_its_own_limits() -> None:
    tools = {t.name: t for t in builtin_tools(docs_resolver=lambda w, e: Path("."))}
    assert tools["terminal"].timeout_s > 300  # the 300 s maximum is reachable
    assert tools["read_file"].max_output_chars == 256_000
    assert tools["docs_read"].max_output_chars == 30_000
    assert tools["fetch_url"].max_output_chars > 100_000  # max_chars up to 100000 + header
    assert tools["http_request"].timeout_s > 120
    assert tools["fetch_url"].timeout_s > 60
    assert tools["grep_files"].timeout_s > 10
    async_tools = {n for n, t in tools.items() if t.is_async}
    # Everything else is a plain function, which the executor runs in a worker thread.
    assert {"terminal", "grep_files", "fetch_url", "web_search", "http_request",
            "disk_usage"} <= async_tools


def test_entry_point_plugin_registers_the_tools(tmp_path: Path) -> None:
    config = LichConfig(work_dir=str(tmp_path), plugins=("builtin_tools",))
    host = load_plugins(config)
    report = next(r for r in host.reports if r.entry == "builtin_tools")
    assert report.ok, report.describe_error()
    registry = build_tool_registry(host, config)
    assert registry.names()[:12] == list(CORE_TOOL_NAMES)
    assert {t.plugin for t in registry.list()} == {report.plugin}


def test_another_plugins_tool_of_the_same_name_wins(tmp_path: Path) -> None:
    async def mine(args: dict[str, Any], ctx: Any) -> ToolResult:
        return ToolResult.success("mine")

    class Override:
        @hookimpl
        def lich_register_tools(self, registry: Any) -> None:
            registry.register(Tool("read_file", "custom", {"type": "object"}, mine))

    config = LichConfig(work_dir=str(tmp_path), plugins=("builtin_tools",))
    host = load_plugins(config, [("override", Override())])
    registry = build_tool_registry(host, config)
    item = registry.get("read_file")
    assert item is not None
    assert item.description == "custom"


def test_importing_the_plugin_is_cheap() -> None:
    code = (
        "import sys, json, lich_builtin_tools;"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('httpx', 'httpcore', 'lich_builtin_tools'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == ["lich_builtin_tools"]


# ---------------------------------------------------------------- end to end


def _read(path: str) -> str:
    return Path(path).read_text()


def _call(call_id: str, name: str, **args: Any) -> ToolCall:
    return ToolCall(call_id, name, args)


async def test_agent_runs_write_read_and_list_through_the_plugin(tmp_path: Path) -> None:
    chat = ScriptedChat([
        Reply(tool_calls=[_call("c1", "write_file", path="notes/a.txt", content="hello")]),
        Reply(tool_calls=[_call("c2", "read_file", path="notes/a.txt"),
                          _call("c3", "list_dir", path="notes")]),
        Reply(tool_calls=[_call("c4", "read_file", path="../escape.txt")]),
        Reply("done"),
    ])
    config = make_test_config(tmp_path, plugins=("builtin_tools",))
    agent = Agent(config, chat=chat)
    result = await agent.run("make a note")
    assert result.stopped_reason == "final"
    assert result.text == "done"
    assert (tmp_path / "notes" / "a.txt").read_text() == "hello"
    answers = {m.tool_call_id: m for m in result.messages if isinstance(m, ToolMessage)}
    assert answers["c1"].content == "wrote 5 chars to notes/a.txt"
    assert answers["c2"].content == "hello"
    assert answers["c3"].content == "- a.txt (5 bytes)"
    assert not answers["c1"].is_error
    escape = json.loads(answers["c4"].content)
    assert answers["c4"].is_error
    assert escape["error"].startswith("path_escape: ../escape.txt escapes ")
    # The model was offered the builtin tools.
    assert set(CORE_TOOL_NAMES) <= set(chat.requests[0].tools)
    # And the run was recorded.
    assert result.session_path is not None
    assert "wrote 5 chars to notes/a.txt" in _read(result.session_path)


async def test_tools_enabled_filters_builtins(tmp_path: Path) -> None:
    chat = ScriptedChat([
        Reply(tool_calls=[_call("c1", "write_file", path="x.txt", content="no")]),
        Reply("ok"),
    ])
    config = make_test_config(tmp_path, plugins=("builtin_tools",), tools_enabled=["read_file"])
    result = await Agent(config, chat=chat).run("try")
    answer = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert answer.is_error
    assert json.loads(answer.content)["error"] == "unknown_tool: write_file"
    assert not (tmp_path / "x.txt").exists()
    assert chat.requests[0].tools == ("read_file",)


async def test_tool_settings_from_the_config_reach_the_tools(tmp_path: Path) -> None:
    chat = ScriptedChat([
        Reply(tool_calls=[ToolCall("c1", "terminal", {"command": "echo $HOME_TOKEN-x"})]),
        Reply("ok"),
    ])
    config = make_test_config(tmp_path, plugins=("builtin_tools",),
                              tools={"terminal": {"pass_env": ["HOME_TOKEN"]}})
    result = await Agent(config, chat=chat, env={"HOME_TOKEN": "kept"}).run("go")
    answer = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert "kept-x" in answer.content


def test_bad_tool_tables_are_refused_before_the_run_with_every_problem(tmp_path: Path) -> None:
    config = make_test_config(tmp_path, plugins=("builtin_tools",), tools={
        "terminal": {"pass_env": 7, "timeout_s": 5, "max_output_chars": 100},
        "fetch_url": {"allow_private": "maybe", "allowprivate": True},
        "web_search": {"base_url": "ftp://search.example"},
        "read_file": {"pass_env": []},  # a key of another tool
        "grep_files": "fast",
        # Another plugin's tool: its keys are its own; lich checks only the limits.
        "their_tool": {"anything": [1, 2], "timeout_s": 3},
    })
    chat = ScriptedChat([Reply("never")])
    with pytest.raises(ConfigError) as info:
        Agent(config, chat=chat)
    assert sorted(info.value.problems) == [
        "$.tools.fetch_url.allow_private: expected true or false, got string",
        "$.tools.fetch_url.allowprivate: unknown key (did you mean 'allow_private'?)",
        "$.tools.grep_files: expected a table, got string",
        "$.tools.read_file.pass_env: unknown key",
        "$.tools.terminal.pass_env: expected an array, got integer",
        "$.tools.web_search.base_url: expected a http or https URL, got 'ftp://search.example'",
    ]
    assert chat.requests == []


def test_every_builtin_tool_has_a_settings_class() -> None:
    from lich_builtin_tools._settings import SETTINGS

    assert set(SETTINGS) == {*CORE_TOOL_NAMES, *DOCS_TOOL_NAMES}
