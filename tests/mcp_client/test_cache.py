"""Servers' tool lists kept between runs: a run that only offers a server's tools does
not start it (the fixture writes its pid file when it starts); the first call does;
another table is another entry; a stale list is dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lich.testing import wait_for
from lich.types import ToolCall, ToolResult

from .conftest import stdio_server


def cache_file(tmp_path: Path) -> Path:
    return tmp_path / ".lich" / "cache" / "mcp-tools.json"


async def call(agent: Any, tool: str, **args: Any) -> ToolResult:
    result: ToolResult = await agent.executor.execute(ToolCall("c1", tool, args))
    return result


def state(agent: Any, server: str) -> Any:
    from lich.mcp.plugin import _RUNTIMES

    return _RUNTIMES[agent.tools].connections[server].state


async def test_a_cached_server_is_started_by_its_first_call_not_by_the_run(
        mcp_agent: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "fixture.pid"
    table = stdio_server(env={"FIXTURE_PID_FILE": str(pid_file)})
    first = mcp_agent({"fx": table})
    assert state(first, "fx").status == "connected"
    names = sorted(n for n in first.tools.names() if n.startswith("mcp__fx__"))
    assert cache_file(tmp_path).is_file()
    assert cache_file(tmp_path).stat().st_mode & 0o077 == 0  # private, like the logs
    assert str(pid_file) not in cache_file(tmp_path).read_text()  # keys are hashes
    wait_for(pid_file.exists, what="the first server's pid file")
    pid_file.unlink()

    second = mcp_agent({"fx": table})
    assert state(second, "fx").status == "idle"
    assert sorted(n for n in second.tools.names() if n.startswith("mcp__fx__")) == names
    assert not pid_file.exists()  # offered, not started
    assert (await call(second, "mcp__fx__echo", text="hi")) == ToolResult(ok=True, output="hi")
    assert pid_file.exists()
    assert state(second, "fx").status == "connected"
    assert state(second, "fx").connects == 1

    # Another table (here its environment) is another server: started to list its tools.
    other = mcp_agent({"fx": stdio_server(env={"FIXTURE_PID_FILE": str(pid_file),
                                               "FIXTURE_STDERR": "another"})})
    assert state(other, "fx").status == "connected"


async def test_a_stale_cached_list_is_replaced_and_dropped(mcp_agent: Any,
                                                           tmp_path: Path) -> None:
    table = stdio_server()
    mcp_agent({"fx": table})
    data = json.loads(cache_file(tmp_path).read_text())
    (entry,) = data["servers"].values()
    entry["tools"].append({**entry["tools"][0], "name": "vanished"})
    cache_file(tmp_path).write_text(json.dumps(data))

    stale = mcp_agent({"fx": table})
    assert "mcp__fx__vanished" in stale.tools.names()
    gone = await call(stale, "mcp__fx__vanished", text="x")
    assert gone.error is not None
    assert "vanished" in gone.error
    # The start for that call listed the real tools: the registry follows, and the
    # entry no longer has the one the server does not know.
    stale.tools.refresh()
    assert "mcp__fx__vanished" not in stale.tools.names()
    data = json.loads(cache_file(tmp_path).read_text()) if cache_file(tmp_path).exists() \
        else {"servers": {}}
    assert all("vanished" not in {t["name"] for t in e["tools"]}
               for e in data["servers"].values())
    fresh = mcp_agent({"fx": table})
    assert "mcp__fx__vanished" not in fresh.tools.names()


def test_a_server_that_fails_to_start_is_not_cached(mcp_agent: Any, tmp_path: Path) -> None:
    mcp_agent({"ghost": {"command": "lich-test-no-such-server"}})
    again = mcp_agent({"ghost": {"command": "lich-test-no-such-server"}})
    assert state(again, "ghost").status == "failed"  # tried again, not taken as known
