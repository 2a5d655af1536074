"""Closing: ``lich_shutdown`` when an agent closes, MCP servers stopped with it, and
the registry's support for a plugin replacing its own tools at run time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import lich
from lich.hooks import hookimpl
from lich.testing import ScriptedChat, make_test_config, wait_for
from lich.tools import Tool, ToolRegistry, tool
from lich.types import ToolCall

from .conftest import stdio_server


async def test_hook_lich_shutdown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    closed: list[ToolRegistry] = []

    class Holder:
        @hookimpl
        def lich_shutdown(self, registry: ToolRegistry) -> None:
            closed.append(registry)

    class Broken:
        @hookimpl
        async def lich_shutdown(self, registry: ToolRegistry) -> None:
            raise RuntimeError("cannot let go")

    config = make_test_config(tmp_path)
    first = lich.Agent(config, plugins=[("holder", Holder()), ("broken", Broken())],
                       chat=ScriptedChat([]))
    # A second agent on the same host: closing the first must name the first only.
    second = lich.Agent(config, host=first.host, chat=ScriptedChat([]))
    await first.aclose()
    await first.aclose()  # idempotent: the plugins hear of it once
    assert closed == [first.tools]
    assert any("lich_shutdown of plugin broken failed (skipped): RuntimeError: cannot let go"
               in r.getMessage() for r in caplog.records)
    await second.aclose()
    assert closed == [first.tools, second.tools]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_closing_the_agent_stops_its_mcp_servers(mcp_agent: Any) -> None:
    agent = mcp_agent({"fx": stdio_server()})
    pid = int((await agent.executor.execute(ToolCall("1", "mcp__fx__pid", {}))).output)
    assert _alive(pid)
    await agent.aclose()
    wait_for(lambda: not _alive(pid), what=f"the server process {pid} to exit")
    after = await agent.executor.execute(ToolCall("2", "mcp__fx__pid", {}))
    assert after.error == "mcp_disconnected: server 'fx' is closed"


def _named(name: str) -> Tool:
    @tool(name=name)
    def run() -> str:
        """A tool."""
        return name

    return run


def test_a_plugin_replaces_its_own_tools_under_the_same_filter() -> None:
    registry = ToolRegistry()
    registry.on_duplicate = lambda plugin, message: reported.append((plugin, message))
    reported: list[tuple[str, str]] = []
    registry.current_plugin = "other"
    registry.register(_named("shared"))
    registry.current_plugin = "dyn"
    registry.register(_named("a"))
    registry.register(_named("b"))
    registry.current_plugin = None
    registry.filter(None, ["hidden"])
    before = registry.definitions()
    assert registry.replace_plugin("dyn", [_named("b"), _named("c"), _named("hidden"),
                                           _named("shared")]) == ["b", "c"]
    assert registry.names() == ["shared", "b", "c"]
    assert registry.plugin_of("c") == "dyn"
    assert registry.definitions() != before
    assert reported == [("dyn", "duplicate_tool: shared (already registered by other); "
                                "skipped")]


def test_refreshers_run_before_the_definitions_are_given() -> None:
    registry = ToolRegistry()
    pending = [[_named("late")]]

    def refresh() -> None:
        if pending:
            registry.replace_plugin("dyn", pending.pop())

    registry.add_refresher(refresh)
    assert [d.name for d in registry.definitions()] == ["late"]


def test_listeners_hear_every_change_and_every_wanted_refresh() -> None:
    """What ``lich mcp serve`` relies on to tell its client: a listener is called after
    each change and for ``refresh_wanted`` from another thread; ``refresh`` applies
    what a refresher has waiting; a failing listener is logged, not raised; removed,
    it hears nothing more."""
    import threading

    registry = ToolRegistry()
    heard: list[str] = []
    pending: list[list[Tool]] = []

    def refresh() -> None:
        if pending:
            registry.replace_plugin("dyn", pending.pop())

    registry.add_refresher(refresh)
    remove = registry.add_listener(lambda: heard.append(threading.current_thread().name))

    def broken() -> None:
        raise RuntimeError("a listener's bug")

    registry.add_listener(broken)
    registry.current_plugin = "dyn"
    registry.register(_named("a"))
    registry.current_plugin = None
    assert heard == ["MainThread"]

    pending.append([_named("a"), _named("b")])
    other = threading.Thread(target=registry.refresh_wanted, name="mcp-loop")
    other.start()
    other.join()
    assert heard == ["MainThread", "mcp-loop"]
    assert registry.names() == ["a"]  # wanted, not yet applied
    registry.refresh()
    assert registry.names() == ["a", "b"]
    assert heard[2:] == ["MainThread", "MainThread", "MainThread"]  # removed a, added a, b

    remove()
    registry.replace_plugin("dyn", [])
    registry.refresh_wanted()
    assert len(heard) == 5


def test_without_servers_the_sdk_is_never_imported(tmp_path: Path) -> None:
    import subprocess
    import sys

    # The default plugins (mcp among them), a whole run, and lich_shutdown: no SDK.
    code = (
        "import asyncio, sys\n"
        "from lich.agent import Agent\n"
        "from lich.config import BUILTIN_PLUGINS\n"
        "from lich.testing import ScriptedChat, make_test_config\n"
        f"cfg = make_test_config({str(tmp_path)!r}, plugins=BUILTIN_PLUGINS,"
        " mcp={'servers': {'off': {'command': 'x', 'enabled': False}}})\n"
        "agent = Agent(cfg, chat=ScriptedChat(['done']))\n"
        "assert 'mcp' in [r.entry for r in agent.host.reports if r.ok]\n"
        "asyncio.run(agent.run('hi'))\n"
        "asyncio.run(agent.aclose())\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_'))\n"
        "             or m == 'lich.mcp.client'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stderr
