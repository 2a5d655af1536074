"""The MCP client against a real server built on the SDK, over stdio and streamable
HTTP: what each kind of answer becomes, timeouts, a server that dies, tools that
change, an HTTP session the server expired."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.cancel import CancelToken
from lich.testing import Reply, async_wait_for, wait_for
from lich.types import ToolCall, ToolMessage, ToolResult

from .conftest import HttpFixture, stdio_server


async def call(agent: Any, tool: str, **args: Any) -> ToolResult:
    result: ToolResult = await agent.executor.execute(ToolCall("c1", tool, args))
    return result


@pytest.fixture(params=["stdio", "http"])
def fixture_table(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "stdio":
        yield stdio_server()
        return
    server = HttpFixture(tmp_path / "http.log")
    yield {"url": server.url, "startup_timeout_s": 60}
    server.stop()


async def test_answers_map_to_tool_results(mcp_agent: Any, fixture_table: Any) -> None:
    agent = mcp_agent({"fx": fixture_table})
    assert {"mcp__fx__echo", "mcp__fx__structured", "mcp__fx__picture"} <= set(agent.tools.names())
    assert (await call(agent, "mcp__fx__echo", text="hello")) == ToolResult(ok=True, output="hello")
    structured = await call(agent, "mcp__fx__structured")
    assert structured == ToolResult(ok=True, output='{"answer": 42, "unit": "none"}')
    picture = await call(agent, "mcp__fx__picture")
    assert picture == ToolResult(ok=True, output="[image: image/png, 70 bytes]")
    failed = await call(agent, "mcp__fx__fail", message="the disk is on fire")
    assert not failed.ok
    assert failed.error is not None
    assert failed.error.startswith("mcp_tool_error: ")
    assert "the disk is on fire" in failed.error


async def test_a_call_past_its_timeout_is_cancelled_on_the_server(
    mcp_agent: Any, fixture_table: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled.txt"
    agent = mcp_agent({"fx": {**fixture_table, "timeout_s": 0.5}})
    result = await call(agent, "mcp__fx__slow", seconds=60, marker=str(marker))
    assert result.error == "timeout: tool:mcp__fx__slow exceeded 0.5s"
    # The request was cancelled, not abandoned: the server's handler saw it.
    wait_for(lambda: marker.is_file(), what="the server to see the cancellation")
    assert marker.read_text() == "cancelled"
    # And the connection is fine for the next call.
    assert (await call(agent, "mcp__fx__echo", text="still here")).output == "still here"


async def test_a_call_cancelled_by_its_caller_is_cancelled_on_the_server(
    mcp_agent: Any, fixture_table: Any, tmp_path: Path
) -> None:
    started, marker = tmp_path / "started.txt", tmp_path / "cancelled.txt"
    agent = mcp_agent({"fx": fixture_table})
    task = asyncio.ensure_future(call(agent, "mcp__fx__slow", seconds=60, marker=str(marker),
                                      started=str(started)))
    await async_wait_for(started.is_file, what="the server to run the call")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The cancellation crossed to the runtime's loop and the SDK told the server.
    await async_wait_for(marker.is_file, what="the server to see the cancellation")
    assert marker.read_text() == "cancelled"
    assert (await call(agent, "mcp__fx__echo", text="still here")).output == "still here"


async def test_a_cancelled_run_cancels_its_mcp_call_on_the_server(
    mcp_agent: Any, tmp_path: Path
) -> None:
    started, marker = tmp_path / "started.txt", tmp_path / "cancelled.txt"
    agent = mcp_agent({"fx": stdio_server()})
    token = CancelToken()
    pending = asyncio.ensure_future(agent.executor.execute(
        ToolCall("c1", "mcp__fx__slow", {"seconds": 60, "marker": str(marker),
                                         "started": str(started)}), cancel=token))
    await async_wait_for(started.is_file, what="the server to run the call")
    token.cancel()  # what Ctrl-C or an aborted run does
    assert (await pending).error == "cancelled"
    await async_wait_for(marker.is_file, what="the server to see the cancellation")
    assert marker.read_text() == "cancelled"


async def test_the_tool_list_changing_replaces_the_tools_before_the_next_model_call(
    mcp_agent: Any,
) -> None:
    # Over stdio the notification comes down the same pipe before the call's answer:
    # the very next model call is offered the new tool.
    script = [
        Reply(tool_calls=[ToolCall("1", "mcp__fx__grow", {"name": "sprout"})]),
        Reply(tool_calls=[ToolCall("2", "mcp__fx__sprout", {})]),
        "done",
    ]
    agent = mcp_agent({"fx": stdio_server()}, script)
    assert "mcp__fx__sprout" not in agent.tools.names()
    result = await agent.run("grow a tool and call it")
    offered = agent.chat.requests[1].tools
    assert "mcp__fx__sprout" in offered
    tools = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert tools == ["added sprout", "I am sprout"]


async def test_a_tool_list_change_over_http_reaches_the_registry(
    mcp_agent: Any, http_fixture: HttpFixture
) -> None:
    # Over HTTP the notification travels on a stream of its own: it takes effect at
    # the first model call after it arrived.
    agent = mcp_agent({"fx": {"url": http_fixture.url, "startup_timeout_s": 60}})
    assert (await call(agent, "mcp__fx__grow", name="sprout")).output == "added sprout"
    wait_for(lambda: "mcp__fx__sprout" in [d.name for d in agent.tools.definitions()],
             what="the new tool in the definitions")
    assert (await call(agent, "mcp__fx__sprout")).output == "I am sprout"


async def test_a_server_killed_mid_call_is_restarted_on_the_next_call(mcp_agent: Any) -> None:
    agent = mcp_agent({"fx": stdio_server()})
    before = (await call(agent, "mcp__fx__pid")).output
    crashed = await call(agent, "mcp__fx__crash")
    assert crashed.error is not None
    assert crashed.error.startswith("mcp_disconnected: server 'fx' closed the connection")
    after = await call(agent, "mcp__fx__pid")
    assert after.ok, after
    assert after.output != before  # a new process
    assert (await call(agent, "mcp__fx__echo", text="back")).output == "back"


async def test_a_server_killed_between_calls_is_restarted_for_the_next_one(
    mcp_agent: Any,
) -> None:
    import os
    import signal

    agent = mcp_agent({"fx": stdio_server()})
    pid = int((await call(agent, "mcp__fx__pid")).output)
    os.kill(pid, signal.SIGKILL)
    connection = _connection(agent, "fx")
    wait_for(lambda: connection.state.status == "disconnected", what="the death to be seen")
    # Nothing was running when it died: the next call starts it again and runs.
    after = await call(agent, "mcp__fx__pid")
    assert after.ok, after
    assert int(after.output) != pid
    assert connection.state.restarts == 1


async def test_a_server_that_dies_again_right_after_its_restart_stays_down(
    mcp_agent: Any,
) -> None:
    agent = mcp_agent({"fx": stdio_server()})
    assert (await call(agent, "mcp__fx__crash")).error.startswith("mcp_disconnected:")
    # Restarted for this call, which kills it again before any call succeeded.
    assert (await call(agent, "mcp__fx__crash")).error.startswith("mcp_disconnected:")
    down = await call(agent, "mcp__fx__echo", text="anyone?")
    assert down.error is not None
    assert "died again after a restart" in down.error


@pytest.mark.parametrize("answer", ["plain404", "python-sdk", "ts-sdk-404", "ts-sdk-400"])
async def test_an_expired_http_session_is_reinitialised(
    mcp_agent: Any, http_fixture: HttpFixture, answer: str
) -> None:
    # Each way a server says the session is gone (the fixture's SESSION_LOST).
    import httpx

    agent = mcp_agent({"docs": {"url": http_fixture.url, "startup_timeout_s": 60}})
    connection = _connection(agent, "docs")
    assert connection.state.protocol_version < "2026"  # the handshake era: sessions
    assert (await call(agent, "mcp__docs__echo", text="one")).output == "one"
    async with httpx.AsyncClient() as client:
        await client.post(f"http://127.0.0.1:{http_fixture.port}/expire?answer={answer}")
    two = await call(agent, "mcp__docs__echo", text="two")
    assert two == ToolResult(ok=True, output="two"), two.error
    assert connection.state.connects == 2  # a new session, not an error for the model


async def test_a_server_that_keeps_losing_sessions_is_reinitialised_once_per_call(
    mcp_agent: Any, http_fixture: HttpFixture
) -> None:
    import httpx

    agent = mcp_agent({"docs": {"url": http_fixture.url, "startup_timeout_s": 60}})
    connection = _connection(agent, "docs")
    async with httpx.AsyncClient() as client:
        await client.post(f"http://127.0.0.1:{http_fixture.port}/expire?answer=python-sdk"
                          "&always=1")
    result = await call(agent, "mcp__docs__echo", text="lost")
    assert result.error is not None
    assert result.error.startswith("mcp_disconnected: ")
    assert "again right after re-initialising" in result.error
    assert connection.state.connects == 2  # one re-initialisation, not a loop
    again = await call(agent, "mcp__docs__echo", text="lost again")
    assert again.error is not None
    assert connection.state.connects == 3  # the next call gets its own one


async def test_a_stdio_servers_stderr_goes_to_its_log_file(
    mcp_agent: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    agent = mcp_agent({"noisy": stdio_server(env={"FIXTURE_STDERR": "noise from the server"})})
    log = tmp_path / ".lich" / "logs" / "mcp" / "noisy.log"
    assert (await call(agent, "mcp__noisy__echo", text="x")).ok
    wait_for(lambda: "noise from the server" in log.read_text(), what="the server's stderr")
    assert "noise from the server" not in capfd.readouterr().err


async def test_a_result_without_result_type_is_read_and_a_malformed_one_is_a_clear_error(
        mcp_agent: Any) -> None:
    # The 2026-07-28 revision tags every result with resultType, an absent one meaning
    # "complete": a server that leaves it out is read as such. A result no revision
    # allows is an mcp_protocol_error for the model, not the SDK's validation dump.
    agent = mcp_agent({"raw": stdio_server(env={"FIXTURE_RAW_RESULTS": "1"})})
    assert _connection(agent, "raw").state.protocol_version >= "2026-07-28"
    assert await call(agent, "mcp__raw__untyped") == ToolResult(ok=True, output="UNTYPED-RESULT")
    bad = await call(agent, "mcp__raw__malformed")
    assert bad.error is not None
    assert bad.error.startswith("mcp_protocol_error: server 'raw' answered tools/call with a "
                                "result that does not follow the protocol"), bad.error
    assert "pydantic" not in bad.error
    assert "not a list" not in bad.error  # what is wrong, not the server's data
    assert "\n" not in bad.error
    assert (await call(agent, "mcp__raw__echo", text="still here")).output == "still here"


def test_a_tool_without_annotations_asks_by_default_and_runs_under_an_allow_rule(
        mcp_agent: Any, tmp_path: Path) -> None:
    # docs/mcp.md: the annotations tighten the default (mode allow still asks), an
    # explicit allow rule is the person's decision and lets the tool run.
    from lich.approvals.rules import RuleSet, decide

    agent = mcp_agent({"fx": stdio_server()})
    name = "mcp__fx__structured"  # the fixture declares no annotations for it
    tool = agent.tools.get(name)
    assert tool is not None
    assert tool.requires_approval
    assert decide(RuleSet(), "allow", name, {}, tool, str(tmp_path)).action == "ask"
    assert decide(RuleSet(), "ask", name, {}, tool, str(tmp_path)).action == "ask"
    allowed = RuleSet.parse((name,), (), ())
    for mode in ("ask", "allow", "deny-unlisted"):
        assert decide(allowed, mode, name, {}, tool, str(tmp_path)).action == "allow"
    both = RuleSet.parse((name,), (name,), ())
    assert decide(both, "allow", name, {}, tool, str(tmp_path)).action == "ask"


def test_server_annotations_only_tighten_approvals(mcp_agent: Any) -> None:
    agent = mcp_agent({"fx": stdio_server()})
    tools = {t.name: t for t in agent.tools.list()}
    # readOnlyHint is the server's word: never read_only in lich.
    assert not any(t.read_only for t in tools.values())
    assert not tools["mcp__fx__echo"].requires_approval  # read-only, not destructive
    assert tools["mcp__fx__crash"].requires_approval  # destructiveHint
    assert tools["mcp__fx__fail"].requires_approval  # no annotations at all


def _connection(agent: Any, server: str) -> Any:
    from lich.mcp.plugin import _RUNTIMES

    return _RUNTIMES[agent.tools].connections[server]


async def test_a_result_past_the_read_cap_is_refused_and_the_server_goes_on(
        mcp_agent: Any) -> None:
    # 10 MiB of text (20 on the wire, with its structured copy): refused while it is read,
    # nothing of it kept; the connection and the server are fine afterwards.
    from lich.mcp.stdio import MAX_MESSAGE_BYTES

    agent = mcp_agent({"fx": stdio_server()})
    huge = await call(agent, "mcp__fx__big", megabytes=10)
    assert huge.error is not None
    assert huge.error.startswith("mcp_result_too_large: server 'fx' answered with more than "
                                 f"the {MAX_MESSAGE_BYTES // 2**20} MiB"), huge.error
    assert len(huge.error) < 400
    assert (await call(agent, "mcp__fx__echo", text="still here")).output == "still here"
    # Under the cap: read whole, then cut to the tool's output cap as any result is.
    fits = await call(agent, "mcp__fx__big", megabytes=1)
    assert fits.ok
    assert fits.output.startswith("xxxx")
    assert len(fits.output) < 2**20
    assert _connection(agent, "fx").state.connects == 1
