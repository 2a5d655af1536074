"""Start-up and failure are data: a missing command, a server hanging at start, a
tool-name collision, a config error — and every MCP tool goes through lich's hooks."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from lich.config import ConfigError
from lich.hooks import Block, hookimpl
from lich.testing import Reply, wait_for
from lich.types import ToolCall, ToolMessage

from .conftest import FIXTURE, stdio_server


def _report(agent: Any) -> Any:
    (report,) = [r for r in agent.host.reports if r.plugin == "mcp"]
    return report


def test_a_missing_command_is_reported_and_the_run_goes_on(mcp_agent: Any) -> None:
    agent = mcp_agent({"ghost": {"command": "lich-test-no-such-server"}, "fx": stdio_server()})
    report = _report(agent)
    assert report.ok
    (warning,) = report.warnings
    assert warning.startswith("mcp server 'ghost' is unavailable: command not found: "
                              "lich-test-no-such-server")
    assert "mcp__fx__echo" in agent.tools.names()
    assert not any(n.startswith("mcp__ghost__") for n in agent.tools.names())


def test_a_server_hanging_at_start_fails_alone(mcp_agent: Any) -> None:
    agent = mcp_agent({
        "stuck": stdio_server(env={"FIXTURE_HANG": "1"}, startup_timeout_s=1),
        "fx": stdio_server(),
        "fx2": stdio_server(),
    })
    (warning,) = _report(agent).warnings
    assert warning.startswith("mcp server 'stuck' is unavailable: did not start within 1s "
                              "(startup_timeout_s)")
    names = agent.tools.names()
    assert "mcp__fx__echo" in names
    assert "mcp__fx2__echo" in names
    assert not any(n.startswith("mcp__stuck__") for n in names)


def test_a_server_hanging_at_start_is_stopped_when_the_agent_closes(
    mcp_agent: Any, tmp_path: Path
) -> None:
    # It never answers the handshake: the SDK's stdio shutdown (stdin closed, SIGTERM,
    # SIGKILL) must run to the end, not be broken into by the start's give-up.
    pid_file = tmp_path / "stuck.pid"
    agent = mcp_agent({"stuck": stdio_server(
        env={"FIXTURE_HANG": "1", "FIXTURE_PID_FILE": str(pid_file)}, startup_timeout_s=1)})
    assert _report(agent).warnings
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(encoding="utf-8"), 15,
                       "the hung server's pid file"))
    asyncio.run(agent.aclose())

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_for(gone, 15, f"the hung server (pid {pid}) to be stopped")
    finally:
        if not gone():
            os.kill(pid, signal.SIGKILL)


async def test_calling_a_failed_servers_tool_is_an_unknown_tool(mcp_agent: Any) -> None:
    agent = mcp_agent({"ghost": {"command": "lich-test-no-such-server"}})
    result = await agent.executor.execute(ToolCall("1", "mcp__ghost__echo", {}))
    assert result.error == "unknown_tool: mcp__ghost__echo"


def test_two_servers_whose_tool_names_collide_are_reported(mcp_agent: Any) -> None:
    # "my.fx" and "my_fx" both sanitise to my_fx: every tool name collides.
    agent = mcp_agent({"my.fx": stdio_server(), "my_fx": stdio_server()})
    warnings = _report(agent).warnings
    collision = [w for w in warnings if "mcp__my_fx__echo" in w]
    assert collision == [
        "mcp: tool name collision: mcp__my_fx__echo is both server 'my.fx''s tool 'echo' "
        "and server 'my_fx''s tool 'echo'; the second is left out (rename one of the servers)"
    ]
    assert agent.tools.names().count("mcp__my_fx__echo") == 1


def test_tools_enabled_and_disabled_narrow_a_servers_tools(mcp_agent: Any) -> None:
    agent = mcp_agent({
        "a": stdio_server(tools_enabled=["echo", "pid"]),
        "b": stdio_server(tools_disabled=["crash"]),
    })
    names = agent.tools.names()
    assert [n for n in names if n.startswith("mcp__a__")] == ["mcp__a__echo", "mcp__a__pid"]
    assert "mcp__b__crash" not in names
    assert "mcp__b__echo" in names


async def test_hook_lich_before_tool_call__blocks_an_mcp_tool(mcp_agent: Any) -> None:
    class NoMcpEcho:
        @hookimpl
        def lich_before_tool_call(self, call: ToolCall, run: Any) -> Block | None:
            if call.name.startswith("mcp__fx__") and call.args.get("text") == "secret":
                return Block("no secrets to MCP servers")
            return None

    script = [Reply(tool_calls=[ToolCall("1", "mcp__fx__echo", {"text": "secret"}),
                                ToolCall("2", "mcp__fx__echo", {"text": "public"})]), "ok"]
    agent = mcp_agent({"fx": stdio_server()}, script, objects=[("guard", NoMcpEcho())])
    result = await agent.run("echo twice")
    contents = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert '"error": "blocked_by_plugin: no secrets to MCP servers"' in contents[0]
    assert contents[1] == "public"


def test_a_bad_mcp_table_is_a_config_error(tmp_path: Path) -> None:
    from lich.agent import Agent
    from lich.testing import ScriptedChat, make_test_config

    cfg = make_test_config(tmp_path, plugins=("mcp",), mcp={"servers": {
        "both": {"command": "x", "url": "http://127.0.0.1:1/mcp"},
        "token": {"url": "http://127.0.0.1:1/mcp",
                  "headers": {"Authorization": "Bearer ${LICH_TEST_UNSET_TOKEN}"}},
    }})
    with pytest.raises(ConfigError) as caught:
        Agent(cfg, chat=ScriptedChat([]))
    assert caught.value.problems == [
        "$.mcp.servers.both: set exactly one of command (a stdio server) or url "
        "(a streamable-HTTP server)",
        "$.mcp.servers.token.headers.Authorization: ${LICH_TEST_UNSET_TOKEN} is not set "
        "(set it, or write ${LICH_TEST_UNSET_TOKEN:-default} for a default)",
    ]


def test_the_context_budget_warning_names_each_servers_cost(
    mcp_agent: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="lich.mcp"):
        mcp_agent({"fx": stdio_server()}, context_budget_tokens=1000,
                  mcp={"context_warning_share": 0.1})
    (line,) = [r.getMessage() for r in caplog.records if "context_budget_tokens" in r.getMessage()]
    assert "more than 10% of context_budget_tokens (1000): fx ~" in line
    assert "tools_enabled" in line


def test_no_budget_warning_under_the_share(mcp_agent: Any, caplog: pytest.LogCaptureFixture
                                           ) -> None:
    with caplog.at_level("WARNING", logger="lich.mcp"):
        mcp_agent({"fx": stdio_server()})
    assert not [r for r in caplog.records if "context_budget_tokens" in r.getMessage()]


def test_disabled_servers_are_not_started_nor_expanded(mcp_agent: Any) -> None:
    agent = mcp_agent({"off": {"command": sys.executable, "args": [str(FIXTURE)],
                               "enabled": False, "env": {"T": "${LICH_TEST_UNSET_TOKEN}"}}})
    assert _report(agent).warnings == ()
    assert agent.tools.names() == []


def test_approval_rules_name_mcp_tools_and_annotations_only_tighten(mcp_agent: Any,
                                                                    tmp_path: Path) -> None:
    from lich.approvals.rules import RuleSet, decide

    agent = mcp_agent({"fx": stdio_server()})
    tools = {t.name: t for t in agent.tools.list()}
    work = str(tmp_path)

    def verdict(rules: RuleSet, mode: str, name: str, **args: Any) -> str:
        return decide(rules, mode, name, args, tools[name], work).action  # type: ignore[arg-type]

    none = RuleSet.parse()
    # readOnlyHint is the server's claim: lich still asks in mode ask.
    assert verdict(none, "ask", "mcp__fx__echo", text="x") == "ask"
    assert verdict(none, "allow", "mcp__fx__echo", text="x") == "allow"
    # destructiveHint: asked even where the mode allows.
    assert verdict(none, "allow", "mcp__fx__crash") == "ask"
    rules = RuleSet.parse(allow=["mcp__fx__echo(hello*)"], deny=["mcp__fx__*(*secret*)"])
    assert verdict(rules, "ask", "mcp__fx__echo", text="hello there") == "allow"
    assert verdict(rules, "ask", "mcp__fx__echo", text="a secret") == "deny"
    assert verdict(rules, "ask", "mcp__fx__echo", text="goodbye") == "ask"


def test_servers_configured_without_the_sdk_installed_are_reported(tmp_path: Path) -> None:
    import subprocess

    code = (
        "import sys\n"
        "sys.modules['mcp'] = None  # as if lich-agent[mcp] were not installed\n"
        "from lich.agent import Agent\n"
        "from lich.testing import ScriptedChat, make_test_config\n"
        f"cfg = make_test_config({str(tmp_path)!r}, plugins=('mcp',),"
        " mcp={'servers': {'git': {'command': 'mcp-server-git'}}})\n"
        "agent = Agent(cfg, chat=ScriptedChat([]))\n"
        "(report,) = agent.host.reports\n"
        "print(report.status, report.warnings, agent.tools.names())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == (
        "loaded (\"MCP servers are configured but the MCP SDK is not installed: "
        "pip install 'lich-agent[mcp]'\",) []")


def test_a_server_none_of_whose_tools_lich_would_offer_is_not_started(mcp_agent: Any) -> None:
    # tools_enabled (or the gateway's [gateway] tools) names only fx's echo: "other"
    # would start for nothing.
    agent = mcp_agent({"fx": stdio_server(), "other": stdio_server()},
                      tools_enabled=("mcp__fx__echo",))
    from lich.mcp.plugin import _RUNTIMES

    assert list(_RUNTIMES[agent.tools].connections) == ["fx"]
    assert agent.tools.names() == ["mcp__fx__echo"]


async def test_the_approvals_plugin_judges_mcp_calls(tmp_path: Path) -> None:
    from lich.agent import Agent
    from lich.testing import ScriptedChat, make_test_config

    script = [Reply(tool_calls=[
        ToolCall("1", "mcp__fx__echo", {"text": "a secret"}),  # a deny rule
        ToolCall("2", "mcp__fx__echo", {"text": "hello"}),     # an allow rule
        ToolCall("3", "mcp__fx__pid", {}),                     # mode ask, no one to ask
    ]), "done"]
    cfg = make_test_config(
        tmp_path, plugins=("approvals", "mcp"),
        mcp={"servers": {"fx": stdio_server()}},
        approvals={"allow": ["mcp__fx__echo(hello*)"], "deny": ["mcp__fx__*(*secret*)"]})
    agent = Agent(cfg, chat=ScriptedChat(script))
    try:
        result = await agent.run("three calls")
    finally:
        await agent.aclose()
    denied, allowed, unasked = [m.content for m in result.messages
                                if isinstance(m, ToolMessage)]
    assert "blocked_by_plugin: approval_rule: denied by deny rule mcp__fx__*(*secret*)" in denied
    assert allowed == "hello"
    assert "approval_unavailable" in unasked
